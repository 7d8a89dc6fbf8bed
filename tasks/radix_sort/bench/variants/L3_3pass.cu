// radix_sort layer-3 variant (bench only, not an expert): three onesweep passes of 11/11/10-bit digits
// (52 bytes per pair, the stated bound's structure). It was layer 3 for one H200 run (2026-12-02
// 11:02Z, verify-tasks, 3 seeds): correct everywhere, but 18.1% of the bound on 2^26 pairs against
// 24.3% for the four-pass design (11:04Z), so the four-pass design is layer 3 again (bench/README.md).
// radix_sort expert, layer 3 (low level): three onesweep passes of 11-, 11- and 10-bit digits
// (layer 2 makes four of 8 bits), so the pairs are read and written three times, after one read of
// the keys for the three global histograms: the 52 bytes per pair of the task's bound.
// - Histograms: one kernel counts all three digits of every key (shared-memory atomics, 16-byte
//   loads); its last block (a done counter) scans them into each digit's global start and clears
//   the counts and the tile counters for the next call: no scan kernel, no memset per call.
// - A pass takes tiles of 8,192 pairs (256 threads x 32) from an atomic counter. Warp w ranks its
//   1,024 elements (32 rounds of 32, input order) by the digit with a match-any vote and a per-warp
//   running count of each of the 2,048 digits (16-bit counts, 32 KB for the 8 warps); per digit the
//   8 warp counts become exclusive prefixes and sum to the tile's count.
// - Digit state of a tile: 2,048 16-bit aggregates and 2,048 32-bit inclusive prefixes, and one
//   flag word per tile tagged with the pass's epoch (a number that grows with every pass of every
//   call), so nothing is cleared between calls. The look-back walks the tiles before, all 2,048
//   digits at once (8 contiguous digits per thread, 16-byte loads): an AGGREGATE tile adds its
//   counts and the walk goes on, an INCLUSIVE one ends it, an unpublished one is read again.
// - The tile is put in digit order in shared memory (keys and values, 64 KB) and written out by
//   position: out = global start + prefix of the earlier tiles + (position - first of the digit).
// RS_ITEMS (elements per thread) and RS_MINB (blocks per SM for the register budget) select the
// tile; the shared memory per block is 4 x 2 x tile + 8 KB bytes.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
#ifndef RS_ITEMS
#define RS_ITEMS 32
#endif
constexpr int kItems = RS_ITEMS;
#ifndef RS_MINB
#define RS_MINB 2
#endif
constexpr int kMinBlocks = RS_MINB;
constexpr int kTile = kThreads * kItems;
constexpr int kBits = 11;
constexpr int kRadix = 1 << kBits;  // 2,048 digits (the third pass uses the first 1,024)
constexpr int kPerThread = kRadix / kThreads;  // 8 contiguous digits per thread
constexpr int kPasses = 3;
constexpr int kHistBlocks = 264;
constexpr unsigned kFull = 0xffffffffu;
constexpr uint32_t kAggregate = 1u;
constexpr uint32_t kInclusive = 2u;
static_assert(kPerThread == 8, "the digit state moves as 16-byte vectors of 8 digits");
static_assert(kTile <= 65535, "16-bit per-warp counts and aggregates");
static_assert(kTile % (4 * kThreads) == 0, "16-byte tile loads");

// The dynamic shared memory of a pass: keys, then values (the per-warp counts share the values'
// space: they are done before the values arrive), then each digit's first slot in the tile.
constexpr int kValsWords = kTile > kWarps * kRadix / 2 ? kTile : kWarps * kRadix / 2;
constexpr size_t kPassShared = (static_cast<size_t>(kTile) + kValsWords + kRadix) * sizeof(uint32_t);

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Exclusive scan of v over the block: shuffle scan per warp, then the warp totals. Ends with a barrier.
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

__device__ __forceinline__ unsigned digit_of(uint32_t key, int pass) { return (key >> (kBits * pass)) & (kRadix - 1u); }

