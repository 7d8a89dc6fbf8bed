// prefix_sum expert, layer 2 (dataflow): single-pass chained scan with decoupled look-back, one
// launch. Each block takes the next 4096-element tile from an atomic counter, stages it in shared
// memory, scans it (16 consecutive elements per thread, then the 256 thread totals), publishes its
// total, lets one warp look back over 32 predecessors at a time for the tile's exclusive prefix,
// publishes its inclusive prefix and writes y: x is read once, y written once.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kItems = 16;                   // elements per thread
constexpr int kTile = kThreads * kItems;     // elements per tile
constexpr int64_t kMaxN = 0x7fffffff;        // every tensor has fewer than 2^31 elements
constexpr int64_t kMaxTiles = (kMaxN + kTile - 1) / kTile;

// Tile descriptors, one 64-bit word each, written and read whole (single-copy atomic):
// high 32 bits = (epoch << 2) | status, low 32 bits = the value (bits of T). A word whose epoch is
// not this call's is "not yet published", so no clearing is needed between calls.
constexpr unsigned kStatusAggregate = 1;  // value = the tile's own total
constexpr unsigned kStatusInclusive = 2;  // value = the sum of tiles 0..this one
constexpr unsigned kMaxEpoch = (1u << 30) - 1;
__device__ unsigned long long g_tile_state[kMaxTiles];
__device__ unsigned int g_tile_counter;  // next tile to hand out; zeroed before every launch

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

// Shared-memory slot of tile element e: one padding word per 32 so that a thread reading its
// kItems consecutive elements and a warp reading 32 consecutive elements are both conflict-free.
__device__ __forceinline__ int pad(int e) { return e + (e >> 5); }

// Loads elements [base, base + kTile) of src (zeros past n) into s_tile, coalesced.
template <typename T>
__device__ __forceinline__ void load_tile(const T* src, int64_t base, int64_t n, T* s_tile) {
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int e = k * kThreads + static_cast<int>(threadIdx.x);
    const int64_t i = base + e;
    s_tile[pad(e)] = i < n ? src[i] : T(0);
  }
}

// Scans the tile held in s_tile (begins with the barrier that completes load_tile). On return
// items[] hold the inclusive prefixes of this thread's kItems consecutive elements within the
// thread, *thread_excl the sum of the tile's elements before them; returns the tile's total.
template <typename T>
__device__ __forceinline__ T scan_tile(const T* s_tile, T* s_totals, T (&items)[kItems], T* thread_excl) {
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x);
  T acc = T(0);
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    acc = acc + s_tile[pad(t * kItems + j)];
    items[j] = acc;
  }
  // Hillis-Steele inclusive scan of the kThreads thread totals in shared memory.
  T v = acc;
  s_totals[t] = v;
  __syncthreads();
#pragma unroll
  for (int d = 1; d < kThreads; d *= 2) {
    const T add = t >= d ? s_totals[t - d] : T(0);
    __syncthreads();
    v = add + v;
    s_totals[t] = v;
    __syncthreads();
  }
  *thread_excl = t > 0 ? s_totals[t - 1] : T(0);
  return s_totals[kThreads - 1];
}

// Decoupled look-back, run by all 32 lanes of warp 0 of the block owning `tile`. Publishes the
// tile's aggregate, then inspects predecessors tile-1-lane (a window of 32) until the window holds
// an inclusive prefix; sums the window's values up to the nearest inclusive one. Publishes the
// tile's inclusive prefix and returns its exclusive prefix (valid in lane 0).
template <typename T>
__device__ T look_back(unsigned tile, T aggregate, unsigned epoch, T* s_window) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  if (tile == 0) {
    if (lane == 0) publish(0, epoch, kStatusInclusive, to_bits(aggregate));
    return T(0);
  }
  if (lane == 0) publish(tile, epoch, kStatusAggregate, to_bits(aggregate));
  T exclusive = T(0);
  int64_t end = tile;  // this window covers tiles end-1-lane
  while (true) {
    const int64_t j = end - 1 - lane;
    unsigned status = kStatusInclusive;  // a tile before 0 counts as an inclusive 0
    T value = T(0);
    if (j >= 0) {
      unsigned long long word;
      do {
        word = peek(j);  // spin until tile j has published this call
      } while ((static_cast<unsigned>(word >> 32) >> 2) != epoch);
      status = static_cast<unsigned>(word >> 32) & 3u;
      value = from_bits<T>(static_cast<unsigned>(word));
    }
    const unsigned inclusive_lanes = __ballot_sync(0xffffffffu, status == kStatusInclusive);
    s_window[lane] = value;
    __syncwarp();
    if (lane == 0) {
      // Lanes 0..last: aggregates of the nearest tiles, then (if any) the nearest inclusive one.
      const int last = inclusive_lanes != 0 ? __ffs(static_cast<int>(inclusive_lanes)) - 1 : 31;
      T sum = T(0);
      for (int k = 0; k <= last; ++k) sum = sum + s_window[k];
      exclusive = exclusive + sum;
    }
    __syncwarp();  // lane 0 has read s_window before the next window overwrites it
    if (inclusive_lanes != 0) break;
    end -= 32;
  }
  if (lane == 0) publish(tile, epoch, kStatusInclusive, to_bits(exclusive + aggregate));
  return exclusive;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
scan_single_pass(const T* x, T* y, int64_t n, unsigned epoch) {
  __shared__ T s_tile[kTile + kTile / 32];
  __shared__ T s_totals[kThreads];
  __shared__ T s_window[32];
  __shared__ T s_exclusive;
  __shared__ unsigned s_tile_index;
  // Tiles are handed out in the order blocks start, so every tile a block waits for belongs to a
  // block that is already running: no deadlock whatever order the hardware schedules blocks in.
  if (threadIdx.x == 0) s_tile_index = atomicAdd(&g_tile_counter, 1u);
  __syncthreads();
  const unsigned tile = s_tile_index;
  const int64_t base = static_cast<int64_t>(tile) * kTile;
  load_tile<T>(x, base, n, s_tile);
  T items[kItems];
  T thread_excl;
  const T aggregate = scan_tile<T>(s_tile, s_totals, items, &thread_excl);
  if (threadIdx.x < 32) {
    const T exclusive = look_back<T>(tile, aggregate, epoch, s_window);
    if (threadIdx.x == 0) s_exclusive = exclusive;
  }
  __syncthreads();
  const T prefix = s_exclusive + thread_excl;
  const int t = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int j = 0; j < kItems; ++j) s_tile[pad(t * kItems + j)] = prefix + items[j];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int e = k * kThreads + t;
    const int64_t i = base + e;
    if (i < n) y[i] = s_tile[pad(e)];
  }
}

cudaError_t counter_address(void** out) {
  static int cached_device = -1;
  static void* cached = nullptr;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != cached_device) {
    err = cudaGetSymbolAddress(&cached, g_tile_counter);
    if (err != cudaSuccess) return err;
    cached_device = device;
  }
  *out = cached;
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
  void* counter = nullptr;
  cudaError_t err = counter_address(&counter);
  if (err != cudaSuccess) return err;
  err = cudaMemsetAsync(counter, 0, sizeof(unsigned), stream);
  if (err != cudaSuccess) return err;
  const int64_t tiles = (n + kTile - 1) / kTile;
  scan_single_pass<T><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<T*>(y), n, epoch);
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_prefix_sum(const void* x, void* y, int64_t n, int is_float, cudaStream_t stream) {
  if (n <= 0) return 0;
  if (n > kMaxN) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(is_float ? run<float>(x, y, n, stream) : run<unsigned>(x, y, n, stream));
}
