// swiglu expert, layer 2 (dataflow): a persistent grid (SMs x resident blocks) and tiles of 1024
// columns of one row. A block takes tiles with a grid stride; in a tile thread t owns columns
// t, t + 256, t + 512, t + 768, so each of its four gate loads, four up loads and four stores is a
// coalesced warp access, and all eight loads are issued before the first result is needed (16
// bytes of loads in flight per thread instead of 4). One integer division per tile, not per
// element.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 4;
constexpr int kTileCols = kThreads * kPerThread;  // 1024 columns per tile

__global__ void __launch_bounds__(kThreads)
swiglu_tiles(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t cols,
             int64_t tiles_per_row, int64_t tiles) {
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r = t / tiles_per_row;
    const int64_t c0 = (t - r * tiles_per_row) * kTileCols + threadIdx.x;
    const __nv_bfloat16* gate = x + r * 2 * cols;
    const __nv_bfloat16* up = gate + cols;
    __nv_bfloat16* yr = y + r * cols;
    float g[kPerThread], u[kPerThread];
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t c = c0 + k * kThreads;
      g[k] = c < cols ? __bfloat162float(gate[c]) : 0.0f;
      u[k] = c < cols ? __bfloat162float(up[c]) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t c = c0 + k * kThreads;
      if (c < cols) yr[c] = __float2bfloat16(g[k] / (1.0f + expf(-g[k])) * u[k]);
    }
  }
}

cudaError_t full_grid(int* blocks) {
  static int cached_device = -1;
  static int cached_blocks = 0;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != cached_device) {
    int sms = 0, per_sm = 0;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, swiglu_tiles, kThreads, 0);
    if (err != cudaSuccess) return err;
    cached_blocks = sms * (per_sm > 0 ? per_sm : 1);
    cached_device = device;
  }
  *blocks = cached_blocks;
  return cudaSuccess;
}

}  // namespace

extern "C" int d2k_swiglu(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  int full = 0;
  const cudaError_t err = full_grid(&full);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int64_t tiles_per_row = (cols + kTileCols - 1) / kTileCols;
  const int64_t tiles = rows * tiles_per_row;
  const unsigned blocks = static_cast<unsigned>(tiles < full ? tiles : full);
  swiglu_tiles<<<blocks, kThreads, 0, stream>>>(x, y, cols, tiles_per_row, tiles);
  return static_cast<int>(cudaGetLastError());
}
