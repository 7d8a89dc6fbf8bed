// prefix_sum expert, layer 3 (low level): L2's single-pass scan with decoupled look-back, with
// 128-bit data movement, register/shuffle scans, and an L2 prefetch of the tile 64 tickets ahead.
// A block moves a 16384-element tile: each thread loads 6 of its 16 vectors into registers
// (LDG.128) and stages the other 10 in shared memory with 16-byte cp.async (each thread copies, and
// later reads back, only its own vectors), so 40 KiB of shared memory per block and 4 blocks
// (256 KiB of loads) per SM. It sums its vectors, scans the row totals across each warp with
// SHFL.UP, combines warp totals through shared memory, looks back with one warp (32 descriptors per
// round trip), then rescans its vectors and writes y with STG.128. The block that draws ticket t
// also asks the L2 for tile t + 64 (bulk prefetch, see kPrefetch).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

// Tuning knobs (bench/prefix_sum/run.sh builds variants with -D overrides).
#ifndef PS_VECS
#define PS_VECS 16
#endif
#ifndef PS_MIN_BLOCKS
#define PS_MIN_BLOCKS 4
#endif
#ifndef PS_LB_ROWS
#define PS_LB_ROWS 1
#endif
#ifndef PS_REG_VECS
#define PS_REG_VECS 6
#endif
#ifndef PS_PREFETCH
#define PS_PREFETCH 64
#endif

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVecs = PS_VECS;                   // 4-element vectors per thread per tile
constexpr int kRow = 32 * 4;                     // elements of one warp-wide row of vectors
constexpr int kWarpElems = kVecs * kRow;         // elements of one warp's segment of a tile
constexpr int kTile = kWarps * kWarpElems;       // 16384 elements per tile
constexpr int kMinBlocks = PS_MIN_BLOCKS;        // resident blocks per SM (4 x 40 KiB of shared memory, 64 registers)
// The first kRegVecs vectors of each thread are loaded into registers (LDG.128) instead of being
// staged in shared memory, so a block needs less shared memory and a 4th block (more bytes in
// flight while blocks wait on the look-back) fits on an SM. Measured on the H200 at 2^28
// (bench/prefix_sum, before the L2 prefetch below): all 16 in shared memory, 3 blocks/SM: 3.02 TB/s; 6 in registers, 4 blocks:
// 3.33 TB/s; 4 in registers, 4 blocks: 3.28; 20 vectors, 6 in registers, 3 blocks: 3.24.
constexpr int kRegVecs = PS_REG_VECS;
static_assert(kRegVecs >= 0 && kRegVecs < kVecs, "PS_REG_VECS out of range");
constexpr int kSmemVecs = kVecs - kRegVecs;      // vectors per thread staged in shared memory
// Look-back window: each step reads kLookRows x 32 predecessor descriptors at once (kLookRows loads
// in flight per lane). On the H200 one row (32) was fastest: 2 rows cost 3%, 4 rows 3%, 8 rows 9%
// at 2^28 (bench/prefix_sum), so the nearest inclusive prefix is usually within 32 tiles and the
// extra polling only adds L2 traffic.
constexpr int kLookRows = PS_LB_ROWS;
constexpr int64_t kMaxN = 0x7fffffff;            // every tensor has fewer than 2^31 elements
constexpr int64_t kMaxTiles = (kMaxN + kTile - 1) / kTile;
constexpr unsigned kFull = 0xffffffffu;
// L2 prefetch distance in tiles: the block that draws ticket t asks the L2 for tile t + kPrefetch
// with bulk prefetches (4 x 16 KiB, issued by thread 0; they hold no registers or shared memory),
// so more DRAM reads are in flight than the resident tiles alone can hold, and the loads of the
// block that later draws that ticket are served sooner. 0 = off. Measured on the H200 at 2^28 /
// 100M (bench/prefix_sum, TB/s): off 3.30 / 3.15; 8 to 64 tiles ahead 3.68-3.74 / 3.46-3.54;
// 96: 3.67 / 3.42; 128: 3.51-3.52 / 3.26-3.28; 160: 3.28 / 3.11; 256 and more: 2.7-2.8 / 2.6-2.7
// (most likely the prefetched tiles no longer fit beside the stores in the L2 and are evicted
// before use).
constexpr int kPrefetch = PS_PREFETCH;

