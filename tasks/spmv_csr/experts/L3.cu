// spmv_csr expert, layer 3 (low level): nnz-split (merge-path style) load balancing. Every block
// owns exactly 2048 consecutive nonzeros and every lane 8 of them (two 128-bit loads of col_idx and
// two of vals), whatever the row lengths. A partition pass finds the row at each tile boundary and
// zeroes the rows that cross one. In a tile, each lane finds its first row in the row ends staged
// in shared memory, sums its 8 products row by row, a segmented warp scan joins the pieces of rows
// that cross lanes, and pieces of rows that cross warps or tiles are added with float atomics.
// Tiles without empty rows take a branch-light walk. x is gathered through the read-only path;
// 32 registers per thread, so 8 blocks fit on an SM.
#include <climits>
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kItems = 8;                          // nonzeros per lane
constexpr int kWarpItems = 32 * kItems;            // 256 nonzeros per warp
constexpr int kTileItems = kWarps * kWarpItems;    // 2048 nonzeros per block
constexpr int kStage = 1024;                       // row ends staged in shared memory per block
constexpr int64_t kMaxBounds = (int64_t{1} << 20) + 2;  // > (2^31 - 1) / 2048 + 1 tile bounds

// Row index at each tile boundary (the row holding nonzero b*2048), reused by every call.
__device__ int g_part[kMaxBounds];

// Smallest row r with row_ptr[r + 1] > pos, or rows when there is none (pos >= nnz). An 8-probe
// search: each round issues 8 independent loads and keeps one ninth of the range, so a 3M-row
// matrix needs 7 dependent rounds instead of 22 for a plain binary search.
__device__ __forceinline__ int row_of(const int* __restrict__ row_ptr, int64_t rows, int64_t pos) {
  int64_t lo = 0, hi = rows;  // the answer lies in [lo, hi]
  while (hi - lo > 8) {
    const int64_t step = (hi - lo) / 9;
    int below = 0;  // probes whose row ends at or before pos (they come first)
#pragma unroll
    for (int k = 1; k <= 8; ++k) below += __ldg(&row_ptr[lo + k * step + 1]) <= pos ? 1 : 0;
    const int64_t new_lo = below > 0 ? lo + below * step + 1 : lo;
    if (below < 8) hi = lo + (below + 1) * step;
    lo = new_lo;
  }
  while (lo < hi) {
    const int64_t mid = lo + ((hi - lo) >> 1);
    if (__ldg(&row_ptr[mid + 1]) > pos)
      hi = mid;
    else
      lo = mid + 1;
  }
  return static_cast<int>(lo);
}

// One thread per tile boundary: record its row; a row that crosses the boundary (begins before
// it) will receive atomic adds from two or more blocks, so it starts from zero.
__global__ void __launch_bounds__(kThreads)
partition_rows(const int* __restrict__ row_ptr, float* __restrict__ y, int64_t rows, int64_t nnz,
               int64_t bounds) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (b >= bounds) return;
  const int64_t pos = b * kTileItems < nnz ? b * kTileItems : nnz;
  const int r = row_of(row_ptr, rows, pos);
  g_part[b] = r;
  if (b > 0 && r < rows && __ldg(&row_ptr[r]) < pos) y[r] = 0.0f;
}

