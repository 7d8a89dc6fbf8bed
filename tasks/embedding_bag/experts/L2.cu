// embedding_bag expert, layer 2 (dataflow): a warp per (bag, column slice) instead of a block per
// bag, so the machine is filled with independent work whatever the row width, and every warp keeps
// many rows in flight. Lane l owns kCols columns of its slice (c0 + l + 32 k: a slice of 32 kCols
// bf16, 64 kCols bytes of every looked-up row per warp) and keeps their fp32 sums in
// registers for the whole bag. The warp loads the bag's indices 32 at a time (one coalesced load)
// and broadcasts them to its lanes with warp shuffles; kRowsInFlight rows are looked up per step,
// all their loads issued before the adds (kRowsInFlight x kCols independent loads per lane in
// flight), and the sums are added in index order. Loads stay 2 bytes wide (layer 3 widens them).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;               // 8 warps per block, each on its own (bag, slice)
constexpr int kWarps = kThreads / 32;
constexpr int kCols = 2;                    // columns per lane: a warp slice is 32 kCols columns (64 kCols bytes)
constexpr int kSlice = 32 * kCols;
constexpr int kRowsInFlight = 4;

__global__ void __launch_bounds__(kThreads)
embedding_bag_warp_slice(const int* __restrict__ offsets, const int* __restrict__ indices,
                         const __nv_bfloat16* __restrict__ table, __nv_bfloat16* __restrict__ out, int64_t rows,
                         int64_t dim, int64_t slices) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= rows * slices) return;  // a whole warp leaves together: the shuffles stay uniform
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t b = item / slices;
  const int64_t c0 = (item - b * slices) * kSlice + lane;
  const int begin = offsets[b], end = offsets[b + 1];
  bool in[kCols];
  float acc[kCols];
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    in[k] = c0 + 32 * k < dim;
    acc[k] = 0.0f;
  }
  for (int j0 = begin; j0 < end; j0 += 32) {
    const int n = end - j0 < 32 ? end - j0 : 32;  // the same for every lane
    const int mine = lane < n ? indices[j0 + lane] : 0;
    for (int i = 0; i < n; i += kRowsInFlight) {
      float v[kRowsInFlight][kCols];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        const int64_t row = __shfl_sync(0xffffffffu, mine, (i + u) & 31);
        const __nv_bfloat16* r = table + row * dim + c0;
#pragma unroll
        for (int k = 0; k < kCols; ++k) v[u][k] = (i + u < n && in[k]) ? __bfloat162float(r[32 * k]) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u)
#pragma unroll
        for (int k = 0; k < kCols; ++k) acc[k] += v[u][k];  // rows past the bag's end add 0
    }
  }
#pragma unroll
  for (int k = 0; k < kCols; ++k)
    if (in[k]) out[b * dim + c0 + 32 * k] = __float2bfloat16(acc[k]);
}

}  // namespace

extern "C" int d2k_embedding_bag(const int* offsets, const int* indices, const __nv_bfloat16* table,
                                 __nv_bfloat16* out, int64_t rows, int64_t cols, int64_t nnz, int64_t dim,
                                 cudaStream_t stream) {
  (void)cols;
  (void)nnz;
  if (rows <= 0 || dim <= 0) return 0;
  const int64_t slices = (dim + kSlice - 1) / kSlice;
  const int64_t blocks = (rows * slices + kWarps - 1) / kWarps;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  embedding_bag_warp_slice<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(offsets, indices, table, out,
                                                                                    rows, dim, slices);
  return static_cast<int>(cudaGetLastError());
}
