// layernorm reference: trusted and obviously correct. Runs in a trusted process only; agents never
// see this file. One block per row; the mean and then the variance (from deviations) are
// accumulated and reduced in double, the output computed in double and rounded once to bf16.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr double kEps = 1e-5;

__device__ double block_sum(double v, double* partial) {
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const double total = partial[0];
  __syncthreads();  // partial is reused by the next reduction
  return total;
}

__global__ void __launch_bounds__(kThreads)
layernorm_reference(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
                    __nv_bfloat16* y, int64_t cols) {
  __shared__ double partial[kThreads];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * cols;
  __nv_bfloat16* yr = y + row * cols;

  double sum = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) sum += static_cast<double>(__bfloat162float(xr[c]));
  const double mean = block_sum(sum, partial) / static_cast<double>(cols);

  double sq = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const double d = static_cast<double>(__bfloat162float(xr[c])) - mean;
    sq += d * d;
  }
  const double var = block_sum(sq, partial) / static_cast<double>(cols);
  const double rstd = 1.0 / sqrt(var + kEps);

  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const double v = static_cast<double>(__bfloat162float(xr[c]));
    const double g = static_cast<double>(__bfloat162float(w[c]));
    const double o = static_cast<double>(__bfloat162float(b[c]));
    yr[c] = __double2bfloat16((v - mean) * rstd * g + o);
  }
}

}  // namespace

extern "C" int d2k_layernorm(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
                             __nv_bfloat16* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  layernorm_reference<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, b, y, cols);
  return static_cast<int>(cudaGetLastError());
}
