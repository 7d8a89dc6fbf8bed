// fp8_quant reference: trusted and obviously correct. Runs in a trusted process only; agents never
// see this file. One block per row: the row's largest magnitude by a shared-memory tree (max is
// exact in any order), the scale and its inverse by correctly rounded fp32 divisions, then every
// element's fp32 product with the inverse converted by CUDA's own e4m3 conversion (round to
// nearest even, saturating), exactly the formula of the statement.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
fp8_quant_reference(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t cols) {
  __shared__ float partial[kThreads];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * cols;
  uint8_t* qr = q + row * cols;

  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) amax = fmaxf(amax, fabsf(__bfloat162float(xr[c])));
  partial[threadIdx.x] = amax;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + s]);
    __syncthreads();
  }
  const float a = fmaxf(partial[0], 1e-12f);
  const float inv = __fdiv_rn(448.0f, a);
  if (threadIdx.x == 0) scale[row] = __fdiv_rn(a, 448.0f);

  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const float v = __fmul_rn(__bfloat162float(xr[c]), inv);
    qr[c] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  }
}

}  // namespace

extern "C" int d2k_fp8_quant(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t rows,
                             int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  fp8_quant_reference<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, q, scale, cols);
  return static_cast<int>(cudaGetLastError());
}
