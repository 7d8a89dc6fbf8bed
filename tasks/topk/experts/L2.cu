// topk expert, layer 2 (dataflow): two passes over the row, the candidates in shared memory. One
// block of 1024 threads per row. Pass 1 counts the top 11 bits of every order key (2048 bins in
// shared memory) and finds the bin b where the count from the top reaches k. Pass 2 appends every
// element of bins >= b, as a (key, index) word, to a shared-memory buffer of 4096 words; a bitonic
// sort of the buffer (ties are ordered by the index inside the word) gives the k winners in output
// order. The row crosses DRAM twice instead of five times. If bins >= b hold more than 4096
// elements (heavy ties or a flat distribution), the block falls back to layer 1's radix select over
// the remaining 21 bits, then gathers the k winners into the same buffer.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 1024;
constexpr int kMaxK = 1024;
constexpr int kTopBits = 11;
constexpr int kBins = 1 << kTopBits;
constexpr int kCap = 4096;  // candidate words in shared memory

__device__ __forceinline__ unsigned order_key(float v) {
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_value(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

__device__ __forceinline__ unsigned long long rank_word(unsigned key, int64_t idx) {
  return (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - static_cast<unsigned>(idx));
}

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

struct Shared {
  unsigned hist[kBins];
  unsigned long long buf[kCap];
  unsigned digit, need, ties, count, count2;
};

// Thread 0: the digit whose bucket holds the need-th largest key (counting from the top).
__device__ void pick_digit(Shared& s, int bins, unsigned need) {
  unsigned above = 0;
  int d = bins - 1;
  for (; d > 0; --d) {
    if (above + s.hist[d] >= need) break;
    above += s.hist[d];
  }
  s.digit = static_cast<unsigned>(d);
  s.need = need - above;
  s.ties = s.hist[d];
}

__global__ void __launch_bounds__(kThreads)
topk_two_pass(const float* x, float* values, int* indices, int64_t vocab, int k) {
  __shared__ Shared s;
  const int64_t row = blockIdx.x;
  const float* xr = x + row * vocab;

  for (int i = threadIdx.x; i < kBins; i += kThreads) s.hist[i] = 0;
  __syncthreads();
  for (int64_t c = threadIdx.x; c < vocab; c += kThreads) atomicAdd(&s.hist[order_key(xr[c]) >> (32 - kTopBits)], 1u);
  __syncthreads();
  if (threadIdx.x == 0) {
    pick_digit(s, kBins, static_cast<unsigned>(k));
    s.count = 0;
    s.count2 = 0;
  }
  __syncthreads();
  const unsigned b = s.digit;
  const unsigned candidates = static_cast<unsigned>(k) - s.need + s.ties;
  int p = 1;

  if (candidates <= static_cast<unsigned>(kCap)) {
    for (int64_t c = threadIdx.x; c < vocab; c += kThreads) {
      const unsigned key = order_key(xr[c]);
      if ((key >> (32 - kTopBits)) >= b) s.buf[atomicAdd(&s.count, 1u)] = rank_word(key, c);
    }
    while (p < static_cast<int>(candidates)) p <<= 1;
    for (int i = static_cast<int>(candidates) + static_cast<int>(threadIdx.x); i < p; i += kThreads) s.buf[i] = 0;
    __syncthreads();
  } else {
    // Fallback: radix select over the low 21 bits (8 + 8 + 5), as in layer 1.
    unsigned prefix = b << (32 - kTopBits), mask = 0xffffffffu << (32 - kTopBits), need = s.need;
    const int shifts[3] = {13, 5, 0};
    const int widths[3] = {8, 8, 5};
    for (int pass = 0; pass < 3; ++pass) {
      const int shift = shifts[pass];
      const unsigned dmask = (1u << widths[pass]) - 1u;
      for (int i = threadIdx.x; i <= static_cast<int>(dmask); i += kThreads) s.hist[i] = 0;
      __syncthreads();
      for (int64_t c = threadIdx.x; c < vocab; c += kThreads) {
        const unsigned key = order_key(xr[c]);
        if ((key & mask) == prefix) atomicAdd(&s.hist[(key >> shift) & dmask], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) pick_digit(s, static_cast<int>(dmask) + 1, need);
      __syncthreads();
      prefix |= s.digit << shift;
      mask |= dmask << shift;
      need = s.need;
      __syncthreads();
    }
    const unsigned threshold = prefix;
    const unsigned above = static_cast<unsigned>(k) - need;
    const bool all_ties = s.ties == need;
    for (int64_t c = threadIdx.x; c < vocab; c += kThreads) {
      const unsigned key = order_key(xr[c]);
      if (key > threshold) s.buf[atomicAdd(&s.count, 1u)] = rank_word(key, c);
      else if (key == threshold && all_ties) s.buf[above + atomicAdd(&s.count2, 1u)] = rank_word(key, c);
    }
    __syncthreads();
    if (!all_ties && threadIdx.x == 0) {
      unsigned got = 0;
      for (int64_t c = 0; c < vocab && got < need; ++c) {
        const unsigned key = order_key(xr[c]);
        if (key == threshold) s.buf[above + got++] = rank_word(key, c);
      }
    }
    while (p < k) p <<= 1;
    for (int i = k + static_cast<int>(threadIdx.x); i < p; i += kThreads) s.buf[i] = 0;
    __syncthreads();
  }
  bitonic_sort_desc(s.buf, p);
  for (int j = threadIdx.x; j < k; j += kThreads) {
    const unsigned long long w = s.buf[j];
    values[row * k + j] = key_value(static_cast<unsigned>(w >> 32));
    indices[row * k + j] = static_cast<int>(0xffffffffu - static_cast<unsigned>(w));
  }
}

}  // namespace

extern "C" int d2k_topk(const float* x, float* values, int* indices, int64_t rows, int64_t vocab, int64_t k,
                        cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0 || k <= 0) return 0;
  if (k > kMaxK || k > vocab) return static_cast<int>(cudaErrorInvalidValue);
  topk_two_pass<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, values, indices, vocab, static_cast<int>(k));
  return static_cast<int>(cudaGetLastError());
}
