// vector_add that writes 256 elements past the end of y (a bounds check off by a block): memcheck
// must report an invalid __global__ write at the marked line.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void oob_add(const float* a, const float* b, float* y, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
  else if (i < n + 256) y[i] = 0.0f;  // D2K_OOB_LINE: out of bounds
}

extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream) {
  const int64_t blocks = (n + 256 + 255) / 256;
  oob_add<<<(unsigned)blocks, 256, 0, stream>>>(a, b, y, n);
  return (int)cudaGetLastError();
}
