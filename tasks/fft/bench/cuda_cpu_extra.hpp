// Additions to tasks/stencil3d/bench/cuda_cpu_shim.hpp for the fft and gemm_skinny kernels: float2,
// the sin/cos variants, the allocator calls and cudaFuncSetAttribute. Included after the shim.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>

struct float2 { float x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline void sincospif(float a, float* s, float* c) {
  const double t = M_PI * static_cast<double>(a);
  *s = static_cast<float>(std::sin(t));
  *c = static_cast<float>(std::cos(t));
}
inline void sincospi(double a, double* s, double* c) { *s = std::sin(M_PI * a); *c = std::cos(M_PI * a); }
inline void __sincosf(float a, float* s, float* c) { *s = std::sin(a); *c = std::cos(a); }
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <typename K> cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int) { return cudaSuccess; }
inline cudaError_t cudaMalloc(void** p, size_t b) { *p = std::malloc(b); return *p ? cudaSuccess : 2; }
inline cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
inline cudaError_t cudaMallocAsync(void** p, size_t b, cudaStream_t) { return cudaMalloc(p, b); }
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
enum { cudaErrorMemoryAllocation = 2 };
// Shared-memory addresses of the emulation: offsets into the block's dynamic shared buffer (the
// L3 emulation, emulate_l3.py, only uses them for that buffer).
inline uint32_t __cvta_generic_to_shared(const void* p) {
  return static_cast<uint32_t>(static_cast<const unsigned char*>(p) - d2k_dyn_smem());
}
