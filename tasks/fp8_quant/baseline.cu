// fp8_quant baseline: the kernel a beginner writes first. Correct, but one thread owns a whole row
// and walks it twice (largest magnitude, then quantize). The 32 threads of a warp work on 32
// different rows, so every load and store instruction touches 32 cache lines a row apart
// (uncoalesced), and only `rows` threads exist to hide the memory latency.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

__global__ void fp8_quant_thread_per_row(const __nv_bfloat16* x, uint8_t* q, float* scale,
                                         int64_t rows, int64_t cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const __nv_bfloat16* xr = x + row * cols;
  uint8_t* qr = q + row * cols;
  float amax = 0.0f;
  for (int64_t c = 0; c < cols; ++c) amax = fmaxf(amax, fabsf(__bfloat162float(xr[c])));
  const float a = fmaxf(amax, 1e-12f);
  const float inv = 448.0f / a;
  scale[row] = a / 448.0f;
  for (int64_t c = 0; c < cols; ++c)
    qr[c] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__bfloat162float(xr[c]) * inv, __NV_SATFINITE, __NV_E4M3));
}

extern "C" int d2k_fp8_quant(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t rows,
                             int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  const int threads = 128;
  const int64_t blocks = (rows + threads - 1) / threads;
  fp8_quant_thread_per_row<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(x, q, scale, rows, cols);
  return static_cast<int>(cudaGetLastError());
}
