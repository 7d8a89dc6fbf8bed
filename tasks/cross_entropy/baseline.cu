// cross_entropy baseline: the kernel a beginner writes first. Correct, but one thread owns a whole
// row and walks it twice (maximum, then the sum of exponentials). The 32 threads of a warp work on
// 32 different rows, so every load instruction touches 32 cache lines a row apart (uncoalesced),
// and only `rows` threads exist to hide the memory latency.
#include <cfloat>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void cross_entropy_thread_per_row(const __nv_bfloat16* x, const int* labels, float* loss,
                                             int64_t rows, int64_t vocab) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const __nv_bfloat16* xr = x + row * vocab;
  float m = -FLT_MAX;
  for (int64_t c = 0; c < vocab; ++c) m = fmaxf(m, __bfloat162float(xr[c]));
  float sum = 0.0f;
  for (int64_t c = 0; c < vocab; ++c) sum += expf(__bfloat162float(xr[c]) - m);
  loss[row] = logf(sum) + m - __bfloat162float(xr[labels[row]]);
}

extern "C" int d2k_cross_entropy(const __nv_bfloat16* x, const int* labels, float* loss, int64_t rows,
                                 int64_t vocab, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return 0;
  const int threads = 128;
  const int64_t blocks = (rows + threads - 1) / threads;
  cross_entropy_thread_per_row<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(x, labels, loss, rows, vocab);
  return static_cast<int>(cudaGetLastError());
}