// Tile descriptors, one 64-bit word each, written and read whole (single-copy atomic):
// high 32 bits = (epoch << 2) | status, low 32 bits = the value (bits of T). A word whose epoch is
// not this call's is "not yet published", so no clearing is needed between calls.
constexpr unsigned kStatusAggregate = 1;  // value = the tile's own total
constexpr unsigned kStatusInclusive = 2;  // value = the sum of tiles 0..this one
constexpr unsigned kMaxEpoch = (1u << 30) - 1;
__device__ unsigned long long g_tile_state[kMaxTiles];
// Next tile to hand out. Zero when a launch starts: zero at module load, and the block that draws
// the last ticket of a launch puts it back to zero (every ticket of that launch has been drawn by
// then). No memset per call: on the H200 it cost 7 us at 100M elements (verify-tasks 257.7 -> 250.6 us).
__device__ unsigned int g_tile_counter;

// Diagnostic builds only (bench/prefix_sum, -DPS_TRACE): per-tile clock marks that the harness
// reads back through d2k_prefix_sum_trace. Nothing of it exists in the task's build.
#ifdef PS_TRACE
constexpr int kTraceWords = 8;
__device__ unsigned long long g_trace[kMaxTiles * kTraceWords];
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned sm_id() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
#define PS_TRACE_ONLY(...) __VA_ARGS__
#else
#define PS_TRACE_ONLY(...)
#endif

template <typename T> struct Vec4;
template <> struct Vec4<unsigned> { using type = uint4; };
template <> struct Vec4<float> { using type = float4; };

template <typename T> __device__ __forceinline__ unsigned to_bits(T v);
template <> __device__ __forceinline__ unsigned to_bits<unsigned>(unsigned v) { return v; }
template <> __device__ __forceinline__ unsigned to_bits<float>(float v) { return __float_as_uint(v); }
template <typename T> __device__ __forceinline__ T from_bits(unsigned b);
template <> __device__ __forceinline__ unsigned from_bits<unsigned>(unsigned b) { return b; }
template <> __device__ __forceinline__ float from_bits<float>(unsigned b) { return __uint_as_float(b); }

__device__ __forceinline__ void publish(unsigned tile, unsigned epoch, unsigned status, unsigned bits) {
  const unsigned long long word =
      (static_cast<unsigned long long>((epoch << 2) | status) << 32) | bits;
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(g_tile_state + tile), "l"(word) : "memory");
}

__device__ __forceinline__ unsigned long long peek(int64_t tile) {
  unsigned long long word;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(word) : "l"(g_tile_state + tile) : "memory");
  return word;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Decoupled look-back, run by all 32 lanes of warp 0 of the block owning `tile`. Publishes the
