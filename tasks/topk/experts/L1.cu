// topk expert, layer 1 (algorithm): radix select of the per-row threshold. One block of 1024
// threads per row. Four passes over the row, 8 bits of the order key each from the top, count the
// keys that match the digits chosen so far in a 256-bin shared-memory histogram; the bucket where
// the running count from the top reaches k gives the next digit. After 32 bits the threshold T is
// the k-th largest key, and exactly k - need keys are above it. A fifth pass gathers those and the
// `need` ties at T (all of them when the histogram says there are exactly `need`; otherwise, rarely,
// thread 0 walks the row in index order so the smallest indices win). A bitonic sort of the k
// (key, index) words in shared memory puts them in output order.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 1024;
constexpr int kMaxK = 1024;

__device__ __forceinline__ unsigned order_key(float v) {
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_value(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// A larger word is an earlier output element: key descending, then index ascending.
__device__ __forceinline__ unsigned long long rank_word(unsigned key, int64_t idx) {
  return (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - static_cast<unsigned>(idx));
}

// Sorts s[0, p) descending (p a power of two, at most kMaxK); ends with a barrier.
__device__ void bitonic_sort_desc(unsigned long long* s, int p) {
  for (int size = 2; size <= p; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < p; i += kThreads) {
        const int j = i ^ stride;
        if (j > i) {
          const unsigned long long a = s[i], b = s[j];
          const bool desc = (i & size) == 0;
          if (desc ? a < b : a > b) { s[i] = b; s[j] = a; }
        }
      }
      __syncthreads();
    }
  }
}

__global__ void __launch_bounds__(kThreads)
topk_radix_select(const float* x, float* values, int* indices, int64_t vocab, int k) {
  __shared__ unsigned hist[256];
  __shared__ unsigned s_digit, s_need, s_ties, s_gt, s_eq;
  __shared__ unsigned long long sel[kMaxK];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * vocab;

  unsigned prefix = 0, mask = 0, need = static_cast<unsigned>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (threadIdx.x < 256) hist[threadIdx.x] = 0;
    __syncthreads();
    for (int64_t c = threadIdx.x; c < vocab; c += kThreads) {
      const unsigned key = order_key(xr[c]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned above = 0;
      int d = 255;
      for (; d > 0; --d) {
        if (above + hist[d] >= need) break;
        above += hist[d];
      }
      s_digit = static_cast<unsigned>(d);
      s_need = need - above;
      s_ties = hist[d];
    }
    __syncthreads();
    prefix |= s_digit << shift;
    mask |= 255u << shift;
    need = s_need;
    __syncthreads();
  }
  const unsigned threshold = prefix;
  const unsigned above = static_cast<unsigned>(k) - need;  // keys > threshold, all selected
  const bool all_ties = s_ties == need;

  if (threadIdx.x == 0) { s_gt = 0; s_eq = 0; }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < vocab; c += kThreads) {
    const unsigned key = order_key(xr[c]);
    if (key > threshold) sel[atomicAdd(&s_gt, 1u)] = rank_word(key, c);
    else if (key == threshold && all_ties) sel[above + atomicAdd(&s_eq, 1u)] = rank_word(key, c);
  }
  __syncthreads();
  if (!all_ties && threadIdx.x == 0) {  // more ties than places: the smallest indices win
    unsigned got = 0;
    for (int64_t c = 0; c < vocab && got < need; ++c) {
      const unsigned key = order_key(xr[c]);
      if (key == threshold) sel[above + got++] = rank_word(key, c);
    }
  }
  int p = 1;
  while (p < k) p <<= 1;
  for (int i = k + static_cast<int>(threadIdx.x); i < p; i += kThreads) sel[i] = 0;  // sorts last
  __syncthreads();
  bitonic_sort_desc(sel, p);
  for (int j = threadIdx.x; j < k; j += kThreads) {
    const unsigned long long w = sel[j];
    values[row * k + j] = key_value(static_cast<unsigned>(w >> 32));
    indices[row * k + j] = static_cast<int>(0xffffffffu - static_cast<unsigned>(w));
  }
}

}  // namespace

extern "C" int d2k_topk(const float* x, float* values, int* indices, int64_t rows, int64_t vocab, int64_t k,
                        cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0 || k <= 0) return 0;
  if (k > kMaxK || k > vocab) return static_cast<int>(cudaErrorInvalidValue);
  topk_radix_select<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, values, indices, vocab, static_cast<int>(k));
  return static_cast<int>(cudaGetLastError());
}
