// cross_entropy expert, layer 1 (algorithm): one block of 256 threads per row, consecutive threads
// on consecutive logits (coalesced). Two shared-memory tree reductions: the row's maximum, then
// the sum of exp(x - max); thread 0 writes log(sum) + max - x[label]. The row (300 KB for Qwen's
// vocabulary) is too large to stay in the cache between the passes, so it is read from DRAM twice.
#include <cfloat>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
cross_entropy_two_pass(const __nv_bfloat16* __restrict__ x, const int* __restrict__ labels,
                       float* __restrict__ loss, int64_t vocab) {
  __shared__ float partial[kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * vocab;

  float m = -FLT_MAX;
  for (int64_t c = tid; c < vocab; c += kThreads) m = fmaxf(m, __bfloat162float(xr[c]));
  partial[tid] = m;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (tid < s) partial[tid] = fmaxf(partial[tid], partial[tid + s]);
    __syncthreads();
  }
  const float mx = partial[0];
  __syncthreads();  // partial is reused below

  float sum = 0.0f;
  for (int64_t c = tid; c < vocab; c += kThreads) sum += expf(__bfloat162float(xr[c]) - mx);
  partial[tid] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (tid < s) partial[tid] += partial[tid + s];
    __syncthreads();
  }
  if (tid == 0) loss[row] = logf(partial[0]) + mx - __bfloat162float(xr[labels[row]]);
}

}  // namespace

extern "C" int d2k_cross_entropy(const __nv_bfloat16* x, const int* labels, float* loss, int64_t rows,
                                 int64_t vocab, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  cross_entropy_two_pass<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, labels, loss, vocab);
  return static_cast<int>(cudaGetLastError());
}
