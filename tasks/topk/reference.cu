// topk reference: trusted and obviously correct. Runs in a trusted process only; agents never see
// this file. One block per row. Every float maps to a 32-bit key whose unsigned order is the float
// order (-0.0 just below +0.0). 1) The k-th largest key T of the row, bit by bit from the top:
// T is the largest t with count(key >= t) >= k (32 counting passes). 2) Thread 0 walks the row in
// index order and keeps every element with key > T, then elements with key == T until it has k
// (so ties at the threshold go to the smallest indices). 3) Each kept element's output position is
// the number of kept elements before it in the order (key descending, index ascending).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kMaxK = 1024;

__device__ unsigned order_key(float v) {
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(kThreads)
topk_reference(const float* x, float* values, int* indices, int64_t vocab, int k) {
  __shared__ unsigned count;
  __shared__ int sel_idx[kMaxK];
  __shared__ unsigned sel_key[kMaxK];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * vocab;

  unsigned threshold = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const unsigned candidate = threshold | (1u << bit);
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    unsigned mine = 0;
    for (int64_t c = threadIdx.x; c < vocab; c += kThreads) mine += order_key(xr[c]) >= candidate ? 1u : 0u;
    atomicAdd(&count, mine);
    __syncthreads();
    if (count >= static_cast<unsigned>(k)) threshold = candidate;
    __syncthreads();
  }

  if (threadIdx.x == 0) {
    int kept = 0;
    for (int64_t c = 0; c < vocab; ++c) {
      const unsigned key = order_key(xr[c]);
      if (key > threshold) { sel_idx[kept] = static_cast<int>(c); sel_key[kept] = key; ++kept; }
    }
    for (int64_t c = 0; c < vocab && kept < k; ++c) {
      const unsigned key = order_key(xr[c]);
      if (key == threshold) { sel_idx[kept] = static_cast<int>(c); sel_key[kept] = key; ++kept; }
    }
  }
  __syncthreads();

  for (int i = threadIdx.x; i < k; i += kThreads) {
    int rank = 0;
    for (int j = 0; j < k; ++j) {
      const bool before = sel_key[j] > sel_key[i] || (sel_key[j] == sel_key[i] && sel_idx[j] < sel_idx[i]);
      rank += before ? 1 : 0;
    }
    values[row * k + rank] = xr[sel_idx[i]];
    indices[row * k + rank] = sel_idx[i];
  }
}

}  // namespace

extern "C" int d2k_topk(const float* x, float* values, int* indices, int64_t rows, int64_t vocab, int64_t k,
                        cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0 || k <= 0) return 0;
  if (k > kMaxK || k > vocab || rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  topk_reference<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, values, indices, vocab, static_cast<int>(k));
  return static_cast<int>(cudaGetLastError());
}
