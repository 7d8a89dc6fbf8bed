// radix_sort expert, layer 2 (dataflow): onesweep. 8-bit digits, 4 passes, and each pass is one
// kernel that reads its input once and writes its output once. Before the passes, one kernel reads
// the keys once and counts all four digit histograms (the global start of every digit of every
// pass). In a pass, each block takes the next tile of 2,048 elements from an atomic counter (so
// every earlier tile is already running), counts its 256 digits, publishes them (status
// "aggregate"), sorts the tile by the digit in shared memory (two stable 4-bit counting sorts),
// then looks back over the earlier tiles' published counts, per digit, until it meets an
// "inclusive" one: that gives the tile's output offset per digit, which it publishes as inclusive
// for the tiles after it, and it writes the sorted tile out. No scan kernel, no second read.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kItems = 8;
constexpr int kTile = kThreads * kItems;
constexpr int kRadix = 256;
constexpr int kPasses = 4;
constexpr int kHistBlocks = 264;
constexpr uint32_t kAggregate = 1u << 30;
constexpr uint32_t kInclusive = 2u << 30;
constexpr uint32_t kValueMask = (1u << 30) - 1u;

__global__ void __launch_bounds__(kThreads) all_histograms(const uint32_t* keys, int64_t n, uint32_t* hist) {
  __shared__ uint32_t h[kPasses * kRadix];
  for (int i = threadIdx.x; i < kPasses * kRadix; i += kThreads) h[i] = 0;
  __syncthreads();
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * kThreads) {
    const uint32_t key = keys[e];
    for (int p = 0; p < kPasses; ++p) atomicAdd(&h[p * kRadix + ((key >> (8 * p)) & 255u)], 1u);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kPasses * kRadix; i += kThreads) atomicAdd(&hist[i], h[i]);
}

__device__ uint32_t block_exclusive_scan(uint32_t v, uint32_t* tmp) {
  tmp[threadIdx.x] = v;
  __syncthreads();
  for (int off = 1; off < kThreads; off <<= 1) {
    const uint32_t add = threadIdx.x >= static_cast<unsigned>(off) ? tmp[threadIdx.x - off] : 0u;
    __syncthreads();
    tmp[threadIdx.x] += add;
    __syncthreads();
  }
  const uint32_t r = tmp[threadIdx.x] - v;
  __syncthreads();
  return r;
}

// Stable counting sort of the tile by the 4-bit value nib(key) in shared memory. In: the thread's
// 8 consecutive tile elements in k/v (nib 15 for padding, which must sort last). Out: k/v hold the
// thread's 8 consecutive elements of the sorted tile (also left in s_keys/s_vals).
__device__ void split4(uint32_t (&k)[kItems], uint32_t (&v)[kItems], const unsigned (&nib)[kItems], uint32_t* s_keys,
                       uint32_t* s_vals, uint32_t* s_cnt, uint32_t* s_scan) {
  const int t = threadIdx.x;
  for (int c = 0; c < 16; ++c) s_cnt[c * kThreads + t] = 0;
  for (int i = 0; i < kItems; ++i) s_cnt[nib[i] * kThreads + t] += 1;
  __syncthreads();
  uint32_t own = 0;
  for (int j = 0; j < 16; ++j) own += s_cnt[t * 16 + j];
  uint32_t run = block_exclusive_scan(own, s_scan);
  for (int j = 0; j < 16; ++j) { const uint32_t c = s_cnt[t * 16 + j]; s_cnt[t * 16 + j] = run; run += c; }
  __syncthreads();
  for (int i = 0; i < kItems; ++i) {
    const uint32_t pos = s_cnt[nib[i] * kThreads + t]++;
    s_keys[pos] = k[i];
    s_vals[pos] = v[i];
  }
  __syncthreads();
  for (int i = 0; i < kItems; ++i) { k[i] = s_keys[t * kItems + i]; v[i] = s_vals[t * kItems + i]; }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
onesweep_pass(const uint32_t* keys, const uint32_t* vals, uint32_t* keys_out, uint32_t* vals_out, int64_t n,
              int shift, const uint32_t* hist, uint32_t* state, uint32_t* tile_counter) {
  __shared__ uint32_t s_keys[kTile];
  __shared__ uint32_t s_vals[kTile];
  __shared__ uint32_t s_cnt[16 * kThreads];
  __shared__ uint32_t s_scan[kThreads];
  __shared__ uint32_t s_count[kRadix];   // this tile's digit counts
  __shared__ uint32_t s_start[kRadix];   // first slot of each digit in the sorted tile
  __shared__ uint32_t s_offset[kRadix];  // first output slot of each digit of this tile
  __shared__ uint32_t s_tile;
  const int t = threadIdx.x;
  if (t == 0) s_tile = atomicAdd(tile_counter, 1u);
  s_count[t] = 0;
  __syncthreads();
  const uint32_t tile = s_tile;
  const int64_t base = static_cast<int64_t>(tile) * kTile;
  const int valid = static_cast<int>(n - base < kTile ? n - base : kTile);

  uint32_t k[kItems], v[kItems];
  unsigned d[kItems], nib[kItems];
  for (int i = 0; i < kItems; ++i) {
    const int e = t * kItems + i;
    k[i] = e < valid ? keys[base + e] : 0xffffffffu;
    v[i] = e < valid ? vals[base + e] : 0u;
    d[i] = e < valid ? (k[i] >> shift) & 255u : 255u;
    if (e < valid) atomicAdd(&s_count[d[i]], 1u);
  }
  __syncthreads();
  // Publish this tile's counts (digit t) for the tiles after it.
  volatile uint32_t* my_state = state + static_cast<int64_t>(tile) * kRadix;
  my_state[t] = (tile == 0 ? kInclusive : kAggregate) | s_count[t];
  const uint32_t digit_base = block_exclusive_scan(hist[t], s_scan);  // global start of digit t
  s_start[t] = block_exclusive_scan(s_count[t], s_scan);

  // Sort the tile by the digit: low nibble, then high nibble (both stable).
  for (int i = 0; i < kItems; ++i) nib[i] = d[i] & 15u;
  split4(k, v, nib, s_keys, s_vals, s_cnt, s_scan);
  for (int i = 0; i < kItems; ++i) {
    const int e = t * kItems + i;
    nib[i] = e < valid ? (k[i] >> (shift + 4)) & 15u : 15u;
  }
  split4(k, v, nib, s_keys, s_vals, s_cnt, s_scan);  // s_keys/s_vals: the sorted tile

  // Look back over the earlier tiles for digit t.
  uint32_t before = 0;
  if (tile > 0) {
    int64_t j = static_cast<int64_t>(tile) - 1;
    while (true) {
      const uint32_t w = *(static_cast<volatile uint32_t*>(state) + j * kRadix + t);
      if ((w & ~kValueMask) == 0) continue;  // not published yet
      before += w & kValueMask;
      if ((w & ~kValueMask) == kInclusive) break;
      --j;
    }
    my_state[t] = kInclusive | (before + s_count[t]);
  }
  s_offset[t] = digit_base + before;
  __syncthreads();
  for (int p = t; p < valid; p += kThreads) {
    const uint32_t key = s_keys[p];
    const unsigned dig = (key >> shift) & 255u;
    const int64_t out = static_cast<int64_t>(s_offset[dig]) + (p - static_cast<int>(s_start[dig]));
    keys_out[out] = key;
    vals_out[out] = s_vals[p];
  }
}

struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
};

