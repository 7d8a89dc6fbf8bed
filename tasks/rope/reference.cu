// rope reference: trusted and obviously correct. Runs in a trusted process only; agents never see
// this file. One thread per rotation pair (token, head, i), grid-stride; the rotation is computed in
// double from the bf16 inputs and the fp32 tables and rounded once to bf16.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

__global__ void rope_reference(const __nv_bfloat16* q, const __nv_bfloat16* k, const int* positions,
                               const float* cos_cache, const float* sin_cache, __nv_bfloat16* q_out,
                               __nv_bfloat16* k_out, int64_t tokens, int64_t q_heads, int64_t kv_heads,
                               int64_t head_dim) {
  const int64_t h = head_dim / 2;
  const int64_t heads = q_heads + kv_heads;
  const int64_t total = tokens * heads * h;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int64_t i = idx % h;
    const int64_t head = (idx / h) % heads;
    const int64_t t = idx / (h * heads);
    const __nv_bfloat16* x;
    __nv_bfloat16* y;
    if (head < q_heads) {
      x = q + (t * q_heads + head) * head_dim;
      y = q_out + (t * q_heads + head) * head_dim;
    } else {
      x = k + (t * kv_heads + (head - q_heads)) * head_dim;
      y = k_out + (t * kv_heads + (head - q_heads)) * head_dim;
    }
    const int64_t p = positions[t];
    const double c = static_cast<double>(cos_cache[p * h + i]);
    const double s = static_cast<double>(sin_cache[p * h + i]);
    const double x1 = static_cast<double>(__bfloat162float(x[i]));
    const double x2 = static_cast<double>(__bfloat162float(x[i + h]));
    y[i] = __double2bfloat16(x1 * c - x2 * s);
    y[i + h] = __double2bfloat16(x2 * c + x1 * s);
  }
}

}  // namespace

extern "C" int d2k_rope(const __nv_bfloat16* q, const __nv_bfloat16* k, const int* positions,
                        const float* cos_cache, const float* sin_cache, __nv_bfloat16* q_out,
                        __nv_bfloat16* k_out, int64_t tokens, int64_t q_heads, int64_t kv_heads,
                        int64_t head_dim, cudaStream_t stream) {
  if (tokens <= 0 || q_heads + kv_heads <= 0 || head_dim < 2) return 0;
  const int64_t total = tokens * (q_heads + kv_heads) * (head_dim / 2);
  const int threads = 256;
  const int64_t wanted = (total + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65536 ? wanted : 65536);
  rope_reference<<<blocks, threads, 0, stream>>>(q, k, positions, cos_cache, sin_cache, q_out, k_out,
                                                 tokens, q_heads, kv_heads, head_dim);
  return static_cast<int>(cudaGetLastError());
}
