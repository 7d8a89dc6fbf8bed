// rmsnorm expert, layer 1 (algorithm): one fused kernel, one block of 256 threads per row.
// Consecutive threads read consecutive elements (coalesced); the block reduces its partial sums of
// squares with a shared-memory tree, then every thread scales its elements and multiplies by the
// weight. The second read of the row hits the cache (the row was just read by the same block).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr float kEps = 1e-6f;

__global__ void __launch_bounds__(kThreads)
rmsnorm_block_per_row(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                      __nv_bfloat16* __restrict__ y, int cols, float inv_cols) {
  __shared__ float partial[kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * cols;
  __nv_bfloat16* yr = y + row * cols;

  // Pass 1: this thread's share of the sum of squares (columns tid, tid + 256, ...).
  float sum = 0.0f;
  for (int c = tid; c < cols; c += kThreads) {
    const float v = __bfloat162float(xr[c]);
    sum = fmaf(v, v, sum);
  }

  // Shared-memory tree: 256 -> 128 -> ... -> 1, a barrier after every level.
  partial[tid] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (tid < s) partial[tid] += partial[tid + s];
    __syncthreads();
  }
  const float scale = rsqrtf(partial[0] * inv_cols + kEps);

  // Pass 2: the same columns again (cache hits), times the scale and the weight.
  for (int c = tid; c < cols; c += kThreads) {
    const float v = __bfloat162float(xr[c]);
    yr[c] = __float2bfloat16(v * scale * __bfloat162float(w[c]));
  }
}

}  // namespace

extern "C" int d2k_rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                           int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff || cols > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  rmsnorm_block_per_row<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      x, w, y, static_cast<int>(cols), 1.0f / static_cast<float>(cols));
  return static_cast<int>(cudaGetLastError());
}
