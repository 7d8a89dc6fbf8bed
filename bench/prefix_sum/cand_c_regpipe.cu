// prefix_sum L3 candidate C ("regpipe"): candidate A's persistent pipeline without shared memory.
//
// Same dataflow as cand_a_pipe.cu (persistent blocks, tiles in ticket order, the next tile's loads in
// flight while the current tile is scanned, looked back for and stored; ticket t_{i+2} taken under the
// look-back of t_i), but the next tile is prefetched straight into a second register set with LDG.E.128
// (ld.global.nc.v4) instead of cp.async into shared memory. The loop body is instantiated twice with the
// two register sets swapped (ping-pong), so no register copy forces an early wait on the prefetch.
// No shared-memory tile buffers: occupancy is set by registers only.
//
// Build-time knobs: PS_VECS (tile = 1024*PS_VECS), PS_MIN_BLOCKS, PS_NO_LOOKBACK (diagnostic: WRONG).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

#ifndef PS_VECS
#define PS_VECS 4
#endif
#ifndef PS_MIN_BLOCKS
#define PS_MIN_BLOCKS 3
#endif

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVecs = PS_VECS;                   // 4-element vectors per thread per tile
constexpr int kRow = 32 * 4;                     // elements of one warp-wide row of vectors
constexpr int kWarpElems = kVecs * kRow;         // elements of one warp's segment of a tile
constexpr int kTile = kWarps * kWarpElems;       // elements per tile
constexpr int64_t kMaxN = 0x7fffffff;
constexpr int64_t kMaxTiles = (kMaxN + kTile - 1) / kTile;
constexpr unsigned kFull = 0xffffffffu;

// Tile descriptors: one 64-bit word each, high 32 bits = (epoch << 2) | status, low 32 bits = value.
constexpr unsigned kStatusAggregate = 1;
constexpr unsigned kStatusInclusive = 2;
constexpr unsigned kMaxEpoch = (1u << 30) - 1;
__device__ unsigned long long g_tile_state[kMaxTiles];
__device__ unsigned int g_tile_counter;  // zeroed (cudaMemsetAsync) before every launch

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
[[maybe_unused]] __device__ __forceinline__ unsigned long long peek(int64_t tile) {
  unsigned long long word;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(word) : "l"(g_tile_state + tile) : "memory");
  return word;
}
__device__ __forceinline__ uint4 ld_v4(const void* p) {
  uint4 q;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
               : "l"(p));
  return q;
}
__device__ __forceinline__ void st_v4(void* p, unsigned a, unsigned b, unsigned c, unsigned d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d)
               : "memory");
}

// Look-back by the 32 lanes of warp 0 (the aggregate of `tile` is already published, tile > 0):
// lane l reads tile end-1-l until a window holds an inclusive prefix; returns the exclusive prefix.
template <typename T>
__device__ __forceinline__ T look_back(unsigned tile, unsigned epoch, int lane) {
  T exclusive = T(0);
  int64_t end = tile;
  while (true) {
    const int64_t j = end - 1 - lane;
    unsigned status = kStatusInclusive;  // a tile before 0 counts as an inclusive 0
    T value = T(0);
    if (j >= 0) {
      unsigned long long word;
      do {
        word = peek(j);
      } while ((static_cast<unsigned>(word >> 32) >> 2) != epoch);
      status = static_cast<unsigned>(word >> 32) & 3u;
      value = from_bits<T>(static_cast<unsigned>(word));
    }
    const unsigned inclusive_lanes = __ballot_sync(kFull, status == kStatusInclusive);
    const int last = inclusive_lanes != 0 ? __ffs(static_cast<int>(inclusive_lanes)) - 1 : 31;
    T v = lane <= last ? value : T(0);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v = v + __shfl_xor_sync(kFull, v, o);
    exclusive = exclusive + v;
    if (inclusive_lanes != 0) break;
    end -= 32;
  }
  return exclusive;
}