// hist: [kPasses][kRadix] counts (zero on entry), then the done counter and the passes' tile
// counters. starts: [kPasses][kRadix] each digit's first output position, written by the last block.
__global__ void __launch_bounds__(kThreads) all_histograms(const uint32_t* keys, int64_t n, uint32_t* hist,
                                                           uint32_t* starts) {
  __shared__ uint32_t h[kPasses * kRadix];
  __shared__ uint32_t s_warp[kWarps];
  __shared__ bool s_last;
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
        for (int p = 0; p < kPasses; ++p) atomicAdd(&h[p * kRadix + digit_of(ks[j], p)], 1u);
    }
    scalar_from = 4 * nvec;
  }
  for (int64_t e = scalar_from + first; e < n; e += stride) {
    const uint32_t key = keys[e];
    for (int p = 0; p < kPasses; ++p) atomicAdd(&h[p * kRadix + digit_of(key, p)], 1u);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kPasses * kRadix; i += kThreads)
    if (h[i] != 0) atomicAdd(&hist[i], h[i]);
  __threadfence();
  __syncthreads();
  uint32_t* done = hist + kPasses * kRadix;
  if (threadIdx.x == 0) s_last = atomicAdd(done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  // The last block: each digit's global start, 8 contiguous digits per thread; then clear.
  for (int p = 0; p < kPasses; ++p) {
    uint32_t c[kPerThread], sum = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      c[j] = __ldcg(&hist[p * kRadix + kPerThread * threadIdx.x + j]);
      sum += c[j];
    }
    uint32_t at = block_exclusive_scan(sum, s_warp);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      starts[p * kRadix + kPerThread * threadIdx.x + j] = at;
      hist[p * kRadix + kPerThread * threadIdx.x + j] = 0;
      at += c[j];
    }
  }
  if (threadIdx.x <= kPasses) done[threadIdx.x] = 0;  // the done counter and the 3 tile counters
}

__device__ __forceinline__ void unpack8(const uint4& q, uint32_t (&c)[8]) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) { c[2 * j] = w[j] & 0xffffu; c[2 * j + 1] = w[j] >> 16; }
}
__device__ __forceinline__ uint4 pack8(const uint32_t (&c)[8]) {
  return make_uint4(c[0] | (c[1] << 16), c[2] | (c[3] << 16), c[4] | (c[5] << 16), c[6] | (c[7] << 16));
}

