// spmv_csr expert, layer 2 (dataflow): L1's cooperative rows, with the work unit chosen by row
// length. A classify pass lists the very long rows (> 4096 nonzeros), which get a whole block each.
// All other rows are taken in tiles of 32 consecutive rows by one warp. Runs of consecutive rows
// whose nonzeros fit the warp's 4 KiB shared-memory buffer are streamed: the 32 lanes read the run
// as one contiguous coalesced stretch, 8 loads per lane in flight, and park the products in shared
// memory; then sub-warp groups (2..32 lanes, by the run's mean row length) sum each row from shared
// memory. A row too long for the buffer gets the whole warp. One persistent grid sized to the
// machine does the very long rows first, then grabs row tiles dynamically; x is read through the
// read-only path.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBuf = 1024;                // products a warp can park in shared memory (4 KiB)
constexpr int kBlockRowMin = 4097;        // rows at least this long get a whole block
constexpr int kTilesPerGrab = 2;          // row tiles (32 rows each) a warp takes per atomic
constexpr int kUnroll = 8;                // loads in flight per lane when streaming
constexpr int64_t kVlongCap = int64_t{1} << 19;  // >= (2^31 - 1) / 4097: never overflows

// Scratch reused by every call: the very-long-row list and two counters (zeroed by a memset on the
// stream at the start of each call: very long rows listed, next row tile).
__device__ int g_vlong_rows[kVlongCap];
__device__ unsigned int g_counts[2];

__global__ void __launch_bounds__(kThreads)
classify_rows(const int* __restrict__ row_ptr, int64_t rows) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) >> 5;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t base = warp * 32; base < rows; base += warps * 32) {  // warp-uniform loop
    const int64_t r = base + lane;
    const bool take = r < rows && row_ptr[r + 1] - row_ptr[r] >= kBlockRowMin;
    const unsigned mask = __ballot_sync(0xffffffffu, take);
    if (mask == 0) continue;
    unsigned slot = 0;
    if (lane == 0) slot = atomicAdd(&g_counts[0], static_cast<unsigned>(__popc(mask)));
    slot = __shfl_sync(0xffffffffu, slot, 0);
    if (take) g_vlong_rows[slot + __popc(mask & ((1u << lane) - 1u))] = static_cast<int>(r);
  }
}

__device__ __forceinline__ float product(const int* __restrict__ col_idx,
                                         const float* __restrict__ vals,
                                         const float* __restrict__ x, int j) {
  return __ldg(&vals[j]) * __ldg(&x[__ldg(&col_idx[j])]);
}

