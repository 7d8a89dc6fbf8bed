// transpose reference: trusted and obviously correct. Runs in a trusted process only; agents
// never see this file. One thread per output element: y[c][r] = x[r][c], a plain copy of one
// float (exact), with 64-bit indices throughout.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void transpose_reference(const float* x, float* y, int64_t rows, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // index into y
  if (i < rows * cols) {
    const int64_t c = i / rows;  // row of y = column of x
    const int64_t r = i % rows;  // column of y = row of x
    y[i] = x[r * cols + c];
  }
}

extern "C" int d2k_transpose(const float* x, float* y, int64_t rows, int64_t cols,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  const int threads = 256;
  const int64_t blocks = (rows * cols + threads - 1) / threads;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  transpose_reference<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(x, y, rows, cols);
  return static_cast<int>(cudaGetLastError());
}
