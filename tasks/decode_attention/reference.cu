// decode_attention reference (trusted; agents never see it): exact two-pass softmax in double, no
// online rescaling and no split. A block owns one (sequence, query head); thread t owns output
// dimension t (128 threads). Pass 1 computes every score of the sequence (thread per token, the dot
// product of bf16 values summed in double) and takes the maximum; pass 2 recomputes the scores 128
// tokens at a time, forms p = exp(s - max) in double, and every thread adds p * v[d] for its d.
// out = acc / sum(p), rounded once to bf16. A sequence without pages writes zeros.
#include <cmath>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

constexpr int kD = 128;     // head dimension
constexpr int kPage = 16;   // tokens per page

__device__ double block_reduce(double v, double* red, bool is_max) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kD / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s)
      red[threadIdx.x] = is_max ? fmax(red[threadIdx.x], red[threadIdx.x + s]) : red[threadIdx.x] + red[threadIdx.x + s];
    __syncthreads();
  }
  const double r = red[0];
  __syncthreads();
  return r;
}

__global__ void __launch_bounds__(kD)
decode_attention_reference(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                           const int* page_ptr, const int* page_idx, const int* last_len, __nv_bfloat16* out,
                           int64_t Hq, int64_t Hkv, double scale) {
  __shared__ double qs[kD];
  __shared__ double ps[kD];
  __shared__ double red[kD];
  const int tid = threadIdx.x;
  const int64_t b = blockIdx.y, h = blockIdx.x;
  const int64_t j = h / (Hq / Hkv);
  const int64_t first = page_ptr[b];
  const int64_t n = page_ptr[b + 1] - first;
  const int64_t L = n > 0 ? kPage * (n - 1) + last_len[b] : 0;
  __nv_bfloat16* o = out + (b * Hq + h) * kD;
  if (L == 0) {
    o[tid] = __float2bfloat16(0.0f);
    return;
  }
  qs[tid] = static_cast<double>(__bfloat162float(q[(b * Hq + h) * kD + tid]));
  __syncthreads();
  auto row = [&](const __nv_bfloat16* cache, int64_t t) {
    const int64_t page = page_idx[first + t / kPage];
    return cache + ((page * Hkv + j) * kPage + t % kPage) * kD;
  };
  auto score = [&](int64_t t) {
    const __nv_bfloat16* k = row(k_cache, t);
    double dot = 0.0;
    for (int d = 0; d < kD; ++d) dot += qs[d] * static_cast<double>(__bfloat162float(k[d]));
    return dot * scale;
  };
  double m = -INFINITY;
  for (int64_t t = tid; t < L; t += kD) m = fmax(m, score(t));
  m = block_reduce(m, red, true);
  double sum = 0.0, acc = 0.0;
  for (int64_t t0 = 0; t0 < L; t0 += kD) {
    const double p = t0 + tid < L ? exp(score(t0 + tid) - m) : 0.0;
    sum += p;
    ps[tid] = p;
    __syncthreads();
    const int64_t cnt = L - t0 < kD ? L - t0 : kD;
    for (int64_t i = 0; i < cnt; ++i)
      acc += ps[i] * static_cast<double>(__bfloat162float(row(v_cache, t0 + i)[tid]));
    __syncthreads();
  }
  sum = block_reduce(sum, red, false);
  o[tid] = __double2bfloat16(acc / sum);
}

extern "C" int d2k_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                    const __nv_bfloat16* v_cache, const int* page_ptr, const int* page_idx,
                                    const int* last_len, __nv_bfloat16* out, int64_t B, int64_t Hq, int64_t Hkv,
                                    int64_t num_pages, cudaStream_t stream) {
  (void)num_pages;
  if (B < 1 || Hq < 1 || Hkv < 1 || Hq % Hkv != 0) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(Hq), static_cast<unsigned>(B));
  decode_attention_reference<<<grid, kD, 0, stream>>>(
      q, k_cache, v_cache, page_ptr, page_idx, last_len, out, Hq, Hkv, 1.0 / std::sqrt(static_cast<double>(kD)));
  return static_cast<int>(cudaGetLastError());
}
