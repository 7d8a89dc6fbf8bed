// rope: NeoX-layout rotary embedding on q (tokens x q_heads x head_dim) and k (tokens x kv_heads x
// head_dim), bf16. With h = head_dim / 2, p = positions[t], c = cos_cache[p][i], s = sin_cache[p][i]
// (fp32 tables of 4096 x h): out[i] = x[i] c - x[i + h] s, out[i + h] = x[i + h] c + x[i] s, fp32
// math, rounded once to bf16, into q_out and k_out.
//
// Write your kernel(s) and make d2k_rope launch them on `stream`. Return 0 on success
// (e.g. the value of cudaGetLastError() after your launches), non-zero on failure.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" int d2k_rope(const __nv_bfloat16* q, const __nv_bfloat16* k, const int* positions, const float* cos_cache, const float* sin_cache, __nv_bfloat16* q_out, __nv_bfloat16* k_out, int64_t tokens, int64_t q_heads, int64_t kv_heads, int64_t head_dim, cudaStream_t stream) {
  (void)q; (void)k; (void)positions; (void)cos_cache; (void)sin_cache; (void)q_out; (void)k_out;
  (void)tokens; (void)q_heads; (void)kv_heads; (void)head_dim; (void)stream;
  return 1;  // replace: launch your kernel on `stream` and return its error code
}
