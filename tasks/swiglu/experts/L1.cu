// swiglu expert, layer 1 (algorithm): split every row over many threads so that consecutive
// threads touch consecutive columns. A 2D grid: blockIdx.y picks the row (with a stride loop when
// there are more than 65535 rows), blockIdx.x a stretch of 256 columns, one output element per
// thread. Each warp then reads 64 contiguous bytes of the gate half, 64 of the up half and writes
// 64 contiguous bytes of y per instruction; no index division anywhere.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

__global__ void __launch_bounds__(kThreads)
swiglu_coalesced(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t rows,
                 int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float g = __bfloat162float(x[r * 2 * cols + c]);
    const float u = __bfloat162float(x[r * 2 * cols + cols + c]);
    y[r * cols + c] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
  }
}

}  // namespace

extern "C" int d2k_swiglu(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t bx = (cols + kThreads - 1) / kThreads;
  if (bx > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(rows < kMaxGridY ? rows : kMaxGridY));
  swiglu_coalesced<<<grid, kThreads, 0, stream>>>(x, y, rows, cols);
  return static_cast<int>(cudaGetLastError());
}
