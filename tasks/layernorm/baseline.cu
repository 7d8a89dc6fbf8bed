// layernorm baseline: the kernel a beginner writes first. Correct, but one thread owns a whole row
// and walks it three times (mean, variance, normalise and store). The 32 threads of a warp work on
// 32 different rows, so every load and store instruction touches 32 cache lines a row apart
// (uncoalesced), and only `rows` threads exist to hide the memory latency.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void layernorm_thread_per_row(const __nv_bfloat16* x, const __nv_bfloat16* w,
                                         const __nv_bfloat16* b, __nv_bfloat16* y, int64_t rows,
                                         int64_t cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const __nv_bfloat16* xr = x + row * cols;
  __nv_bfloat16* yr = y + row * cols;
  float sum = 0.0f;
  for (int64_t c = 0; c < cols; ++c) sum += __bfloat162float(xr[c]);
  const float mean = sum / static_cast<float>(cols);
  float sq = 0.0f;
  for (int64_t c = 0; c < cols; ++c) {
    const float d = __bfloat162float(xr[c]) - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(sq / static_cast<float>(cols) + 1e-5f);
  for (int64_t c = 0; c < cols; ++c)
    yr[c] = __float2bfloat16((__bfloat162float(xr[c]) - mean) * rstd * __bfloat162float(w[c]) + __bfloat162float(b[c]));
}

extern "C" int d2k_layernorm(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
                             __nv_bfloat16* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  const int threads = 128;
  const int64_t blocks = (rows + threads - 1) / threads;
  layernorm_thread_per_row<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(x, w, b, y, rows, cols);
  return static_cast<int>(cudaGetLastError());
}