// tile's aggregate, then reads predecessors in windows of kLookRows x 32 (lane l, row r reads tile
// end-1-(32 r + l); all kLookRows loads issued before any spin) until the window holds an inclusive
// prefix; the window's values up to the nearest inclusive one are summed with a butterfly of
// shuffles. Publishes the tile's inclusive prefix and returns its exclusive prefix (the same in
// every lane).
template <typename T>
__device__ __forceinline__ T look_back(unsigned tile, T aggregate, unsigned epoch, int lane) {
  if (tile == 0) {
    if (lane == 0) publish(0, epoch, kStatusInclusive, to_bits(aggregate));
    return T(0);
  }
  if (lane == 0) publish(tile, epoch, kStatusAggregate, to_bits(aggregate));
  T exclusive = T(0);
  int64_t end = tile;  // this window covers tiles end-1-(32 r + lane)
  PS_TRACE_ONLY(unsigned steps = 0;)
  while (true) {
    PS_TRACE_ONLY(++steps;)
    unsigned long long word[kLookRows];
#pragma unroll
    for (int r = 0; r < kLookRows; ++r) {
      const int64_t j = end - 1 - (32 * r + lane);
      // A tile before 0 counts as an inclusive 0.
      word[r] = j >= 0 ? peek(j) : static_cast<unsigned long long>((epoch << 2) | kStatusInclusive) << 32;
    }
#pragma unroll
    for (int r = 0; r < kLookRows; ++r) {
      const int64_t j = end - 1 - (32 * r + lane);
      while ((static_cast<unsigned>(word[r] >> 32) >> 2) != epoch) word[r] = peek(j);  // not yet published
    }
    int first = 32 * kLookRows;  // window offset of the nearest inclusive prefix (none yet)
#pragma unroll
    for (int r = kLookRows - 1; r >= 0; --r) {
      const unsigned inclusive_lanes =
          __ballot_sync(kFull, (static_cast<unsigned>(word[r] >> 32) & 3u) == kStatusInclusive);
      if (inclusive_lanes != 0) first = 32 * r + __ffs(static_cast<int>(inclusive_lanes)) - 1;
    }
    T v = T(0);
#pragma unroll
    for (int r = 0; r < kLookRows; ++r)
      if (32 * r + lane <= first) v = v + from_bits<T>(static_cast<unsigned>(word[r]));
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v = v + __shfl_xor_sync(kFull, v, o);
    exclusive = exclusive + v;
    if (first < 32 * kLookRows) {
      // Trace: window steps, and how far back the nearest inclusive prefix was.
      PS_TRACE_ONLY(if (lane == 0) g_trace[tile * kTraceWords + 6] =
                        steps | (static_cast<unsigned long long>(tile - end + first + 1) << 32);)
      break;
    }
    end -= 32 * kLookRows;
  }
  if (lane == 0) publish(tile, epoch, kStatusInclusive, to_bits(exclusive + aggregate));
  return exclusive;
}

// Element layout of a tile: warp w owns the kWarpElems elements from w * kWarpElems; within it,
// row v (kRow elements) holds lane l's 4-element vector at v * kRow + 4 l. A warp's access to row v
// is one fully coalesced 512-byte access, in global and in shared memory alike. In shared memory,
// row v >= kRegVecs of warp w sits at (w * kSmemVecs + v - kRegVecs) * kRow (`s_slot` is a thread's
// first element there).
template <typename T>
__device__ __forceinline__ void load_vec(const T* x, const T* s_tile, const typename Vec4<T>::type* regs,
                                         int64_t tile_base, int slot, int s_slot, int v, int64_t n, bool full,
                                         T (&a)[4]) {
  if (full) {
    const typename Vec4<T>::type q =
        v < kRegVecs ? regs[v]
                     : *reinterpret_cast<const typename Vec4<T>::type*>(s_tile + s_slot + (v - kRegVecs) * kRow);
    a[0] = q.x; a[1] = q.y; a[2] = q.z; a[3] = q.w;
  } else {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int64_t e = tile_base + slot + v * kRow + c;
      a[c] = e < n ? x[e] : T(0);
    }
  }
}

// One tile per block, tiles handed out by an atomic counter in the order blocks start, so every
// tile a block waits for belongs to a block that is already running: no deadlock. (Measured on the
// H200, bench/prefix_sum: taking tile = blockIdx.x with no ticket, -DPS_TICKET=0, which relies on
// in-order block dispatch, was no faster; starting the copy of a guessed tile before the ticket
// returned was 13% slower, since tickets rarely match blockIdx.x.)
#ifndef PS_TICKET
#define PS_TICKET 1
#endif
template <typename T>
__device__ __forceinline__ void stage_tile(T* s_tile, typename Vec4<T>::type* regs, const T* x, int64_t tile_base,
                                           int slot, int s_slot) {
#pragma unroll
  for (int v = kRegVecs; v < kVecs; ++v)
    cp_async16(s_tile + s_slot + (v - kRegVecs) * kRow, x + tile_base + slot + v * kRow);
  cp_async_commit();
#pragma unroll
  for (int v = 0; v < kRegVecs; ++v)
    regs[v] = *reinterpret_cast<const typename Vec4<T>::type*>(x + tile_base + slot + v * kRow);
}

