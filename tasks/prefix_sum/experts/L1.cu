// prefix_sum expert, layer 1 (algorithm): work-efficient reduce-then-scan in three launches.
// (1) every 512-element tile (256 threads x 2 elements) is reduced to its sum, (2) one block scans
// the tile sums in place, 8192 at a time, (3) every tile is scanned in shared memory and offset by
// the sum of all tiles before it. O(n) work; x is read twice and y written once. int32 is added
// as uint32 (two's complement wraparound).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;                // threads of the reduce and scan kernels
constexpr int kItems = 2;                    // elements per thread
constexpr int kTile = kThreads * kItems;     // 512 elements per tile
constexpr int kSumThreads = 1024;            // the single block that scans the tile sums
constexpr int kSumItems = 8;                 // tile sums per thread and round of that block
constexpr int64_t kMaxN = 0x7fffffff;        // every tensor has fewer than 2^31 elements
constexpr int64_t kMaxTiles = (kMaxN + kTile - 1) / kTile;

__device__ unsigned int g_tile_sums[kMaxTiles];  // tile sums (bits of T), scanned in place

// Shared-memory slot of tile element e: one padding word per 32 so that a thread reading its
// kItems consecutive elements and a warp reading 32 consecutive elements are both conflict-free.
__device__ __forceinline__ int pad(int e) { return e + (e >> 5); }

// Loads elements [base, base + kT*kI) of src (zeros past n) into s_tile, coalesced.
template <typename T, int kT, int kI>
__device__ __forceinline__ void load_tile(const T* src, int64_t base, int64_t n, T* s_tile) {
#pragma unroll
  for (int k = 0; k < kI; ++k) {
    const int e = k * kT + static_cast<int>(threadIdx.x);
    const int64_t i = base + e;
    s_tile[pad(e)] = i < n ? src[i] : T(0);
  }
}

// Scans the tile held in s_tile (begins with the barrier that completes load_tile). On return
// items[] hold the inclusive prefixes of this thread's kI consecutive elements within the thread,
// *thread_excl the sum of the tile's elements before them; returns the tile's total.
template <typename T, int kT, int kI>
__device__ __forceinline__ T scan_tile(const T* s_tile, T* s_totals, T (&items)[kI], T* thread_excl) {
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x);
  T acc = T(0);
#pragma unroll
  for (int j = 0; j < kI; ++j) {
    acc = acc + s_tile[pad(t * kI + j)];
    items[j] = acc;
  }
  // Hillis-Steele inclusive scan of the kT thread totals in shared memory.
  T v = acc;
  s_totals[t] = v;
  __syncthreads();
#pragma unroll
  for (int d = 1; d < kT; d *= 2) {
    const T add = t >= d ? s_totals[t - d] : T(0);
    __syncthreads();
    v = add + v;
    s_totals[t] = v;
    __syncthreads();
  }
  *thread_excl = t > 0 ? s_totals[t - 1] : T(0);
  return s_totals[kT - 1];
}

// Writes prefix + items[] back to the thread's slots, then stores the tile (up to n) coalesced.
template <typename T, int kT, int kI>
__device__ __forceinline__ void store_tile(T* dst, int64_t base, int64_t n, T* s_tile,
                                           const T (&items)[kI], T prefix) {
  const int t = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int j = 0; j < kI; ++j) s_tile[pad(t * kI + j)] = prefix + items[j];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kI; ++k) {
    const int e = k * kT + t;
    const int64_t i = base + e;
    if (i < n) dst[i] = s_tile[pad(e)];
  }
}

// Launch 1: sums[b] = sum of tile b.
template <typename T>
__global__ void __launch_bounds__(kThreads) tile_reduce(const T* x, int64_t n, T* sums) {
  __shared__ T s_red[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kTile;
  T acc = T(0);
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int64_t i = base + k * kThreads + t;
    if (i < n) acc = acc + x[i];
  }
  s_red[t] = acc;
  __syncthreads();
#pragma unroll
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (t < s) s_red[t] = s_red[t] + s_red[t + s];
    __syncthreads();
  }
  if (t == 0) sums[blockIdx.x] = s_red[0];
}

// Launch 2 (one block): sums[0..m) becomes its own inclusive scan, kSumThreads*kSumItems at a time.
template <typename T>
__global__ void __launch_bounds__(kSumThreads) scan_tile_sums(T* sums, int64_t m) {
  constexpr int kSumTile = kSumThreads * kSumItems;
  __shared__ T s_tile[kSumTile + kSumTile / 32];
  __shared__ T s_totals[kSumThreads];
  T carry = T(0);
  for (int64_t base = 0; base < m; base += kSumTile) {
    load_tile<T, kSumThreads, kSumItems>(sums, base, m, s_tile);
    T items[kSumItems];
    T excl;
    const T total = scan_tile<T, kSumThreads, kSumItems>(s_tile, s_totals, items, &excl);
    store_tile<T, kSumThreads, kSumItems>(sums, base, m, s_tile, items, carry + excl);
    carry = carry + total;
    __syncthreads();  // the next round overwrites s_tile and s_totals
  }
}

// Launch 3: y over tile b = scan of tile b, offset by the inclusive sum of tiles 0..b-1.
template <typename T>
__global__ void __launch_bounds__(kThreads)
scan_tiles(const T* x, T* y, int64_t n, const T* scanned_sums) {
  __shared__ T s_tile[kTile + kTile / 32];
  __shared__ T s_totals[kThreads];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kTile;
  load_tile<T, kThreads, kItems>(x, base, n, s_tile);
  T items[kItems];
  T excl;
  scan_tile<T, kThreads, kItems>(s_tile, s_totals, items, &excl);
  const T offset = blockIdx.x > 0 ? scanned_sums[blockIdx.x - 1] : T(0);
  store_tile<T, kThreads, kItems>(y, base, n, s_tile, items, offset + excl);
}

cudaError_t tile_sums_address(void** out) {
  static int cached_device = -1;
  static void* cached = nullptr;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != cached_device) {
    err = cudaGetSymbolAddress(&cached, g_tile_sums);
    if (err != cudaSuccess) return err;
    cached_device = device;
  }
  *out = cached;
  return cudaSuccess;
}

template <typename T>
cudaError_t run(const void* x_raw, void* y_raw, int64_t n, cudaStream_t stream) {
  void* sums_raw = nullptr;
  cudaError_t err = tile_sums_address(&sums_raw);
  if (err != cudaSuccess) return err;
  const T* x = static_cast<const T*>(x_raw);
  T* y = static_cast<T*>(y_raw);
  T* sums = static_cast<T*>(sums_raw);
  const int64_t tiles = (n + kTile - 1) / kTile;
  tile_reduce<T><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(x, n, sums);
  scan_tile_sums<T><<<1, kSumThreads, 0, stream>>>(sums, tiles);
  scan_tiles<T><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(x, y, n, sums);
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_prefix_sum(const void* x, void* y, int64_t n, int is_float, cudaStream_t stream) {
  if (n <= 0) return 0;
  if (n > kMaxN) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(is_float ? run<float>(x, y, n, stream) : run<unsigned>(x, y, n, stream));
}