// One pass. flags[tile]: epoch << 2 | level; agg: [tile][kRadix] u16; incl: [tile][kRadix] u32.
__global__ void __launch_bounds__(kThreads, kMinBlocks)
onesweep_pass(const uint32_t* keys, const uint32_t* vals, uint32_t* keys_out, uint32_t* vals_out, int64_t n,
              int pass, uint32_t epoch, const uint32_t* starts, uint32_t* tile_counter, uint32_t* flags,
              uint16_t* agg, uint32_t* incl) {
  extern __shared__ __align__(16) uint32_t smem[];
  uint32_t* s_keys = smem;
  uint32_t* s_vals = smem + kTile;
  uint16_t* s_wcnt = reinterpret_cast<uint16_t*>(s_vals);  // [warp][digit], before the values arrive
  uint32_t* s_first = smem + kTile + kValsWords;           // [digit]: first slot, then output delta
  __shared__ uint32_t s_warp[kWarps];
  __shared__ uint32_t s_tile;
  const int t = threadIdx.x;
  const unsigned lane = t & 31, warp = t >> 5;
  if (t == 0) s_tile = atomicAdd(tile_counter, 1u);
  {
    uint4* wc = reinterpret_cast<uint4*>(s_wcnt);
    for (int i = t; i < kWarps * kRadix / 8; i += kThreads) wc[i] = make_uint4(0, 0, 0, 0);
  }
  __syncthreads();
  const uint32_t tile = s_tile;
  const int64_t base = static_cast<int64_t>(tile) * kTile;
  const int valid = static_cast<int>(n - base < kTile ? n - base : kTile);

  if (valid == kTile && aligned16(keys + base)) {
    const uint4* kv = reinterpret_cast<const uint4*>(keys + base);
    uint4* sk = reinterpret_cast<uint4*>(s_keys);
#pragma unroll
    for (int j = 0; j < kTile / 4 / kThreads; ++j) sk[j * kThreads + t] = kv[j * kThreads + t];
  } else {
    for (int e = t; e < valid; e += kThreads) s_keys[e] = keys[base + e];
  }
  __syncthreads();

  // Multisplit: warp w ranks tile elements 32 kItems w + 32 i + lane, i = 0..kItems-1, in that (input) order.
  // pos: the element's slot, two 16-bit slots per register (the tile has at most 65,535 pairs).
  uint32_t k[kItems], pos[kItems / 2];
  uint16_t* my_counts = s_wcnt + warp * kRadix;
  const int first_e = static_cast<int>(warp) * (32 * kItems) + static_cast<int>(lane);
  const int lim = valid - first_e;  // element i of this thread exists if 32 i < lim
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const bool ok = 32 * i < lim;
    k[i] = s_keys[first_e + 32 * i];  // past the data: a stale word, never used
    const unsigned d = ok ? digit_of(k[i], pass) : static_cast<unsigned>(kRadix);  // kRadix: past the data
    const unsigned peers = __match_any_sync(kFull, d);
    const unsigned lower = __popc(peers & ((1u << lane) - 1u));
    const uint32_t rank = ok ? my_counts[d] + lower : 0u;
    pos[i / 2] = i % 2 == 0 ? rank : pos[i / 2] | (rank << 16);
    __syncwarp();
    if (ok && lower == 0) my_counts[d] = static_cast<uint16_t>(my_counts[d] + __popc(peers));
    __syncwarp();
  }
  __syncthreads();

  // Digits 8t..8t+7: warp prefixes (in place), the tile's counts, published as this tile's aggregate.
  uint32_t cnt[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) cnt[j] = 0;
  for (int w = 0; w < kWarps; ++w) {
    uint4* q = reinterpret_cast<uint4*>(s_wcnt + w * kRadix) + t;
    uint32_t c[8];
    unpack8(*q, c);
    *q = pack8(cnt);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) cnt[j] += c[j];
  }
  const uint32_t level_flag = epoch << 2;
  const uint4 cnt_packed = pack8(cnt);  // kept over the scatter in 4 registers, not 8
  if (tile == 0) {
    reinterpret_cast<uint4*>(incl)[2 * t] = make_uint4(cnt[0], cnt[1], cnt[2], cnt[3]);
    reinterpret_cast<uint4*>(incl)[2 * t + 1] = make_uint4(cnt[4], cnt[5], cnt[6], cnt[7]);
  } else {
    reinterpret_cast<uint4*>(agg + static_cast<int64_t>(tile) * kRadix)[t] = cnt_packed;
  }
  __threadfence();
  uint32_t sum = 0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) sum += cnt[j];
  uint32_t at = block_exclusive_scan(sum, s_warp);  // its barriers also order the publication
  if (t == 0) *reinterpret_cast<volatile uint32_t*>(flags + tile) = level_flag | (tile == 0 ? kInclusive : kAggregate);
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) { s_first[kPerThread * t + j] = at; at += cnt[j]; }
  __syncthreads();
  // Slots, and the keys into them (the staged keys are all read: the barrier above).
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (32 * i < lim) {
      const unsigned d = digit_of(k[i], pass);
      pos[i / 2] += (s_first[d] + s_wcnt[warp * kRadix + d]) << (16 * (i % 2));
      s_keys[(pos[i / 2] >> (16 * (i % 2))) & 0xffffu] = k[i];
    }
  }
  __syncthreads();  // the counts are read: the values' space is free
  // The values come straight from global memory (coalesced: 32 consecutive words per warp and
  // round), after the keys' registers are free.
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (32 * i < lim) s_vals[(pos[i / 2] >> (16 * (i % 2))) & 0xffffu] = vals[base + first_e + 32 * i];
  }

  // Look-back over the earlier tiles for digits 8t..8t+7.
  uint32_t before[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) before[j] = 0;
  if (tile > 0) {
    int64_t j = static_cast<int64_t>(tile) - 1;
    while (true) {
      const uint32_t f = *reinterpret_cast<const volatile uint32_t*>(flags + j);
      if ((f >> 2) != epoch) continue;  // not published yet in this pass
      __threadfence();
      if ((f & 3u) == kInclusive) {
        const uint4* q = reinterpret_cast<const uint4*>(incl + j * kRadix) + 2 * t;
        const uint4 a = __ldcg(q), b = __ldcg(q + 1);
        before[0] += a.x; before[1] += a.y; before[2] += a.z; before[3] += a.w;
        before[4] += b.x; before[5] += b.y; before[6] += b.z; before[7] += b.w;
        break;
      }
      uint32_t c[8];
      unpack8(__ldcg(reinterpret_cast<const uint4*>(agg + j * kRadix) + t), c);
#pragma unroll
      for (int q = 0; q < kPerThread; ++q) before[q] += c[q];
      --j;
    }
    uint32_t inc[kPerThread];
    unpack8(cnt_packed, inc);
#pragma unroll
    for (int q = 0; q < kPerThread; ++q) inc[q] += before[q];
    uint4* o = reinterpret_cast<uint4*>(incl + static_cast<int64_t>(tile) * kRadix) + 2 * t;
    o[0] = make_uint4(inc[0], inc[1], inc[2], inc[3]);
    o[1] = make_uint4(inc[4], inc[5], inc[6], inc[7]);
    __threadfence();
  }
  // Output delta per digit: global start + earlier tiles - first slot in this tile.
  uint32_t delta[kPerThread];
#pragma unroll
  for (int q = 0; q < kPerThread; ++q)
    delta[q] = starts[pass * kRadix + kPerThread * t + q] + before[q] - s_first[kPerThread * t + q];
  __syncthreads();  // the inclusive counts are written (and fenced); the sorted tile is in shared memory
  if (t == 0 && tile > 0) *reinterpret_cast<volatile uint32_t*>(flags + tile) = level_flag | kInclusive;