template <typename T>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
scan_single_pass_vec(const T* __restrict__ x, T* __restrict__ y, int64_t n, unsigned epoch,
                     int vector_ok) {
  using V = typename Vec4<T>::type;
  extern __shared__ __align__(16) unsigned char s_raw[];
  T* s_tile = reinterpret_cast<T*>(s_raw);  // kThreads * 4 * kSmemVecs elements
  __shared__ T s_warp_total[kWarps];
  __shared__ T s_exclusive;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int slot = warp * kWarpElems + lane * 4;  // this thread's first element within the tile
  const int s_slot = warp * kSmemVecs * kRow + lane * 4;  // its first staged element in shared memory
  V regs[kRegVecs > 0 ? kRegVecs : 1];
  PS_TRACE_ONLY(const long long c0 = clock64(); const unsigned long long g0 = global_ns(); long long c4 = 0;)
#if PS_TICKET == 0
  const unsigned tile = blockIdx.x;
#else
  __shared__ unsigned s_tile_index;
  if (threadIdx.x == 0) {
    const unsigned ticket = atomicAdd(&g_tile_counter, 1u);
    if (ticket == gridDim.x - 1) atomicExch(&g_tile_counter, 0u);  // the launch's last ticket
    s_tile_index = ticket;
    if (kPrefetch > 0 && vector_ok && ticket + kPrefetch < gridDim.x) {
      const int64_t base = static_cast<int64_t>(ticket + kPrefetch) * kTile;
      const int64_t elems = n - base < kTile ? n - base : kTile;
      const unsigned bytes = static_cast<unsigned>(elems * sizeof(T)) & ~15u;
      for (unsigned off = 0; off < bytes; off += 16384u) {
        const unsigned chunk = bytes - off < 16384u ? bytes - off : 16384u;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(reinterpret_cast<const char*>(x + base) + off),
                     "r"(chunk) : "memory");
      }
    }
  }
  __syncthreads();
  const unsigned tile = s_tile_index;
#endif
  const int64_t tile_base = static_cast<int64_t>(tile) * kTile;
  const bool full = vector_ok != 0 && tile_base + kTile <= n;
  PS_TRACE_ONLY(const long long c1 = clock64();)

  // Stage this thread's vectors (all kVecs copies in flight at once). A partial tile, or pointers
  // not 16-byte aligned, read x directly (guarded scalar loads) in both passes instead. Each thread
  // copies, and later reads back, only its own vectors: no barrier between the copies and their use.
  if (full) {
    stage_tile<T>(s_tile, regs, x, tile_base, slot, s_slot);
    cp_async_wait_all();
  }

  // Pass 1: the total of each of this thread's vectors and of the thread; the warp totals (a
  // butterfly of shuffles) go to shared memory, so that the tile's aggregate is known, and published,
  // before the row scans.
  T incl[kVecs];
  T thread_total = T(0);
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    T a[4];
    load_vec<T>(x, s_tile, regs, tile_base, slot, s_slot, v, n, full, a);
    incl[v] = ((a[0] + a[1]) + a[2]) + a[3];
    thread_total = thread_total + incl[v];
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) thread_total = thread_total + __shfl_xor_sync(kFull, thread_total, o);
  if (lane == 0) s_warp_total[warp] = thread_total;
  __syncthreads();
  PS_TRACE_ONLY(const long long c2 = clock64();)

  // Every thread sums the warp totals (broadcast reads): its warp's exclusive prefix and the tile's
  // aggregate, in the same order everywhere. Warp 0 publishes the aggregate and looks back while
  // the other warps scan their rows.
  T warp_prefix = T(0);
  T aggregate = T(0);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    if (w == warp) warp_prefix = aggregate;
    aggregate = aggregate + s_warp_total[w];
  }
  if (warp == 0) {
    const T exclusive = look_back<T>(tile, aggregate, epoch, lane);
    if (lane == 0) s_exclusive = exclusive;
    PS_TRACE_ONLY(c4 = clock64();)
  }

  // Inclusive scan of each row's vector totals across the warp (kVecs independent shuffle chains,
  // interleaved).
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      const T other = __shfl_up_sync(kFull, incl[v], d);
      if (lane >= d) incl[v] = other + incl[v];
    }
  }
  __syncthreads();

  // Pass 2: rescan each vector from the staged copy and add everything before it.
  T row_prefix = s_exclusive + warp_prefix;  // sum of everything before this warp's row v
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const T before = __shfl_up_sync(kFull, incl[v], 1);
    const T row_total = __shfl_sync(kFull, incl[v], 31);
    const T p = row_prefix + (lane > 0 ? before : T(0));
    row_prefix = row_prefix + row_total;
    T a[4];
    load_vec<T>(x, s_tile, regs, tile_base, slot, s_slot, v, n, full, a);
    a[0] = p + a[0];
    a[1] = a[0] + a[1];
    a[2] = a[1] + a[2];
    a[3] = a[2] + a[3];
    if (full) {
      V q;
      q.x = a[0]; q.y = a[1]; q.z = a[2]; q.w = a[3];
      *reinterpret_cast<V*>(y + tile_base + slot + v * kRow) = q;
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t e = tile_base + slot + v * kRow + c;
        if (e < n) y[e] = a[c];
      }
    }
  }
  // Trace (thread 0): start time, then cycles from the start to: ticket, tile loaded and reduced,
  // look-back done, own stores issued; the SM.
  PS_TRACE_ONLY(if (threadIdx.x == 0) {
    unsigned long long* t = g_trace + static_cast<int64_t>(tile) * kTraceWords;
    t[0] = g0;
    t[1] = static_cast<unsigned long long>(c1 - c0);
    t[2] = static_cast<unsigned long long>(c2 - c0);
    t[3] = static_cast<unsigned long long>(c4 - c0);
    t[4] = static_cast<unsigned long long>(clock64() - c0);
    t[5] = sm_id();
  })
}

