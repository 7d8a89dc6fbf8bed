// transpose baseline: the kernel a beginner writes first. One thread per element of x, numbered
// in x's row-major order: the loads of a warp are coalesced, but its 32 stores land in 32
// different rows of y (a stride of `rows` floats), so every store instruction touches 32
// different cache lines and each sector written carries only 4 useful bytes.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void transpose_naive(const float* x, float* y, int64_t rows, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // index into x
  if (i < rows * cols) {
    const int64_t r = i / cols;
    const int64_t c = i % cols;
    y[c * rows + r] = x[i];
  }
}

extern "C" int d2k_transpose(const float* x, float* y, int64_t rows, int64_t cols,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  const int threads = 256;
  const int64_t blocks = (rows * cols + threads - 1) / threads;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  transpose_naive<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(x, y, rows, cols);
  return static_cast<int>(cudaGetLastError());
}
