// histogram reference: trusted and obviously correct. Runs in a trusted process only; agents never
// see this file. bins is zeroed first; every block counts the bytes of a grid-stride walk into its
// own 256 counters in shared memory (shared-memory atomics), then adds each non-zero counter to
// bins with one global atomic. Integer counting: the result is exact whatever the order.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void histogram_reference(const uint8_t* data, uint32_t* bins, int64_t n) {
  __shared__ uint32_t local[256];
  for (int v = threadIdx.x; v < 256; v += blockDim.x) local[v] = 0;
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    atomicAdd(&local[data[i]], 1u);
  }
  __syncthreads();
  for (int v = threadIdx.x; v < 256; v += blockDim.x) {
    if (local[v] != 0) atomicAdd(&bins[v], local[v]);
  }
}

extern "C" int d2k_histogram(const uint8_t* data, uint32_t* bins, int64_t n, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(bins, 0, 256 * sizeof(uint32_t), stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (n <= 0) return 0;
  const int threads = 256;
  const int64_t needed = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(needed < 1024 ? needed : 1024);
  histogram_reference<<<blocks, threads, 0, stream>>>(data, bins, n);
  return static_cast<int>(cudaGetLastError());
}
