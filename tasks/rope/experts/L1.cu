// rope expert, layer 1 (algorithm): one block of 256 threads per token; the token's rotation pairs
// (heads x head_dim / 2 of them) are split over the threads so that consecutive threads take
// consecutive i of the same head: each warp reads 64 contiguous bytes of x1, 64 of x2 and 128 of
// each table per instruction. The position is read once per thread; the head and i of a pair come
// from one 32-bit division per pair.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
rope_block_per_token(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                     const int* __restrict__ positions, const float* __restrict__ cos_cache,
                     const float* __restrict__ sin_cache, __nv_bfloat16* __restrict__ q_out,
                     __nv_bfloat16* __restrict__ k_out, int q_heads, int kv_heads, int head_dim) {
  const int64_t t = blockIdx.x;
  const int h = head_dim / 2;
  const int pairs = (q_heads + kv_heads) * h;
  const int64_t p = positions[t];
  const float* cr = cos_cache + p * h;
  const float* sr = sin_cache + p * h;
  for (int j = static_cast<int>(threadIdx.x); j < pairs; j += kThreads) {
    const int head = j / h;
    const int i = j - head * h;
    const bool is_q = head < q_heads;
    const int64_t row = is_q ? t * q_heads + head : t * kv_heads + (head - q_heads);
    const __nv_bfloat16* x = (is_q ? q : k) + row * head_dim;
    __nv_bfloat16* y = (is_q ? q_out : k_out) + row * head_dim;
    const float c = cr[i], s = sr[i];
    const float x1 = __bfloat162float(x[i]), x2 = __bfloat162float(x[i + h]);
    y[i] = __float2bfloat16(x1 * c - x2 * s);
    y[i + h] = __float2bfloat16(x2 * c + x1 * s);
  }
}

}  // namespace

extern "C" int d2k_rope(const __nv_bfloat16* q, const __nv_bfloat16* k, const int* positions,
                        const float* cos_cache, const float* sin_cache, __nv_bfloat16* q_out,
                        __nv_bfloat16* k_out, int64_t tokens, int64_t q_heads, int64_t kv_heads,
                        int64_t head_dim, cudaStream_t stream) {
  if (tokens <= 0) return 0;
  if (tokens > 0x7fffffff || (q_heads + kv_heads) * (head_dim / 2) > 0x7fffffff)
    return static_cast<int>(cudaErrorInvalidValue);
  rope_block_per_token<<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(
      q, k, positions, cos_cache, sin_cache, q_out, k_out, static_cast<int>(q_heads),
      static_cast<int>(kv_heads), static_cast<int>(head_dim));
  return static_cast<int>(cudaGetLastError());
}
