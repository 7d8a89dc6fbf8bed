// decode_attention baseline: one thread per (sequence, query head). The thread walks its sequence's
// tokens in order with an online softmax in fp32: score the token against q (held in registers),
// rescale the running sum and the 128 accumulators when the maximum grows, add p * v. Correct but
// naive: a few hundred threads each stream megabytes serially, and the G query heads of a kv head
// read the same keys and values G times.
#include <cmath>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

constexpr int kD = 128;
constexpr int kPage = 16;

__global__ void decode_attention_baseline(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                          const __nv_bfloat16* v_cache, const int* page_ptr, const int* page_idx,
                                          const int* last_len, __nv_bfloat16* out, int64_t B, int64_t Hq,
                                          int64_t Hkv, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= B * Hq) return;
  const int64_t b = i / Hq, h = i % Hq, j = h / (Hq / Hkv);
  const int first = page_ptr[b];
  const int n = page_ptr[b + 1] - first;
  const int L = n > 0 ? kPage * (n - 1) + last_len[b] : 0;
  float qr[kD], acc[kD];
  for (int d = 0; d < kD; ++d) {
    qr[d] = __bfloat162float(q[i * kD + d]) * scale;
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int t = 0; t < L; ++t) {
    const int64_t page = page_idx[first + t / kPage];
    const int64_t off = ((page * Hkv + j) * kPage + t % kPage) * kD;
    float s = 0.0f;
    for (int d = 0; d < kD; ++d) s += qr[d] * __bfloat162float(k_cache[off + d]);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // 0 on the first token (m = -inf)
    const float p = expf(s - m_new);
    l = l * corr + p;
    for (int d = 0; d < kD; ++d) acc[d] = acc[d] * corr + p * __bfloat162float(v_cache[off + d]);
    m = m_new;
  }
  for (int d = 0; d < kD; ++d) out[i * kD + d] = __float2bfloat16(L > 0 ? acc[d] / l : 0.0f);
}

extern "C" int d2k_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                    const __nv_bfloat16* v_cache, const int* page_ptr, const int* page_idx,
                                    const int* last_len, __nv_bfloat16* out, int64_t B, int64_t Hq, int64_t Hkv,
                                    int64_t num_pages, cudaStream_t stream) {
  (void)num_pages;
  const int64_t threads = B * Hq;
  const int block = 128;
  const unsigned blocks = static_cast<unsigned>((threads + block - 1) / block);
  decode_attention_baseline<<<blocks, block, 0, stream>>>(
      q, k_cache, v_cache, page_ptr, page_idx, last_len, out, B, Hq, Hkv, 1.0f / sqrtf(static_cast<float>(kD)));
  return static_cast<int>(cudaGetLastError());
}
