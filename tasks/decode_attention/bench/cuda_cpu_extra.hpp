// What decode_attention's reference, baseline, L1 and L2 use beyond ../../stencil3d/bench/cuda_cpu_shim.hpp:
// warp shuffles and votes, cp.async (run_cpu_check.sh rewrites the asm into d2k_cp_async16: the copy
// happens at once, so commit and wait are no-ops), the allocator and a few types. Included after the shim.
#pragma once
#include <cstdlib>
#include <algorithm>
#include <cstring>

struct float2 { float x, y; };
struct uint2 { unsigned x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }
#define __restrict__
using std::max;
using std::min;
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
inline bool __any_sync(unsigned, bool p) {
  const int w = t_linear / 32;
  g_block->slots[w][t_linear % 32] = p ? 1 : 0;
  __syncwarp();
  bool any = false;
  for (int l = 0; l < 32; ++l) any = any || g_block->slots[w][l] != 0;
  __syncwarp();
  return any;
}
inline void d2k_cp_async16(void* dst, const void* src) { std::memcpy(dst, src, 16); }
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <typename K> cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int) { return cudaSuccess; }
inline cudaError_t cudaMalloc(void** p, size_t b) { *p = std::malloc(b); return *p ? cudaSuccess : 2; }
inline cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
