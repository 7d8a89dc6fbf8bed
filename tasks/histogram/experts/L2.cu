// histogram expert, layer 2 (dataflow): L1's privatization with one 256-counter sub-histogram per
// warp (8 per block, 8 KiB), so warps never share counters; a grid sized to the machine (SMs x
// resident blocks, cached) walks the input in 16-byte chunks with a grid-stride loop; the few
// bytes before the first 16-byte boundary and after the last chunk are counted one by one.
// At the end each block adds its 8 warp counters per bin and merges with one global atomic.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ void count_word(uint32_t* hist, uint32_t w) {
  atomicAdd(&hist[w & 0xFFu], 1u);
  atomicAdd(&hist[(w >> 8) & 0xFFu], 1u);
  atomicAdd(&hist[(w >> 16) & 0xFFu], 1u);
  atomicAdd(&hist[w >> 24], 1u);
}

__global__ void __launch_bounds__(kThreads)
histogram_warp_private(const uint8_t* __restrict__ data, uint32_t* __restrict__ bins, int64_t n) {
  __shared__ uint32_t warp_hist[kWarps][256];
  for (int i = threadIdx.x; i < kWarps * 256; i += kThreads) (&warp_hist[0][0])[i] = 0;
  __syncthreads();
  uint32_t* hist = warp_hist[threadIdx.x >> 5];

  // Bytes [0, head) come before the first 16-byte boundary; [tail, n) after the last full chunk.
  const int64_t mis = static_cast<int64_t>(reinterpret_cast<uintptr_t>(data) & 15u);
  const int64_t to_boundary = (16 - mis) & 15;
  const int64_t head = to_boundary < n ? to_boundary : n;
  const int64_t n16 = (n - head) / 16;
  const int64_t tail = head + 16 * n16;
  const uint4* data16 = reinterpret_cast<const uint4*>(data + head);

  const int64_t gtid = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = gtid; i < n16; i += stride) {
    const uint4 v = data16[i];
    count_word(hist, v.x);
    count_word(hist, v.y);
    count_word(hist, v.z);
    count_word(hist, v.w);
  }
  // At most 15 + 15 single bytes, taken by the first threads of the grid.
  if (gtid < head) atomicAdd(&hist[data[gtid]], 1u);
  if (gtid < n - tail) atomicAdd(&hist[data[tail + gtid]], 1u);
  __syncthreads();

  // kThreads == 256: thread b owns bin b in the merge.
  uint32_t c = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) c += warp_hist[w][threadIdx.x];
  if (c != 0) atomicAdd(&bins[threadIdx.x], c);
}

// One full wave of resident blocks; cached per device (host queries would show in the timing).
cudaError_t full_grid(int* blocks) {
  static int cached_device = -1;
  static int cached_blocks = 0;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != cached_device) {
    int sms = 0, per_sm = 0;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, histogram_warp_private, kThreads, 0);
    if (err != cudaSuccess) return err;
    cached_blocks = sms * (per_sm > 0 ? per_sm : 1);
    cached_device = device;
  }
  *blocks = cached_blocks;
  return cudaSuccess;
}

}  // namespace

extern "C" int d2k_histogram(const uint8_t* data, uint32_t* bins, int64_t n, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(bins, 0, 256 * sizeof(uint32_t), stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (n <= 0) return 0;
  int full = 0;
  err = full_grid(&full);
  if (err != cudaSuccess) return static_cast<int>(err);
  // Small inputs: no more blocks than there are 16-byte chunks to cover (at least one).
  const int64_t needed = (n / 16 + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(needed < 1 ? 1 : (needed < full ? needed : full));
  histogram_warp_private<<<blocks, kThreads, 0, stream>>>(data, bins, n);
  return static_cast<int>(cudaGetLastError());
}