cudaError_t ensure(Scratch& s, size_t bytes) {
  if (s.bytes >= bytes) return cudaSuccess;
  if (s.ptr != nullptr) cudaFree(s.ptr);
  s.ptr = nullptr;
  s.bytes = 0;
  const cudaError_t err = cudaMalloc(&s.ptr, bytes);
  if (err == cudaSuccess) s.bytes = bytes;
  return err;
}

}  // namespace

extern "C" int d2k_radix_sort(const uint32_t* keys_in, const uint32_t* vals_in, uint32_t* keys_out,
                              uint32_t* vals_out, int64_t n, cudaStream_t stream) {
  static Scratch scratch;  // kept between calls: temporary keys and values, histograms, tile states
  if (n <= 0) return 0;
  if (n > (int64_t{1} << 30) - 1) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t tiles = (n + kTile - 1) / kTile;
  // Layout (32-bit words): tmp keys [n], tmp values [n], then the zeroed part: histograms
  // [4 x 256], tile counters [4], tile states [4 x tiles x 256].
  const int64_t zeroed = kPasses * kRadix + kPasses + kPasses * tiles * kRadix;
  cudaError_t err = ensure(scratch, static_cast<size_t>(2 * n + zeroed) * sizeof(uint32_t));
  if (err != cudaSuccess) return static_cast<int>(err);
  uint32_t* tmp_keys = static_cast<uint32_t*>(scratch.ptr);
  uint32_t* tmp_vals = tmp_keys + n;
  uint32_t* hist = tmp_vals + n;
  uint32_t* counters = hist + kPasses * kRadix;
  uint32_t* states = counters + kPasses;
  err = cudaMemsetAsync(hist, 0, static_cast<size_t>(zeroed) * sizeof(uint32_t), stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int64_t hist_blocks = (n + kThreads - 1) / kThreads < kHistBlocks ? (n + kThreads - 1) / kThreads : kHistBlocks;
  all_histograms<<<static_cast<unsigned>(hist_blocks), kThreads, 0, stream>>>(keys_in, n, hist);
  const uint32_t* src_k = keys_in;
  const uint32_t* src_v = vals_in;
  for (int pass = 0; pass < kPasses; ++pass) {  // in -> tmp -> out -> tmp -> out
    uint32_t* dst_k = pass % 2 == 0 ? tmp_keys : keys_out;
    uint32_t* dst_v = pass % 2 == 0 ? tmp_vals : vals_out;
    onesweep_pass<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
        src_k, src_v, dst_k, dst_v, n, 8 * pass, hist + pass * kRadix, states + pass * tiles * kRadix, counters + pass);
    src_k = dst_k;
    src_v = dst_v;
  }
  return static_cast<int>(cudaGetLastError());
}
