// vector_add through shared memory with the __syncthreads() missing: racecheck must report a
// shared-memory hazard (the result may still be right).
#include <cstdint>
#include <cuda_runtime.h>

__global__ void racy_add(const float* a, const float* b, float* y, int64_t n) {
  __shared__ float tile[256];
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? a[i] : 0.0f;
  // missing __syncthreads()
  const float neighbour = tile[(threadIdx.x + 1) % 256];
  if (i < n) y[i] = tile[threadIdx.x] + b[i] + 0.0f * neighbour;
}

extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream) {
  racy_add<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(a, b, y, n);
  return (int)cudaGetLastError();
}