constexpr size_t kDynamicSmem = sizeof(float) * kThreads * 4 * kSmemVecs;

// The shared-memory opt-in, once per device.
template <typename T>
cudaError_t setup() {
  static int cached_device = -1;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != cached_device) {
    err = cudaFuncSetAttribute(scan_single_pass_vec<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kDynamicSmem));
    if (err != cudaSuccess) return err;
    cached_device = device;
  }
  return cudaSuccess;
}

// A fresh epoch per call (1..kMaxEpoch), one counter for both element types: descriptors left
// by any earlier call never match the current call's epoch.
unsigned next_epoch() {
  static unsigned epoch = 0;
  epoch = epoch >= kMaxEpoch ? 1 : epoch + 1;
  return epoch;
}

template <typename T>
cudaError_t run(const void* x, void* y, int64_t n, cudaStream_t stream) {
  const unsigned epoch = next_epoch();
  const cudaError_t err = setup<T>();
  if (err != cudaSuccess) return err;
  const int vector_ok =
      ((reinterpret_cast<std::uintptr_t>(x) | reinterpret_cast<std::uintptr_t>(y)) & 15u) == 0;
  const int64_t tiles = (n + kTile - 1) / kTile;
  scan_single_pass_vec<T><<<static_cast<unsigned>(tiles), kThreads, kDynamicSmem, stream>>>(
      static_cast<const T*>(x), static_cast<T*>(y), n, epoch, vector_ok);
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_prefix_sum(const void* x, void* y, int64_t n, int is_float, cudaStream_t stream) {
  if (n <= 0) return 0;
  if (n > kMaxN) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(is_float ? run<float>(x, y, n, stream) : run<unsigned>(x, y, n, stream));
}

#ifdef PS_TRACE
// The last call's per-tile trace (kTraceWords words per tile, tiles 0 .. max_tiles-1), synchronous.
extern "C" int d2k_prefix_sum_trace(unsigned long long* host, int64_t max_tiles) {
  if (max_tiles < 0 || max_tiles > kMaxTiles) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(
      cudaMemcpyFromSymbol(host, g_trace, sizeof(unsigned long long) * kTraceWords * static_cast<size_t>(max_tiles)));
}
#endif
