// histogram baseline: the kernel a beginner writes first. Correct, but every byte is one global
// atomic add on one of only 256 counters: all threads of the GPU fight over the same 256 words in
// L2, and on skewed data most of them over one word, so the atomics serialize.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void histogram_global_atomics(const uint8_t* data, uint32_t* bins, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&bins[data[i]], 1u);
}

extern "C" int d2k_histogram(const uint8_t* data, uint32_t* bins, int64_t n, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(bins, 0, 256 * sizeof(uint32_t), stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (n <= 0) return 0;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  histogram_global_atomics<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(data, bins, n);
  return static_cast<int>(cudaGetLastError());
}
