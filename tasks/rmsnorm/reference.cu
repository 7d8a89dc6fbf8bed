// rmsnorm reference: trusted and obviously correct. Runs in a trusted process only; agents never
// see this file. One block per row; the sum of squares is accumulated and reduced in double, the
// scale is computed in double, and each output is rounded once from double to bf16.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr double kEps = 1e-6;

__global__ void __launch_bounds__(kThreads)
rmsnorm_reference(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t cols) {
  __shared__ double partial[kThreads];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * cols;
  __nv_bfloat16* yr = y + row * cols;

  double sum = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const double v = static_cast<double>(__bfloat162float(xr[c]));
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const double scale = 1.0 / sqrt(partial[0] / static_cast<double>(cols) + kEps);

  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const double v = static_cast<double>(__bfloat162float(xr[c]));
    const double g = static_cast<double>(__bfloat162float(w[c]));
    yr[c] = __double2bfloat16(v * scale * g);
  }
}

}  // namespace

extern "C" int d2k_rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                           int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  rmsnorm_reference<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, y, cols);
  return static_cast<int>(cudaGetLastError());
}
