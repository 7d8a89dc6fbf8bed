// radix_sort expert, layer 3 (low level): layer 2's onesweep passes with warp-level multisplit.
// Each warp ranks its 384 elements of the tile (12 rounds of 32, in input order) by the 8-bit digit
// with a match-any vote: the lanes holding the same digit find each other, a lane's rank is the
// number of its peers in lower lanes plus the warp's running count of that digit (kept in shared
// memory, bumped by the group's lowest lane). One shared-memory scatter puts the tile in digit
// order (instead of two 4-bit counting sorts with 2 x 9 barriers each). Tiles move between global
// and shared memory as 16-byte vectors; the 256-wide scans are warp shuffle scans. The look-back
// reads 8 predecessor tiles' states per round trip (loaded together), not one; tiles of 3,072
// pairs (256 threads x 12), 3 blocks per SM. RS_ITEMS / RS_WINDOW / RS_MINB select the tile, the
// window and the blocks per SM (H200, 2^26 pairs: 16 / 8 / 2 took 3.42 ms, 8 / 8 / 4 3.73 ms,
// 8 / 1 / 4 4.16 ms, 8 / 16 / 4 3.80 ms, 8 / 8 / 3 3.91 ms; session 13, side by side: 12 / 8 / 3
// 3.24 ms against 3.39 ms for 16 / 8 / 2, 4-6% faster on the three large workloads).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
#ifndef RS_ITEMS
#define RS_ITEMS 12
#endif
constexpr int kItems = RS_ITEMS;
#ifndef RS_WINDOW
#define RS_WINDOW 8
#endif
constexpr int kWindow = RS_WINDOW;
#ifndef RS_MINB
#define RS_MINB 3
#endif
constexpr int kMinBlocks = RS_MINB;  // blocks per SM the registers must allow  // tiles of look-back per round trip
constexpr int kTile = kThreads * kItems;
constexpr int kRadix = 256;
constexpr int kPasses = 4;
constexpr int kHistBlocks = 264;
constexpr unsigned kFull = 0xffffffffu;
constexpr uint32_t kAggregate = 1u << 30;
constexpr uint32_t kInclusive = 2u << 30;
constexpr uint32_t kValueMask = (1u << 30) - 1u;

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

__global__ void __launch_bounds__(kThreads) all_histograms(const uint32_t* keys, int64_t n, uint32_t* hist) {
  __shared__ uint32_t h[kPasses * kRadix];
  for (int i = threadIdx.x; i < kPasses * kRadix; i += kThreads) h[i] = 0;
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  int64_t scalar_from = 0;
  if (aligned16(keys)) {
    const int64_t nvec = n / 4;
    const uint4* kv = reinterpret_cast<const uint4*>(keys);
    for (int64_t q = first; q < nvec; q += stride) {
      const uint4 w = kv[q];
      const uint32_t ks[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int p = 0; p < kPasses; ++p) atomicAdd(&h[p * kRadix + ((ks[j] >> (8 * p)) & 255u)], 1u);
    }
    scalar_from = 4 * nvec;
  }
  for (int64_t e = scalar_from + first; e < n; e += stride) {
    const uint32_t key = keys[e];
    for (int p = 0; p < kPasses; ++p) atomicAdd(&h[p * kRadix + ((key >> (8 * p)) & 255u)], 1u);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kPasses * kRadix; i += kThreads) atomicAdd(&hist[i], h[i]);
}

// Exclusive scan of v over the block: shuffle scan per warp, then the 8 warp totals.
__device__ uint32_t block_exclusive_scan(uint32_t v, uint32_t* s_warp) {
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  uint32_t x = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const uint32_t y = __shfl_up_sync(kFull, x, off);
    if (lane >= static_cast<unsigned>(off)) x += y;
  }
  if (lane == 31) s_warp[warp] = x;
  __syncthreads();
  uint32_t before = 0;
  for (unsigned w = 0; w < warp; ++w) before += s_warp[w];
  __syncthreads();
  return before + x - v;
}