template <bool kVector>
__global__ void __launch_bounds__(kThreads, 8)
spmv_nnz_split(const int* __restrict__ row_ptr, const int* __restrict__ col_idx,
               const float* __restrict__ vals, const float* __restrict__ x, float* __restrict__ y,
               int64_t rows, int64_t nnz) {
  __shared__ int s_end[kStage];  // s_end[k] = row_ptr[first + k + 1]
  const int lane = threadIdx.x & 31;
  const int wid = threadIdx.x >> 5;
  const int64_t t0_64 = static_cast<int64_t>(blockIdx.x) * kTileItems;
  const int64_t p64 = t0_64 + wid * kWarpItems + lane * kItems;  // this lane's first nonzero
  const int64_t left = nnz - p64;
  const int n = left <= 0 ? 0 : (left < kItems ? static_cast<int>(left) : kItems);  // its count
  // Positions below nnz < 2^31 fit in int; lanes without nonzeros never use theirs.
  const int t0 = static_cast<int>(t0_64);
  const int t1 = static_cast<int>(nnz - t0_64 < kTileItems ? nnz : t0_64 + kTileItems);
  const int w0 = t1 - t0 > wid * kWarpItems ? t0 + wid * kWarpItems : t1;  // warp start (<= t1)
  const int p = n > 0 ? static_cast<int>(p64) : t1;

  // Issue the loads of this lane's nonzeros first (col_idx and vals, then the x gathers): they do
  // not depend on the row bookkeeping below, so their latency overlaps it.
  int col[kItems];
  float val[kItems];
  if (kVector && n == kItems) {
#pragma unroll
    for (int k = 0; k < kItems; k += 4) {
      const int4 c = __ldg(reinterpret_cast<const int4*>(col_idx + p) + k / 4);
      const float4 v = __ldg(reinterpret_cast<const float4*>(vals + p) + k / 4);
      col[k] = c.x; col[k + 1] = c.y; col[k + 2] = c.z; col[k + 3] = c.w;
      val[k] = v.x; val[k + 1] = v.y; val[k + 2] = v.z; val[k + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      col[k] = k < n ? __ldg(&col_idx[p + k]) : 0;
      val[k] = k < n ? __ldg(&vals[p + k]) : 0.0f;
    }
  }
  float xv[kItems];
#pragma unroll
  for (int k = 0; k < kItems; ++k) xv[k] = k < n ? __ldg(&x[col[k]]) : 0.0f;

  // Stage the ends of the rows this tile touches: rows first .. last.
  const int first = g_part[blockIdx.x];
  const int next = g_part[blockIdx.x + 1];  // row holding t1 (or rows)
  const int first_begin = __ldg(&row_ptr[first]);
  const int last = next < rows ? next : static_cast<int>(rows - 1);
  const int want = last - first + 1;
  const int staged = want < kStage ? want : kStage;
  bool empty_row = false;
  for (int k = threadIdx.x; k < staged; k += kThreads) {
    const int e = __ldg(&row_ptr[first + k + 1]);
    s_end[k] = e;
    if (k > 0 && e == __ldg(&row_ptr[first + k])) empty_row = true;
  }
  // Rows before the first nonzero are empty and belong to no tile: block 0 writes them.
  if (blockIdx.x == 0)
    for (int r = threadIdx.x; r < first; r += kThreads) y[r] = 0.0f;
  // Fast tiles: every row end staged and no empty row, so a row ends at most once per nonzero.
  const bool fast = !__syncthreads_or(empty_row) && staged == want;
  auto end_of = [&](int r) { return r - first < staged ? s_end[r - first] : __ldg(&row_ptr[r + 1]); };

  // The lane's first row: the smallest r in [first, next] whose end lies past p.
  int lo = first, hi = next;
  while (lo < hi) {
    const int mid = lo + ((hi - lo) >> 1);
    if (end_of(mid) > p)
      hi = mid;
    else
      lo = mid + 1;
  }
  const int r_lane = lo;
  const int r_head = __shfl_sync(0xffffffffu, r_lane, 0);  // row holding w0
  // Does this warp's first row begin before w0? Then other warps add to it as well.
  const int head_begin = r_head == first ? first_begin : end_of(r_head - 1);
  const bool head_split = w0 < t1 && head_begin < w0;
  // A row split only at warp boundaries inside this tile was not zeroed by partition_rows: the
  // warps it begins after zero it here, before the barrier that precedes every atomic add.
  if (lane == 0 && head_split && head_begin >= t0 && end_of(r_head) <= t1) y[r_head] = 0.0f;
  __syncthreads();

  float prod[kItems];
#pragma unroll
  for (int k = 0; k < kItems; ++k) prod[k] = val[k] * xv[k];

  // Walk the lane's nonzeros row by row. Rows that end inside the lane are stored at once, except
  // the first one, which may have begun in earlier lanes: it waits for the carry of the scan.
  int done = 0;           // rows this lane completed
  float first_val = 0.0f; // the piece of its first row (r_lane) that it holds
  float run = 0.0f;
  int r = r_lane;
  if (fast) {
    int e = r < rows ? s_end[r - first] : INT_MAX;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (k < n) {
        run += prod[k];
        if (p + k + 1 == e) {  // row r ends with this nonzero
          if (done == 0) first_val = run; else y[r] = run;
          ++done;
          ++r;
          run = 0.0f;
          e = r <= last ? s_end[r - first] : INT_MAX;
        }
      }
    }
  } else if (n > 0) {
    int e = end_of(r);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (k < n) {
        run += prod[k];
        while (r < rows && e <= p + k + 1) {  // row r (maybe empty ones after it) ends here
          if (done == 0) first_val = run; else y[r] = run;
          ++done;
          ++r;
          run = 0.0f;
          if (r < rows) e = end_of(r);
        }
      }
    }
  }
  const int key = n > 0 ? r : static_cast<int>(rows);  // row left open at the lane's end

  // Segmented inclusive scan of the open pieces (key, run) across the warp: keys never decrease
  // with the lane, so equal keys are contiguous.
  float scan = run;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float v = __shfl_up_sync(0xffffffffu, scan, off);
    const int kk = __shfl_up_sync(0xffffffffu, key, off);
    if (lane >= off && kk == key) scan += v;
  }
  // The carry into this lane: the pieces of its first row held by earlier lanes.
  const float carry = __shfl_up_sync(0xffffffffu, scan, 1);
  const int carry_key = __shfl_up_sync(0xffffffffu, key, 1);
  if (done > 0) {
    const float v = first_val + (lane > 0 && carry_key == r_lane ? carry : 0.0f);
    if (r_lane == r_head && head_split)
      atomicAdd(&y[r_lane], v);  // other warps add to this row too
    else
      y[r_lane] = v;
  }
  // The row still open at the warp's end continues in the next warp (or tile).
  if (lane == 31 && key < rows && scan != 0.0f) atomicAdd(&y[key], scan);
}

}  // namespace

extern "C" int d2k_spmv_csr(const int* row_ptr, const int* col_idx, const float* vals,
                            const float* x, float* y, int64_t rows, int64_t cols, int64_t nnz,
                            cudaStream_t stream) {
  (void)cols;
  if (rows <= 0) return 0;
  if (nnz <= 0) return static_cast<int>(cudaMemsetAsync(y, 0, rows * sizeof(float), stream));
  const int64_t tiles = (nnz + kTileItems - 1) / kTileItems;
  const int64_t bounds = tiles + 1;
  partition_rows<<<static_cast<unsigned>((bounds + kThreads - 1) / kThreads), kThreads, 0,
                   stream>>>(row_ptr, y, rows, nnz, bounds);
  const bool aligned = ((reinterpret_cast<uintptr_t>(col_idx) | reinterpret_cast<uintptr_t>(vals)) &
                        15u) == 0;
  if (aligned)
    spmv_nnz_split<true><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
        row_ptr, col_idx, vals, x, y, rows, nnz);
  else
    spmv_nnz_split<false><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
        row_ptr, col_idx, vals, x, y, rows, nnz);
  return static_cast<int>(cudaGetLastError());
}
