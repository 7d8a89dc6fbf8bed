// fp8_quant expert, layer 1 (algorithm): one fused kernel, one block of 256 threads per row.
// Consecutive threads read consecutive elements (coalesced); the block reduces its partial maxima
// with a shared-memory tree, then every thread computes the scale's inverse and quantizes its
// elements. The second read of the row hits the cache (the block read it a moment earlier).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
fp8_quant_block_per_row(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ q,
                        float* __restrict__ scale, int cols) {
  __shared__ float partial[kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * cols;
  uint8_t* qr = q + row * cols;

  // Pass 1: this thread's largest magnitude (columns tid, tid + 256, ...).
  float amax = 0.0f;
  for (int c = tid; c < cols; c += kThreads) amax = fmaxf(amax, fabsf(__bfloat162float(xr[c])));

  // Shared-memory tree: 256 -> 128 -> ... -> 1, a barrier after every level.
  partial[tid] = amax;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (tid < s) partial[tid] = fmaxf(partial[tid], partial[tid + s]);
    __syncthreads();
  }
  const float a = fmaxf(partial[0], 1e-12f);
  const float inv = 448.0f / a;
  if (tid == 0) scale[row] = a / 448.0f;

  // Pass 2: the same columns again (cache hits), one byte per element.
  for (int c = tid; c < cols; c += kThreads)
    qr[c] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__bfloat162float(xr[c]) * inv, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace

extern "C" int d2k_fp8_quant(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t rows,
                             int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff || cols > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  fp8_quant_block_per_row<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, q, scale, static_cast<int>(cols));
  return static_cast<int>(cudaGetLastError());
}