#pragma unroll
  for (int q = 0; q < kPerThread; ++q) s_first[kPerThread * t + q] = delta[q];
  __syncthreads();
  for (int p = t; p < valid; p += kThreads) {
    const uint32_t key = s_keys[p];
    const int64_t out = static_cast<int64_t>(static_cast<uint32_t>(s_first[digit_of(key, pass)] + p));
    keys_out[out] = key;
    vals_out[out] = s_vals[p];
  }
}

struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
};

}  // namespace

extern "C" int d2k_radix_sort(const uint32_t* keys_in, const uint32_t* vals_in, uint32_t* keys_out,
                              uint32_t* vals_out, int64_t n, cudaStream_t stream) {
  // Kept between calls: temporary keys and values, counts, digit starts, tile states; the tile
  // flags in their own buffer (only flags are ever written there, so a stale word is always an
  // older epoch's flag).
  static Scratch scratch, flag_scratch;
  static uint32_t calls = 0;  // the epoch of a pass is 3 calls + pass + 1: flags never need clearing
  static bool attribute_set = false;
  if (n <= 0) return 0;
  if (n > (int64_t{1} << 30) - 1) return static_cast<int>(cudaErrorInvalidValue);
  if (calls >= (1u << 28) - 1) return static_cast<int>(cudaErrorInvalidValue);
  cudaError_t err;
  if (!attribute_set) {
    err = cudaFuncSetAttribute(onesweep_pass, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kPassShared));
    if (err != cudaSuccess) return static_cast<int>(err);
    attribute_set = true;
  }
  const int64_t tiles = (n + kTile - 1) / kTile;
  const int64_t padded = (n + 3) / 4 * 4;  // keeps the temporary values 16-byte aligned
  // Layout (32-bit words): counts [kPasses][kRadix], done + tile counters (4), starts
  // [kPasses][kRadix], tmp keys, tmp values, incl [tiles][kRadix], agg (u16) [tiles][kRadix].
  const int64_t head = 2 * kPasses * kRadix + 4;
  const int64_t words = head + 2 * padded + tiles * kRadix + tiles * kRadix / 2;
  for (Scratch* s : {&scratch, &flag_scratch}) {
    const size_t bytes = static_cast<size_t>(s == &scratch ? words : tiles) * sizeof(uint32_t);
    if (s->bytes >= bytes) continue;
    if (s->ptr != nullptr) cudaFree(s->ptr);
    s->ptr = nullptr;
    s->bytes = 0;
    err = cudaMalloc(&s->ptr, bytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    s->bytes = bytes;
    err = cudaMemsetAsync(s->ptr, 0, bytes, stream);  // once per allocation: counts, counters, flags
    if (err != cudaSuccess) return static_cast<int>(err);
  }
  uint32_t* hist = static_cast<uint32_t*>(scratch.ptr);
  uint32_t* counters = hist + kPasses * kRadix;  // [0] done, [1 + pass] tile counter
  uint32_t* starts = counters + 4;
  uint32_t* tmp_keys = starts + kPasses * kRadix;
  uint32_t* tmp_vals = tmp_keys + padded;
  uint32_t* incl = tmp_vals + padded;
  uint16_t* agg = reinterpret_cast<uint16_t*>(incl + tiles * kRadix);
  uint32_t* flags = static_cast<uint32_t*>(flag_scratch.ptr);
  ++calls;
  const int64_t hist_blocks = (n + kThreads - 1) / kThreads < kHistBlocks ? (n + kThreads - 1) / kThreads : kHistBlocks;
  all_histograms<<<static_cast<unsigned>(hist_blocks), kThreads, 0, stream>>>(keys_in, n, hist, starts);
  const uint32_t* src_k = keys_in;
  const uint32_t* src_v = vals_in;
  for (int pass = 0; pass < kPasses; ++pass) {  // in -> out -> tmp -> out
    uint32_t* dst_k = pass == 1 ? tmp_keys : keys_out;
    uint32_t* dst_v = pass == 1 ? tmp_vals : vals_out;
    onesweep_pass<<<static_cast<unsigned>(tiles), kThreads, kPassShared, stream>>>(
        src_k, src_v, dst_k, dst_v, n, pass, 3u * calls + static_cast<uint32_t>(pass) + 1u, starts,
        counters + 1 + pass, flags, agg, incl);
    src_k = dst_k;
    src_v = dst_v;
  }
  return static_cast<int>(cudaGetLastError());
}