__global__ void __launch_bounds__(kThreads)
spmv_binned(const int* __restrict__ row_ptr, const int* __restrict__ col_idx,
            const float* __restrict__ vals, const float* __restrict__ x, float* __restrict__ y,
            int64_t rows) {
  __shared__ float s_buf[kWarps * kBuf];  // kBuf products per warp
  __shared__ float s_part[kWarps];
  const int lane = threadIdx.x & 31;
  const int wid = threadIdx.x >> 5;
  float* buf = s_buf + wid * kBuf;

  // Phase A: very long rows, one block each (every thread of a block loops the same count).
  const int n_vlong = static_cast<int>(g_counts[0]);
  for (int i = blockIdx.x; i < n_vlong; i += gridDim.x) {
    const int row = g_vlong_rows[i];
    const int begin = row_ptr[row];
    const int end = row_ptr[row + 1];
    float sum = 0.0f;
#pragma unroll 4
    for (int j = begin + static_cast<int>(threadIdx.x); j < end; j += kThreads)
      sum += product(col_idx, vals, x, j);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) s_part[wid] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) total += s_part[w];
      y[row] = total;
    }
    __syncthreads();  // s_part is reused by the next row
  }

  // Phase B: tiles of 32 consecutive rows, grabbed kTilesPerGrab at a time (dynamic, so the
  // blocks that did very long rows simply take fewer tiles).
  const int64_t ntiles = (rows + 31) / 32;
  for (;;) {
    unsigned int grab = 0;
    if (lane == 0) grab = atomicAdd(&g_counts[1], static_cast<unsigned>(kTilesPerGrab));
    grab = __shfl_sync(0xffffffffu, grab, 0);
    if (static_cast<int64_t>(grab) >= ntiles) break;
    const int64_t tile_end = grab + kTilesPerGrab < ntiles ? grab + kTilesPerGrab : ntiles;
    for (int64_t t = grab; t < tile_end; ++t) {
      const int64_t r0 = t * 32;
      int begin = 0, end = 0;
      if (r0 + lane < rows) {
        begin = row_ptr[r0 + lane];
        end = row_ptr[r0 + lane + 1];
      }
      const int last = rows - r0 < 32 ? static_cast<int>(rows - r0) - 1 : 31;
      // Runs of consecutive rows whose nonzeros fit the buffer are streamed; a row too long for
      // the buffer alone gets the whole warp (or, if very long, was done in phase A).
      for (int i0 = 0; i0 <= last;) {  // warp-uniform loop
        const int b0 = __shfl_sync(0xffffffffu, begin, i0);
        // Row ends grow with the lane, so the rows that fit form a prefix starting at i0.
        const unsigned fit = __ballot_sync(0xffffffffu, lane >= i0 && lane <= last && end - b0 <= kBuf);
        const int i1 = i0 + __popc(fit);
        if (i1 == i0) {
          const int e0 = __shfl_sync(0xffffffffu, end, i0);
          if (e0 - b0 < kBlockRowMin) {
            float sum = 0.0f;
#pragma unroll 4
            for (int j = b0 + lane; j < e0; j += 32) sum += product(col_idx, vals, x, j);
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            if (lane == 0) y[r0 + i0] = sum;
          }
          i0 += 1;
          continue;
        }
        // Stream the run's nonzeros [b0, b0 + total) into the buffer, 8 loads per lane in flight.
        const int total = __shfl_sync(0xffffffffu, end, i1 - 1) - b0;
        for (int k0 = 0; k0 < total; k0 += 32 * kUnroll) {
          int c[kUnroll];
          float v[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int k = k0 + u * 32 + lane;
            c[u] = k < total ? __ldg(&col_idx[b0 + k]) : 0;
            v[u] = k < total ? __ldg(&vals[b0 + k]) : 0.0f;
          }
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int k = k0 + u * 32 + lane;
            if (k < total) buf[k] = v[u] * __ldg(&x[c[u]]);
          }
        }
        __syncwarp();
        // Reduce from shared memory: groups of `width` lanes (a power of two near half the
        // run's mean row length, 2..32), one row per group per round.
        const int n_run = i1 - i0;
        const int half_mean = (total + 2 * n_run - 1) / (2 * n_run);
        int width = 2;
        while (width < half_mean && width < 32) width <<= 1;
        const int groups = 32 / width;
        const int g = lane / width;
        const int sub = lane & (width - 1);
        for (int base = i0; base < i1; base += groups) {  // warp-uniform loop
          const int src = base + g < i1 ? base + g : i1 - 1;
          const int rb = __shfl_sync(0xffffffffu, begin, src) - b0;
          const int re = __shfl_sync(0xffffffffu, end, src) - b0;
          float sum = 0.0f;
          if (base + g < i1)
            for (int j = rb + sub; j < re; j += width) sum += buf[j];
          for (int off = width >> 1; off > 0; off >>= 1)  // stays inside the group
            sum += __shfl_xor_sync(0xffffffffu, sum, off);
          if (sub == 0 && base + g < i1) y[r0 + src] = sum;
        }
        __syncwarp();  // the buffer is refilled by the next run
        i0 = i1;
      }
    }
  }
}

struct Launch {
  int device = -1;
  int sms = 0;
  int per_sm = 0;
  unsigned int* counts = nullptr;
};

cudaError_t launch_info(Launch* out) {
  static Launch cached;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != cached.device) {
    Launch l;
    l.device = device;
    err = cudaDeviceGetAttribute(&l.sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&l.per_sm, spmv_binned, kThreads, 0);
    if (err != cudaSuccess) return err;
    if (l.per_sm < 1) l.per_sm = 1;
    void* counts = nullptr;
    err = cudaGetSymbolAddress(&counts, g_counts);
    if (err != cudaSuccess) return err;
    l.counts = static_cast<unsigned int*>(counts);
    cached = l;
  }
  *out = cached;
  return cudaSuccess;
}

}  // namespace

extern "C" int d2k_spmv_csr(const int* row_ptr, const int* col_idx, const float* vals,
                            const float* x, float* y, int64_t rows, int64_t cols, int64_t nnz,
                            cudaStream_t stream) {
  (void)cols;
  (void)nnz;
  if (rows <= 0) return 0;
  Launch l;
  cudaError_t err = launch_info(&l);
  if (err != cudaSuccess) return static_cast<int>(err);
  err = cudaMemsetAsync(l.counts, 0, 2 * sizeof(unsigned int), stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int64_t full = static_cast<int64_t>(l.sms) * l.per_sm;
  const int64_t need = (rows + kThreads - 1) / kThreads;
  const int64_t classify_full = static_cast<int64_t>(l.sms) * (2048 / kThreads);
  classify_rows<<<static_cast<unsigned>(need < classify_full ? need : classify_full), kThreads, 0,
                  stream>>>(row_ptr, rows);
  spmv_binned<<<static_cast<unsigned>(full), kThreads, 0, stream>>>(
      row_ptr, col_idx, vals, x, y, rows);
  return static_cast<int>(cudaGetLastError());
}
