// vector_add baseline: the kernel a beginner writes first. Correct, but each thread owns one
// contiguous chunk of the vector, so the 32 threads of a warp read 32 addresses that lie a whole
// chunk apart (uncoalesced): every load instruction touches 32 different cache lines.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void vector_add_chunked(const float* a, const float* b, float* y, int64_t n,
                                   int64_t chunk) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t begin = t * chunk;
  const int64_t end = begin + chunk < n ? begin + chunk : n;
  for (int64_t i = begin; i < end; ++i) {
    y[i] = a[i] + b[i];
  }
}

extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n,
                              cudaStream_t stream) {
  if (n <= 0) return 0;
  const int threads = 256;
  const int blocks = 1024;
  const int64_t total = static_cast<int64_t>(threads) * blocks;
  const int64_t chunk = (n + total - 1) / total;
  vector_add_chunked<<<blocks, threads, 0, stream>>>(a, b, y, n, chunk);
  return static_cast<int>(cudaGetLastError());
}
