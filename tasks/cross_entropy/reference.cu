// cross_entropy reference: trusted and obviously correct. Runs in a trusted process only; agents
// never see this file. One block per row, two passes in double: the row's maximum, then the sum of
// exp(x - max); loss = log(sum) + max - x[label], rounded once to fp32.
#include <cfloat>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
cross_entropy_reference(const __nv_bfloat16* x, const int* labels, float* loss, int64_t vocab) {
  __shared__ double partial[kThreads];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * vocab;

  double m = -DBL_MAX;
  for (int64_t c = threadIdx.x; c < vocab; c += kThreads) m = fmax(m, static_cast<double>(__bfloat162float(xr[c])));
  partial[threadIdx.x] = m;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] = fmax(partial[threadIdx.x], partial[threadIdx.x + s]);
    __syncthreads();
  }
  const double mx = partial[0];
  __syncthreads();

  double sum = 0.0;
  for (int64_t c = threadIdx.x; c < vocab; c += kThreads) sum += exp(static_cast<double>(__bfloat162float(xr[c])) - mx);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double target = static_cast<double>(__bfloat162float(xr[labels[row]]));
    loss[row] = static_cast<float>(log(partial[0]) + mx - target);
  }
}

}  // namespace

extern "C" int d2k_cross_entropy(const __nv_bfloat16* x, const int* labels, float* loss, int64_t rows,
                                 int64_t vocab, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  cross_entropy_reference<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, labels, loss, vocab);
  return static_cast<int>(cudaGetLastError());
}
