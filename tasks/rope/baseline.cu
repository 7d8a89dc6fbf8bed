// rope baseline: the kernel a beginner writes first ("for each token, for each head, rotate").
// Correct, but one thread owns a whole token: the 32 threads of a warp walk 32 tokens whose q rows
// are q_heads x head_dim x 2 bytes apart (8 KB for Llama-3-8B), so every load and store instruction
// touches 32 different cache lines, and only `tokens` threads exist to hide the memory latency.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void rope_thread_per_token(const __nv_bfloat16* q, const __nv_bfloat16* k, const int* positions,
                                      const float* cos_cache, const float* sin_cache, __nv_bfloat16* q_out,
                                      __nv_bfloat16* k_out, int64_t tokens, int64_t q_heads,
                                      int64_t kv_heads, int64_t head_dim) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  const int64_t h = head_dim / 2;
  const int64_t p = positions[t];
  for (int64_t head = 0; head < q_heads + kv_heads; ++head) {
    const bool is_q = head < q_heads;
    const int64_t row = is_q ? t * q_heads + head : t * kv_heads + (head - q_heads);
    const __nv_bfloat16* x = (is_q ? q : k) + row * head_dim;
    __nv_bfloat16* y = (is_q ? q_out : k_out) + row * head_dim;
    for (int64_t i = 0; i < h; ++i) {
      const float c = cos_cache[p * h + i], s = sin_cache[p * h + i];
      const float x1 = __bfloat162float(x[i]), x2 = __bfloat162float(x[i + h]);
      y[i] = __float2bfloat16(x1 * c - x2 * s);
      y[i + h] = __float2bfloat16(x2 * c + x1 * s);
    }
  }
}

extern "C" int d2k_rope(const __nv_bfloat16* q, const __nv_bfloat16* k, const int* positions,
                        const float* cos_cache, const float* sin_cache, __nv_bfloat16* q_out,
                        __nv_bfloat16* k_out, int64_t tokens, int64_t q_heads, int64_t kv_heads,
                        int64_t head_dim, cudaStream_t stream) {
  if (tokens <= 0) return 0;
  const int threads = 128;
  const int64_t blocks = (tokens + threads - 1) / threads;
  rope_thread_per_token<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      q, k, positions, cos_cache, sin_cache, q_out, k_out, tokens, q_heads, kv_heads, head_dim);
  return static_cast<int>(cudaGetLastError());
}
