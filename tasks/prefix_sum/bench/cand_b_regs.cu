// prefix_sum L3 candidate B ("regs"): one tile per block, loaded straight into registers.
//
// What changes against tasks/prefix_sum/experts/L3.cu: no shared-memory staging. Every thread issues
// all of its 128-bit loads (LDG.E.128, row-striped so each warp instruction reads 512 contiguous bytes)
// right after the ticket, scans them in registers, the block reduces first and warp 0 publishes the
// tile aggregate and looks back while the other warps run their row scans; y goes out with explicit
// st.global.v4. With no 64 KiB shared-memory buffer per block, occupancy is bounded by registers only,
// so many more (smaller) blocks are resident: the CUB-like shape (CUB's sm90 tuning for 4-byte scans
// is 128 threads x 24 items) where a block waiting on its look-back holds a small share of the SM.
// Optional __nanosleep backoff in the look-back spin (PS_SLEEP_NS, CUB uses ~650 ns on sm90).
//
// Build-time knobs: PS_THREADS, PS_VECS (4-element vectors per thread; tile = 4*PS_THREADS*PS_VECS),
// PS_MIN_BLOCKS (launch bounds), PS_SLEEP_NS (0 = spin), PS_NO_LOOKBACK (diagnostic only: WRONG results).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

#ifndef PS_THREADS
#define PS_THREADS 128
#endif
#ifndef PS_VECS
#define PS_VECS 6
#endif
#ifndef PS_MIN_BLOCKS
#define PS_MIN_BLOCKS 8
#endif
#ifndef PS_SLEEP_NS
#define PS_SLEEP_NS 0
#endif

constexpr int kThreads = PS_THREADS;
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
      word = peek(j);
      while ((static_cast<unsigned>(word >> 32) >> 2) != epoch) {
#if PS_SLEEP_NS > 0
        __nanosleep(PS_SLEEP_NS);
#endif
        word = peek(j);
      }
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
// One tile per block; tiles handed out by the atomic counter in the order blocks start, so every
// tile a block waits for belongs to a block that is already running.
template <typename T>
__global__ void __launch_bounds__(kThreads, PS_MIN_BLOCKS)
scan_regs(const T* __restrict__ x, T* __restrict__ y, int64_t n, unsigned epoch, int vector_ok) {
  __shared__ T s_warp_total[kWarps];
  __shared__ T s_exclusive;
  __shared__ unsigned s_tile;

  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int slot = warp * kWarpElems + lane * 4;

  if (threadIdx.x == 0) s_tile = atomicAdd(&g_tile_counter, 1u);
  __syncthreads();
  const unsigned tile = s_tile;
  const int64_t tile_base = static_cast<int64_t>(tile) * kTile;
  const bool full = vector_ok != 0 && tile_base + kTile <= n;

  T a[kVecs][4];
  if (full) {
    const T* src = x + tile_base + slot;
    uint4 q[kVecs];
#pragma unroll
    for (int v = 0; v < kVecs; ++v) q[v] = ld_v4(src + v * kRow);  // all loads in flight at once
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      a[v][0] = from_bits<T>(q[v].x); a[v][1] = from_bits<T>(q[v].y);
      a[v][2] = from_bits<T>(q[v].z); a[v][3] = from_bits<T>(q[v].w);
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
  __syncthreads();

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
#ifndef PS_NO_LOOKBACK
      exclusive = look_back<T>(tile, epoch, lane);
      if (lane == 0) publish(tile, epoch, kStatusInclusive, to_bits(exclusive + aggregate));
#endif
    }
    if (lane == 0) s_exclusive = exclusive;
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
  __syncthreads();
  const T block_prefix = s_exclusive + warp_prefix;

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
}

void* counter_address(cudaError_t* err) {
  static int cached_device = -1;
  static void* cached = nullptr;
  int device = 0;
  *err = cudaGetDevice(&device);
  if (*err != cudaSuccess) return nullptr;
  if (device != cached_device) {
    *err = cudaGetSymbolAddress(&cached, g_tile_counter);
    if (*err != cudaSuccess) return nullptr;
    cached_device = device;
  }
  return cached;
}

unsigned next_epoch() {
  static unsigned epoch = 0;
  epoch = epoch >= kMaxEpoch ? 1 : epoch + 1;
  return epoch;
}

template <typename T>
cudaError_t run(const void* x, void* y, int64_t n, cudaStream_t stream) {
  const unsigned epoch = next_epoch();
  cudaError_t err = cudaSuccess;
  void* counter = counter_address(&err);
  if (err != cudaSuccess) return err;
  err = cudaMemsetAsync(counter, 0, sizeof(unsigned), stream);
  if (err != cudaSuccess) return err;
  const int vector_ok =
      ((reinterpret_cast<std::uintptr_t>(x) | reinterpret_cast<std::uintptr_t>(y)) & 15u) == 0;
  const int64_t tiles = (n + kTile - 1) / kTile;
  scan_regs<T><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<T*>(y), n, epoch, vector_ok);
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_prefix_sum(const void* x, void* y, int64_t n, int is_float, cudaStream_t stream) {
  if (n <= 0) return 0;
  if (n > kMaxN) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(is_float ? run<float>(x, y, n, stream) : run<unsigned>(x, y, n, stream));
}