__global__ void __launch_bounds__(kThreads, kMinBlocks)
onesweep_pass(const uint32_t* keys, const uint32_t* vals, uint32_t* keys_out, uint32_t* vals_out, int64_t n,
              int shift, const uint32_t* hist, uint32_t* state, uint32_t* tile_counter) {
  __shared__ __align__(16) uint32_t s_keys[kTile];
  __shared__ __align__(16) uint32_t s_vals[kTile];
  __shared__ uint32_t s_wcnt[kWarps * kRadix];  // [warp][digit]: running counts, then warp prefixes
  __shared__ uint32_t s_count[kRadix];
  __shared__ uint32_t s_start[kRadix];
  __shared__ uint32_t s_offset[kRadix];
  __shared__ uint32_t s_warp[kWarps];
  __shared__ uint32_t s_tile;
  const int t = threadIdx.x;
  const unsigned lane = t & 31, warp = t >> 5;
  if (t == 0) s_tile = atomicAdd(tile_counter, 1u);
  for (int w = 0; w < kWarps; ++w) s_wcnt[w * kRadix + t] = 0;
  __syncthreads();
  const uint32_t tile = s_tile;
  const int64_t base = static_cast<int64_t>(tile) * kTile;
  const int valid = static_cast<int>(n - base < kTile ? n - base : kTile);

  if (valid == kTile && aligned16(keys + base) && aligned16(vals + base)) {
    const uint4* kv = reinterpret_cast<const uint4*>(keys + base);
    const uint4* vv = reinterpret_cast<const uint4*>(vals + base);
    uint4* sk = reinterpret_cast<uint4*>(s_keys);
    uint4* sv = reinterpret_cast<uint4*>(s_vals);
#pragma unroll
    for (int j = 0; j < kTile / 4 / kThreads; ++j) {
      sk[j * kThreads + t] = kv[j * kThreads + t];
      sv[j * kThreads + t] = vv[j * kThreads + t];
    }
  } else {
    for (int e = t; e < valid; e += kThreads) { s_keys[e] = keys[base + e]; s_vals[e] = vals[base + e]; }
  }
  __syncthreads();

  // Multisplit: warp w ranks tile elements 32 kItems w + 32 i + lane, i = 0..kItems-1, in that (input) order.
  uint32_t k[kItems], v[kItems], rank[kItems];
  unsigned d[kItems];
  uint32_t* my_counts = s_wcnt + warp * kRadix;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int e = static_cast<int>(warp) * (32 * kItems) + 32 * i + static_cast<int>(lane);
    const bool ok = e < valid;
    k[i] = s_keys[e];
    v[i] = s_vals[e];
    d[i] = ok ? (k[i] >> shift) & 255u : kRadix;  // kRadix: no digit (past the data)
    const unsigned peers = __match_any_sync(kFull, d[i]);
    const unsigned lower = __popc(peers & ((1u << lane) - 1u));
    rank[i] = ok ? my_counts[d[i]] + lower : 0u;
    __syncwarp();
    if (ok && lower == 0) my_counts[d[i]] += __popc(peers);
    __syncwarp();
  }
  __syncthreads();
  // Digit t: the tile's count, and the warps' exclusive prefixes.
  uint32_t count = 0;
  for (int w = 0; w < kWarps; ++w) { const uint32_t c = s_wcnt[w * kRadix + t]; s_wcnt[w * kRadix + t] = count; count += c; }
  volatile uint32_t* my_state = state + static_cast<int64_t>(tile) * kRadix;
  my_state[t] = (tile == 0 ? kInclusive : kAggregate) | count;
  s_count[t] = count;
  s_start[t] = block_exclusive_scan(count, s_warp);
  const uint32_t digit_base = block_exclusive_scan(hist[t], s_warp);  // ends with a barrier
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (d[i] < static_cast<unsigned>(kRadix)) {
      const uint32_t pos = s_start[d[i]] + my_counts[d[i]] + rank[i];
      s_keys[pos] = k[i];
      s_vals[pos] = v[i];
    }
  }

  // Look-back, kWindow predecessors per round trip: the window's words are loaded together, then
  // taken in order (newest first) until an unpublished one (retry from it) or an INCLUSIVE one (done).
  uint32_t before = 0;
  if (tile > 0) {
    int64_t j = static_cast<int64_t>(tile) - 1;
    const volatile uint32_t* st = static_cast<volatile uint32_t*>(state) + t;
    while (true) {
      uint32_t w[kWindow];
#pragma unroll
      for (int q = 0; q < kWindow; ++q) w[q] = j - q >= 0 ? st[(j - q) * kRadix] : kInclusive;
      int q = 0;
      bool done = false;
#pragma unroll
      for (; q < kWindow; ++q) {
        const uint32_t flag = w[q] & ~kValueMask;
        if (flag == 0) break;
        before += w[q] & kValueMask;
        if (flag == kInclusive) { done = true; break; }
      }
      if (done) break;
      j -= q;
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
  const int64_t padded = (n + 3) / 4 * 4;  // keeps the temporary values 16-byte aligned
  const int64_t zeroed = kPasses * kRadix + kPasses + kPasses * tiles * kRadix;
  cudaError_t err = ensure(scratch, static_cast<size_t>(2 * padded + zeroed) * sizeof(uint32_t));
  if (err != cudaSuccess) return static_cast<int>(err);
  uint32_t* tmp_keys = static_cast<uint32_t*>(scratch.ptr);
  uint32_t* tmp_vals = tmp_keys + padded;
  uint32_t* hist = tmp_vals + padded;
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
