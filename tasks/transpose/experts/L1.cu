// transpose expert, layer 1 (algorithmic insight): stage 32x32 tiles through shared memory so
// that both the global loads (rows of x) and the global stores (rows of y) are coalesced. One
// block of 32x32 threads per tile, one element per thread. The tile is not padded: the
// transposed shared-memory reads hit one bank 32 times (fixed at layer 3).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kTile = 32;

// Block (tx, ty) of 32x32 threads; blockIdx.x numbers the tiles, column tiles fastest.
__global__ void __launch_bounds__(kTile * kTile)
transpose_tiled(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols,
                int64_t col_tiles) {
  __shared__ float tile[kTile][kTile];
  const int64_t t = blockIdx.x;
  const int64_t r0 = (t / col_tiles) * kTile;  // first row of x in this tile
  const int64_t c0 = (t % col_tiles) * kTile;  // first column of x in this tile
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;

  // Load: a warp (fixed ty) reads 32 consecutive floats of row r0 + ty of x.
  if (r0 + ty < rows && c0 + tx < cols) tile[ty][tx] = x[(r0 + ty) * cols + c0 + tx];
  __syncthreads();
  // Store: a warp writes 32 consecutive floats of row c0 + ty of y, i.e. column c0 + ty of the
  // tile, read down the column (tile[tx][ty]: all 32 lanes in bank ty).
  if (c0 + ty < cols && r0 + tx < rows) y[(c0 + ty) * rows + r0 + tx] = tile[tx][ty];
}

}  // namespace

extern "C" int d2k_transpose(const float* x, float* y, int64_t rows, int64_t cols,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t col_tiles = (cols + kTile - 1) / kTile;
  const int64_t blocks = row_tiles * col_tiles;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  transpose_tiled<<<static_cast<unsigned>(blocks), dim3(kTile, kTile), 0, stream>>>(
      x, y, rows, cols, col_tiles);
  return static_cast<int>(cudaGetLastError());
}
