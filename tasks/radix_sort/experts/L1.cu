// radix_sort expert, layer 1 (algorithm): LSD radix sort with per-block histograms, a scan and a
// stable block scatter. 4-bit digits, 8 passes; per pass three kernels over tiles of 2,048 elements
// (256 threads x 8): (1) each block counts its tile's 16 digits in shared memory and writes them to
// a digit-major matrix counts[digit][tile]; (2) one block scans the matrix (exclusive): entry
// (d, b) becomes the first output slot of tile b's elements with digit d; (3) each block sorts its
// tile by the digit in shared memory (a stable counting sort: every thread counts the digits of its
// 8 consecutive elements, a block scan over (digit, thread) gives every element its place) and
// writes the tile out, runs of equal digits landing contiguously. Stable: ties keep tile order and
// tiles keep their order.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kItems = 8;
constexpr int kTile = kThreads * kItems;
constexpr int kBits = 4;
constexpr int kDigits = 1 << kBits;
constexpr int kScanThreads = 1024;

__device__ __forceinline__ unsigned digit_of(uint32_t key, int shift) { return (key >> shift) & (kDigits - 1); }

__global__ void __launch_bounds__(kThreads)
tile_histograms(const uint32_t* keys, int64_t n, int shift, uint32_t* counts, int64_t tiles) {
  __shared__ uint32_t hist[kDigits];
  if (threadIdx.x < kDigits) hist[threadIdx.x] = 0;
  __syncthreads();
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int i = 0; i < kItems; ++i) {
    const int64_t e = base + i * kThreads + threadIdx.x;
    if (e < n) atomicAdd(&hist[digit_of(keys[e], shift)], 1u);
  }
  __syncthreads();
  if (threadIdx.x < kDigits) counts[threadIdx.x * tiles + blockIdx.x] = hist[threadIdx.x];
}

// Exclusive scan of counts[0, m) in place, one block: serial per-thread chunks, then the 1,024
// chunk totals through shared memory (Hillis-Steele).
__global__ void __launch_bounds__(kScanThreads) scan_counts(uint32_t* counts, int64_t m) {
  __shared__ uint32_t sums[kScanThreads];
  const int64_t per = (m + kScanThreads - 1) / kScanThreads;
  const int64_t begin = threadIdx.x * per;
  const int64_t end = begin + per < m ? begin + per : m;
  uint32_t total = 0;
  for (int64_t i = begin; i < end; ++i) total += counts[i];
  sums[threadIdx.x] = total;
  __syncthreads();
  for (int off = 1; off < kScanThreads; off <<= 1) {
    const uint32_t add = threadIdx.x >= static_cast<unsigned>(off) ? sums[threadIdx.x - off] : 0u;
    __syncthreads();
    sums[threadIdx.x] += add;
    __syncthreads();
  }
  uint32_t run = sums[threadIdx.x] - total;
  for (int64_t i = begin; i < end; ++i) { const uint32_t c = counts[i]; counts[i] = run; run += c; }
}

// Exclusive scan of v over the block's 256 threads through shared memory; returns the prefix.
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

__global__ void __launch_bounds__(kThreads)
tile_scatter(const uint32_t* keys, const uint32_t* vals, uint32_t* keys_out, uint32_t* vals_out, int64_t n,
             int shift, const uint32_t* offsets, int64_t tiles) {
  __shared__ uint32_t s_keys[kTile];
  __shared__ uint32_t s_vals[kTile];
  __shared__ uint32_t s_cnt[kDigits * kThreads];  // [digit][thread]
  __shared__ uint32_t s_scan[kThreads];
  __shared__ uint32_t s_start[kDigits];           // first slot of each digit in the sorted tile
  __shared__ uint32_t s_global[kDigits];          // first output slot of each digit of this tile
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kTile;
  const int valid = static_cast<int>(n - base < kTile ? n - base : kTile);
  const int t = threadIdx.x;

  uint32_t k[kItems], v[kItems];
  unsigned d[kItems];
  for (int c = 0; c < kDigits; ++c) s_cnt[c * kThreads + t] = 0;
  for (int i = 0; i < kItems; ++i) {
    const int e = t * kItems + i;  // this thread's 8 consecutive elements of the tile
    k[i] = e < valid ? keys[base + e] : 0xffffffffu;
    v[i] = e < valid ? vals[base + e] : 0u;
    d[i] = e < valid ? digit_of(k[i], shift) : kDigits - 1;  // padding sorts last
    s_cnt[d[i] * kThreads + t] += 1;
  }
  if (t < kDigits) s_global[t] = offsets[t * tiles + blockIdx.x];
  __syncthreads();
  // Exclusive scan over (digit, thread): thread t owns entries [16 t, 16 t + 16) of the matrix.
  uint32_t own = 0;
  for (int j = 0; j < kDigits; ++j) own += s_cnt[t * kDigits + j];
  uint32_t run = block_exclusive_scan(own, s_scan);
  for (int j = 0; j < kDigits; ++j) { const uint32_t c = s_cnt[t * kDigits + j]; s_cnt[t * kDigits + j] = run; run += c; }
  __syncthreads();
  if (t < kDigits) s_start[t] = s_cnt[t * kThreads];
  __syncthreads();
  for (int i = 0; i < kItems; ++i) {
    const uint32_t pos = s_cnt[d[i] * kThreads + t]++;
    s_keys[pos] = k[i];
    s_vals[pos] = v[i];
  }
  __syncthreads();
  for (int p = t; p < valid; p += kThreads) {
    const uint32_t key = s_keys[p];
    const unsigned dig = digit_of(key, shift);
    const int64_t out = static_cast<int64_t>(s_global[dig]) + (p - static_cast<int>(s_start[dig]));
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
  static Scratch scratch;  // kept between calls: temporary keys, values and the count matrix
  if (n <= 0) return 0;
  if (n > (int64_t{1} << 30)) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t tiles = (n + kTile - 1) / kTile;
  const int64_t m = kDigits * tiles;
  cudaError_t err = ensure(scratch, static_cast<size_t>(2 * n + m) * sizeof(uint32_t));
  if (err != cudaSuccess) return static_cast<int>(err);
  uint32_t* tmp_keys = static_cast<uint32_t*>(scratch.ptr);
  uint32_t* tmp_vals = tmp_keys + n;
  uint32_t* counts = tmp_vals + n;
  const uint32_t* src_k = keys_in;
  const uint32_t* src_v = vals_in;
  for (int pass = 0; pass < 32 / kBits; ++pass) {  // in -> tmp -> out -> tmp -> ... -> out
    uint32_t* dst_k = pass % 2 == 0 ? tmp_keys : keys_out;
    uint32_t* dst_v = pass % 2 == 0 ? tmp_vals : vals_out;
    const int shift = kBits * pass;
    tile_histograms<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(src_k, n, shift, counts, tiles);
    scan_counts<<<1, kScanThreads, 0, stream>>>(counts, m);
    tile_scatter<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(src_k, src_v, dst_k, dst_v, n, shift, counts, tiles);
    src_k = dst_k;
    src_v = dst_v;
  }
  return static_cast<int>(cudaGetLastError());
}
