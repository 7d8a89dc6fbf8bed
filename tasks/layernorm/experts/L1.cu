// layernorm expert, layer 1 (algorithm): one fused kernel, one block of 256 threads per row.
// Consecutive threads read consecutive elements (coalesced). Two shared-memory tree reductions:
// the sum (for the mean), then the sum of squared deviations from that mean (the variance, free of
// the cancellation of E[x^2] - E[x]^2); then every thread normalises its elements and applies the
// weight and bias. The second and third reads of the row hit the cache.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr float kEps = 1e-5f;

// Shared-memory tree: 256 -> 128 -> ... -> 1, a barrier after every level; every thread gets the total.
__device__ __forceinline__ float block_sum(float v, float* partial) {
  const int tid = static_cast<int>(threadIdx.x);
  partial[tid] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (tid < s) partial[tid] += partial[tid + s];
    __syncthreads();
  }
  const float total = partial[0];
  __syncthreads();  // partial is reused by the next reduction
  return total;
}

__global__ void __launch_bounds__(kThreads)
layernorm_block_per_row(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                        const __nv_bfloat16* __restrict__ b, __nv_bfloat16* __restrict__ y, int cols,
                        float inv_cols) {
  __shared__ float partial[kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * cols;
  __nv_bfloat16* yr = y + row * cols;

  float sum = 0.0f;
  for (int c = tid; c < cols; c += kThreads) sum += __bfloat162float(xr[c]);
  const float mean = block_sum(sum, partial) * inv_cols;

  float sq = 0.0f;
  for (int c = tid; c < cols; c += kThreads) {
    const float d = __bfloat162float(xr[c]) - mean;
    sq = fmaf(d, d, sq);
  }
  const float rstd = rsqrtf(block_sum(sq, partial) * inv_cols + kEps);

  for (int c = tid; c < cols; c += kThreads)
    yr[c] = __float2bfloat16(fmaf((__bfloat162float(xr[c]) - mean) * rstd, __bfloat162float(w[c]), __bfloat162float(b[c])));
}

}  // namespace

extern "C" int d2k_layernorm(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
                             __nv_bfloat16* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff || cols > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  layernorm_block_per_row<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      x, w, b, y, static_cast<int>(cols), 1.0f / static_cast<float>(cols));
  return static_cast<int>(cudaGetLastError());
}
