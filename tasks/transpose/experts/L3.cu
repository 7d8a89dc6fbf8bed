// transpose expert, layer 3 (low level): L2's 32x8-thread blocks and 32-column tiles, now 128
// rows tall and padded to 33 floats per row (conflict-free shared memory), 128-bit global loads
// when cols % 4 == 0 and stores when rows % 4 == 0 (scalar otherwise: four instantiations), and
// each y row segment a block writes starts on a 32-byte sector (no sector split between blocks).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kTileRows = 128;         // rows of x per tile (= floats per y segment)
constexpr int kTileCols = 32;          // columns of x per tile (= rows of y)
constexpr int kHalo = 8;               // floats per 32-byte sector
constexpr int kPitch = kTileCols + 1;  // padded row length of the shared tile
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
static_assert(kTileRows % 32 == 0, "tile rows must be a multiple of 32");

// Tile (tr, tc) owns, in row c of y (c in [c0, c0 + 32)), the R = kTileRows floats starting at
// r = r0 - s(c), where r0 = tr R and s(c) = (c rows) mod 8 moves the segment start back onto a
// 32-byte boundary of y (r0 is a multiple of 8). The shared tile holds x rows [r0 - 8, r0 + R):
// the 8 halo rows first (loaded only when rows % 8 != 0, i.e. when some s(c) > 0).
// Bank of tile[i][c] is (33 i + c) mod 32 = (i + c) mod 32: every access pattern below puts the
// 32 lanes of a warp in 32 different banks.
template <bool kVecLoad, bool kVecStore>
__global__ void __launch_bounds__(kThreads)
transpose_tiled(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols,
                int64_t col_tiles) {
  __shared__ float tile[kHalo + kTileRows][kPitch];
  const int64_t t = blockIdx.x;
  const int64_t r0 = (t / col_tiles) * kTileRows;  // first row of x in the tile's main part
  const int64_t c0 = (t % col_tiles) * kTileCols;  // first column of x in this tile
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int rows_mod8 = static_cast<int>(rows & 7);
  const bool halo = rows_mod8 != 0;
  const float* xt = x + c0;

  if constexpr (kVecLoad) {
    // 8 threads per tile row, one float4 (4 columns) each: 32 rows per pass, then the 8 halo
    // rows by the first 64 threads.
    constexpr int kLoads = kTileRows / 32;
    const int c4 = (tid & 7) * 4;
    const int rr = tid >> 3;
    const bool col_ok = c0 + c4 < cols;  // cols % 4 == 0: the float4 is all in or all out
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 v[kLoads];
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int64_t r = r0 + rr + 32 * i;
      v[i] = (col_ok && r < rows) ? *reinterpret_cast<const float4*>(xt + r * cols + c4) : zero;
    }
    float4 h = zero;
    const int64_t rh = r0 - kHalo + rr;
    const bool do_halo = halo && tid < 8 * kHalo;
    if (do_halo && col_ok && rh >= 0 && rh < rows) h = *reinterpret_cast<const float4*>(xt + rh * cols + c4);
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      float* s = &tile[kHalo + rr + 32 * i][c4];
      s[0] = v[i].x;
      s[1] = v[i].y;
      s[2] = v[i].z;
      s[3] = v[i].w;
    }
    if (do_halo) {
      float* s = &tile[rr][c4];
      s[0] = h.x;
      s[1] = h.y;
      s[2] = h.z;
      s[3] = h.w;
    }
  } else {
    // One warp per tile row, 32 consecutive columns: tile row warp + 8 k, k = 0 is a halo row.
    constexpr int kLoads = kTileRows / kWarps + 1;
    const bool col_ok = c0 + lane < cols;
    float v[kLoads];
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int64_t r = r0 - kHalo + warp + kWarps * k;
      v[k] = (col_ok && r >= 0 && r < rows && (k > 0 || halo)) ? xt[r * cols + lane] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kLoads; ++k) tile[warp + kWarps * k][lane] = v[k];
  }
  __syncthreads();

  if constexpr (kVecStore) {
    // 8 threads per row of y, one float4 each; 32 y rows per pass. rows % 4 == 0, so the shift
    // s is 0 or 4 and every float4 stays 16-byte aligned and all in or all out of [0, rows).
    constexpr int kStores = kTileRows / 32;
    const int col = tid >> 3;
    if (c0 + col < cols) {
      const int s = static_cast<int>(((c0 + col) * rows_mod8) & 7);
      float* yseg = y + (c0 + col) * rows + r0 - s;  // 32-byte aligned
#pragma unroll
      for (int i = 0; i < kStores; ++i) {
        const int j = (tid & 7) + 8 * i;
        const int64_t r = r0 - s + 4 * j;
        if (r >= 0 && r < rows) {
          const int ti = kHalo - s + 4 * j;
          const float4 o = make_float4(tile[ti][col], tile[ti + 1][col], tile[ti + 2][col],
                                       tile[ti + 3][col]);
          reinterpret_cast<float4*>(yseg)[j] = o;
        }
      }
    }
  } else {
    // One warp per row of y, 32 consecutive floats per piece, each piece 4 whole sectors.
#pragma unroll
    for (int jc = 0; jc < kTileCols / kWarps; ++jc) {
      const int col = warp + kWarps * jc;
      if (c0 + col >= cols) break;
      const int s = static_cast<int>(((c0 + col) * rows_mod8) & 7);
      float* yseg = y + (c0 + col) * rows + r0 - s;  // 32-byte aligned
#pragma unroll
      for (int h = 0; h < kTileRows / 32; ++h) {
        const int rl = lane + 32 * h;
        const int64_t r = r0 - s + rl;
        if (r >= 0 && r < rows) yseg[rl] = tile[kHalo - s + rl][col];
      }
    }
  }
}

template <bool kVecLoad, bool kVecStore>
void launch(const float* x, float* y, int64_t rows, int64_t cols, int64_t col_tiles,
            unsigned blocks, cudaStream_t stream) {
  transpose_tiled<kVecLoad, kVecStore><<<blocks, kThreads, 0, stream>>>(x, y, rows, cols,
                                                                        col_tiles);
}

}  // namespace

extern "C" int d2k_transpose(const float* x, float* y, int64_t rows, int64_t cols,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  // Segments start up to 7 floats before r0, so the last row tile must reach rows + 7.
  const int64_t max_shift = rows % 8 == 0 ? 0 : kHalo - 1;
  const int64_t row_tiles = (rows + max_shift + kTileRows - 1) / kTileRows;
  const int64_t col_tiles = (cols + kTileCols - 1) / kTileCols;
  const int64_t blocks64 = row_tiles * col_tiles;
  if (blocks64 > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const unsigned blocks = static_cast<unsigned>(blocks64);
  // 128-bit accesses need 16-byte aligned addresses: every row start of x is aligned when
  // cols % 4 == 0 (and x is), every row start of y when rows % 4 == 0 (and y is).
  const bool vec_load = cols % 4 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
  const bool vec_store = rows % 4 == 0 && reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  if (vec_load && vec_store) {
    launch<true, true>(x, y, rows, cols, col_tiles, blocks, stream);
  } else if (vec_load) {
    launch<true, false>(x, y, rows, cols, col_tiles, blocks, stream);
  } else if (vec_store) {
    launch<false, true>(x, y, rows, cols, col_tiles, blocks, stream);
  } else {
    launch<false, false>(x, y, rows, cols, col_tiles, blocks, stream);
  }
  return static_cast<int>(cudaGetLastError());
}
