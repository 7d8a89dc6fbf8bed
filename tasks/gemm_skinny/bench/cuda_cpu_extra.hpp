// Additions to tasks/stencil3d/bench/cuda_cpu_shim.hpp for the gemm_skinny kernels: __shfl_xor_sync,
// the allocator calls and cudaFuncSetAttribute. Included after the shim.
#pragma once
#include <cstdlib>
#include <cstring>

template <typename T> T __shfl_xor_sync(unsigned, T v, int mask) {
  const int w = t_linear / 32;
  long long x = 0;
  std::memcpy(&x, &v, sizeof(T));
  g_block->slots[w][t_linear % 32] = x;
  __syncwarp();
  long long o = g_block->slots[w][(t_linear % 32) ^ mask];
  __syncwarp();
  T r;
  std::memcpy(&r, &o, sizeof(T));
  return r;
}
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <typename K> cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int) { return cudaSuccess; }
inline cudaError_t cudaMalloc(void** p, size_t b) { *p = std::malloc(b); return *p ? cudaSuccess : 2; }
inline cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
