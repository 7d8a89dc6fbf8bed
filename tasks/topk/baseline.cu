// topk baseline: the kernel a beginner writes first. Correct, but it selects the k winners one at
// a time: one block per row, and k rounds, each a full pass over the row for the best element
// that comes after the previous winner in the order (value descending, index ascending), then a
// shared-memory tree to combine the threads' bests. k passes over the row instead of a few.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__device__ unsigned order_key(float v) {
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// (key, index) packed so that a larger word is an earlier element of the output order.
__device__ unsigned long long rank_word(unsigned key, int64_t idx) {
  return (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - static_cast<unsigned>(idx));
}

__global__ void topk_rounds(const float* x, float* values, int* indices, int64_t vocab, int k) {
  __shared__ unsigned long long best[kThreads];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * vocab;
  unsigned long long previous = ~0ull;  // every element comes after "nothing chosen yet"
  for (int j = 0; j < k; ++j) {
    unsigned long long mine = 0;
    for (int64_t c = threadIdx.x; c < vocab; c += kThreads) {
      const unsigned long long w = rank_word(order_key(xr[c]), c);
      if (w < previous && w > mine) mine = w;
    }
    best[threadIdx.x] = mine;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s /= 2) {
      if (static_cast<int>(threadIdx.x) < s && best[threadIdx.x + s] > best[threadIdx.x]) best[threadIdx.x] = best[threadIdx.x + s];
      __syncthreads();
    }
    previous = best[0];
    __syncthreads();
    if (threadIdx.x == 0) {
      const int idx = static_cast<int>(0xffffffffu - static_cast<unsigned>(previous));
      values[row * k + j] = xr[idx];
      indices[row * k + j] = idx;
    }
  }
}

}  // namespace

extern "C" int d2k_topk(const float* x, float* values, int* indices, int64_t rows, int64_t vocab, int64_t k,
                        cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0 || k <= 0) return 0;
  topk_rounds<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, values, indices, vocab, static_cast<int>(k));
  return static_cast<int>(cudaGetLastError());
}
