// vector_add expert, layer 1 (algorithmic insight): one pass over memory, each byte read or
// written exactly once, and neighbouring threads touch neighbouring elements (coalesced).
// One element per thread.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void vector_add_coalesced(const float* a, const float* b, float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
}

extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n,
                              cudaStream_t stream) {
  if (n <= 0) return 0;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  vector_add_coalesced<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a, b, y, n);
  return static_cast<int>(cudaGetLastError());
}
