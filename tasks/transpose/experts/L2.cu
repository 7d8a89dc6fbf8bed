// transpose expert, layer 2 (dataflow): L1's shared-memory tile, reshaped. Blocks of 32x8 = 256
// threads move a 64-row x 32-column tile, 8 elements per thread each way, all 8 loads issued
// before the first shared store: 8 KiB of reads in flight per block, up to 8 blocks per SM.
// Still unpadded (the transposed shared reads keep their 32-way bank conflicts until layer 3).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kTileRows = 64;  // rows of x per tile (= columns of y)
constexpr int kTileCols = 32;  // columns of x per tile (= rows of y)
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kLoadsPerThread = kTileRows / kWarps;      // 8
constexpr int kStoreRowsPerThread = kTileCols / kWarps;  // 4 rows of y per warp
constexpr int kStoreSegments = kTileRows / 32;           // 32-float pieces per y row
static_assert(kTileRows % 32 == 0, "tile rows must be a multiple of 32");

__global__ void __launch_bounds__(kThreads)
transpose_tiled(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols,
                int64_t col_tiles) {
  __shared__ float tile[kTileRows][kTileCols];
  const int64_t t = blockIdx.x;
  const int64_t r0 = (t / col_tiles) * kTileRows;  // first row of x in this tile
  const int64_t c0 = (t % col_tiles) * kTileCols;  // first column of x in this tile
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  // Load: warp w reads rows w, w + 8, ... of the tile, 32 consecutive floats each (coalesced).
  // All loads first, then all shared-memory stores, so the loads overlap in the memory system.
  float v[kLoadsPerThread];
  const bool col_ok = c0 + lane < cols;
#pragma unroll
  for (int i = 0; i < kLoadsPerThread; ++i) {
    const int64_t r = r0 + warp + i * kWarps;
    v[i] = (col_ok && r < rows) ? x[r * cols + c0 + lane] : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kLoadsPerThread; ++i) tile[warp + i * kWarps][lane] = v[i];
  __syncthreads();

  // Store: warp w writes rows c0 + w, c0 + w + 8, ... of y, 32 consecutive floats per piece,
  // read down a column of the tile (tile[lane + 32 h][col]: all lanes in one bank).
#pragma unroll
  for (int j = 0; j < kStoreRowsPerThread; ++j) {
    const int col = warp + j * kWarps;
    if (c0 + col >= cols) break;
    float* yrow = y + (c0 + col) * rows + r0;
#pragma unroll
    for (int h = 0; h < kStoreSegments; ++h) {
      const int r = lane + 32 * h;
      if (r0 + r < rows) yrow[r] = tile[r][col];
    }
  }
}

}  // namespace

extern "C" int d2k_transpose(const float* x, float* y, int64_t rows, int64_t cols,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t row_tiles = (rows + kTileRows - 1) / kTileRows;
  const int64_t col_tiles = (cols + kTileCols - 1) / kTileCols;
  const int64_t blocks = row_tiles * col_tiles;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  transpose_tiled<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, rows, cols,
                                                                          col_tiles);
  return static_cast<int>(cudaGetLastError());
}
