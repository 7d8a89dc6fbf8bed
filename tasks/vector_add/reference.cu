// vector_add reference: trusted and obviously correct. Runs in a trusted process only; agents
// never see this file. Each output element is the double-precision sum rounded once to float.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void vector_add_reference(const float* a, const float* b, float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] = static_cast<float>(static_cast<double>(a[i]) + static_cast<double>(b[i]));
  }
}

extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n,
                              cudaStream_t stream) {
  if (n <= 0) return 0;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  vector_add_reference<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a, b, y, n);
  return static_cast<int>(cudaGetLastError());
}