// Tile layout: warp w owns kWarpElems elements from w * kWarpElems; row v of it holds lane l's
// 4-element vector at v * kRow + 4 l (each warp access is one contiguous 512-byte piece).
template <typename T>
__global__ void __launch_bounds__(kThreads, PS_MIN_BLOCKS)
scan_regpipe(const T* __restrict__ x, T* __restrict__ y, int64_t n, unsigned num_tiles, unsigned epoch,
          int vector_ok) {
  __shared__ T s_warp_total[kWarps];
  __shared__ T s_exclusive;
  __shared__ unsigned s_ticket[2];

  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int slot = warp * kWarpElems + lane * 4;

  // Starts this thread's 128-bit loads of tile t into q (full tiles with aligned pointers only).
  auto issue = [&](uint4 (&q)[kVecs], unsigned t) {
    if (t < num_tiles && vector_ok != 0 && static_cast<int64_t>(t + 1) * kTile <= n) {
      const T* src = x + static_cast<int64_t>(t) * kTile + slot;
#pragma unroll
      for (int v = 0; v < kVecs; ++v) q[v] = ld_v4(src + v * kRow);
    }
  };
  uint4 qa[kVecs], qb[kVecs];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) qa[v] = qb[v] = make_uint4(0u, 0u, 0u, 0u);

  if (threadIdx.x == 0) s_ticket[0] = atomicAdd(&g_tile_counter, 1u);
  __syncthreads();
  unsigned tile = s_ticket[0];
  issue(qa, tile);
  if (threadIdx.x == 0) s_ticket[1] = atomicAdd(&g_tile_counter, 1u);
  __syncthreads();
  unsigned next = s_ticket[1];

  // One tile: prefetch `next` into nq, then scan, look back for and store `tile` from cq.
  // Returns false once this block is done (tickets only grow).
  auto step = [&](uint4 (&cq)[kVecs], uint4 (&nq)[kVecs]) -> bool {
    if (tile >= num_tiles) return false;
    issue(nq, next);  // next tile's loads fly during this tile's work

    const int64_t tile_base = static_cast<int64_t>(tile) * kTile;
    const bool full = vector_ok != 0 && tile_base + kTile <= n;
    T a[kVecs][4];
    if (full) {
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        const uint4 q = cq[v];
        a[v][0] = from_bits<T>(q.x); a[v][1] = from_bits<T>(q.y);
        a[v][2] = from_bits<T>(q.z); a[v][3] = from_bits<T>(q.w);
      }
    } else {
#pragma unroll
      for (int v = 0; v < kVecs; ++v)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int64_t e = tile_base + slot + v * kRow + c;
          a[v][c] = e < n ? x[e] : T(0);
        }
    }

    // Vector-serial scans; the thread's total; the warp's total (xor butterfly).
    T incl[kVecs];
    T thread_total = T(0);
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      a[v][1] = a[v][0] + a[v][1];
      a[v][2] = a[v][1] + a[v][2];
      a[v][3] = a[v][2] + a[v][3];
      incl[v] = a[v][3];
      thread_total = thread_total + incl[v];
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) thread_total = thread_total + __shfl_xor_sync(kFull, thread_total, o);
    if (lane == 0) s_warp_total[warp] = thread_total;
    __syncthreads();  // B1

    T warp_prefix = T(0);
    T aggregate = T(0);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (w == warp) warp_prefix = aggregate;
      aggregate = aggregate + s_warp_total[w];
    }
    if (warp == 0) {
      T exclusive = T(0);
      if (tile == 0) {
        if (lane == 0) publish(0, epoch, kStatusInclusive, to_bits(aggregate));
      } else {
        if (lane == 0) publish(tile, epoch, kStatusAggregate, to_bits(aggregate));
      }
      unsigned ticket = 0;
      if (lane == 0) ticket = atomicAdd(&g_tile_counter, 1u);  // t_{i+2}; latency hides under the look-back
#ifndef PS_NO_LOOKBACK
      if (tile != 0) {
        exclusive = look_back<T>(tile, epoch, lane);
        if (lane == 0) publish(tile, epoch, kStatusInclusive, to_bits(exclusive + aggregate));
      }
#endif
      if (lane == 0) {
        s_exclusive = exclusive;
        s_ticket[0] = ticket;
      }
    }

    // Row scans of the vector totals across the warp (kVecs interleaved shuffle chains).
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        const T other = __shfl_up_sync(kFull, incl[v], d);
        if (lane >= d) incl[v] = other + incl[v];
      }
    }
    T thread_prefix[kVecs];
    T row_prefix = T(0);
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      const T before = __shfl_up_sync(kFull, incl[v], 1);
      const T row_total = __shfl_sync(kFull, incl[v], 31);
      thread_prefix[v] = row_prefix + (lane > 0 ? before : T(0));
      row_prefix = row_prefix + row_total;
    }
    __syncthreads();  // B2: s_exclusive, s_ticket[0] visible
    const T block_prefix = s_exclusive + warp_prefix;
    const unsigned after = s_ticket[0];

    if (full) {
      T* dst = y + tile_base + slot;
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        const T p = block_prefix + thread_prefix[v];
        st_v4(dst + v * kRow, to_bits(p + a[v][0]), to_bits(p + a[v][1]), to_bits(p + a[v][2]),
              to_bits(p + a[v][3]));
      }
    } else {
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        const T p = block_prefix + thread_prefix[v];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int64_t e = tile_base + slot + v * kRow + c;
          if (e < n) y[e] = p + a[v][c];
        }
      }
    }
    tile = next;
    next = after;
    return true;
  };
  while (step(qa, qb) && step(qb, qa)) {
  }
}

