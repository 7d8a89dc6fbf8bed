// histogram expert, layer 1 (algorithmic insight): privatization. Each block owns one contiguous
// 64 KiB chunk of the input and counts it into its own 256 counters in shared memory (one
// shared-memory atomic per byte, coalesced byte loads), then merges them into bins with one
// global atomic per non-zero bin: global atomics drop from n to at most 256 per 64 KiB.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 65536;  // input bytes per block

__global__ void __launch_bounds__(kThreads)
histogram_block_private(const uint8_t* __restrict__ data, uint32_t* __restrict__ bins, int64_t n) {
  __shared__ uint32_t local[256];
  local[threadIdx.x] = 0;  // kThreads == 256: one counter per thread
  __syncthreads();
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int64_t end = begin + kChunk < n ? begin + kChunk : n;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) atomicAdd(&local[data[i]], 1u);
  __syncthreads();
  const uint32_t c = local[threadIdx.x];
  if (c != 0) atomicAdd(&bins[threadIdx.x], c);
}

}  // namespace

extern "C" int d2k_histogram(const uint8_t* data, uint32_t* bins, int64_t n, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(bins, 0, 256 * sizeof(uint32_t), stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (n <= 0) return 0;
  const int64_t blocks = (n + kChunk - 1) / kChunk;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  histogram_block_private<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(data, bins, n);
  return static_cast<int>(cudaGetLastError());
}