constexpr size_t kDynamicSmem = 0;

struct Setup {
  void* counter = nullptr;
  int blocks = 0;
};

template <typename T>
cudaError_t setup(Setup* out) {
  static int cached_device = -1;
  static Setup cached;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != cached_device) {
    err = cudaGetSymbolAddress(&cached.counter, g_tile_counter);
    if (err != cudaSuccess) return err;
    int sms = 0, per_sm = 0;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, scan_regpipe<float>, kThreads, kDynamicSmem);
    if (err != cudaSuccess) return err;
    cached.blocks = sms * (per_sm > 0 ? per_sm : 1);
    cached_device = device;
  }
  *out = cached;
  return cudaSuccess;
}

unsigned next_epoch() {
  static unsigned epoch = 0;
  epoch = epoch >= kMaxEpoch ? 1 : epoch + 1;
  return epoch;
}

template <typename T>
cudaError_t run(const void* x, void* y, int64_t n, cudaStream_t stream) {
  const unsigned epoch = next_epoch();
  Setup s;
  cudaError_t err = setup<T>(&s);
  if (err != cudaSuccess) return err;
  err = cudaMemsetAsync(s.counter, 0, sizeof(unsigned), stream);
  if (err != cudaSuccess) return err;
  const int vector_ok =
      ((reinterpret_cast<std::uintptr_t>(x) | reinterpret_cast<std::uintptr_t>(y)) & 15u) == 0;
  const int64_t tiles = (n + kTile - 1) / kTile;
  const int blocks = static_cast<int>(tiles < s.blocks ? tiles : s.blocks);
  scan_regpipe<T><<<blocks, kThreads, kDynamicSmem, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n,
                                                          static_cast<unsigned>(tiles), epoch, vector_ok);
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_prefix_sum(const void* x, void* y, int64_t n, int is_float, cudaStream_t stream) {
  if (n <= 0) return 0;
  if (n > kMaxN) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(is_float ? run<float>(x, y, n, stream) : run<unsigned>(x, y, n, stream));
}
