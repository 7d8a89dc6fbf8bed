// Bandwidth probes for the sweep (tasks/vector_add/bench/sweep/sweep.py): what the H200's DRAM gives a
// kernel that only writes, only reads, copies, or reads once and writes k times (moe_permute's
// pattern: each 8-14 KB row read once and stored to k scattered places). Grid-stride, 16-byte accesses.
#include <cstdint>
#include <cuda_runtime.h>

namespace {
constexpr int kThreads = 256;

int grid_for(const void* kernel) {
  int dev = 0, sms = 0, per = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, kThreads, 0);
  return sms * (per > 0 ? per : 1) * 4;
}

template <bool CS>
__global__ void __launch_bounds__(kThreads) write_only(uint4* __restrict__ dst, int64_t n4, unsigned v) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const uint4 val = make_uint4(v, v + 1, v + 2, v + 3);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n4; i += stride) {
    if (CS) __stcs(dst + i, val);
    else dst[i] = val;
  }
}

__global__ void __launch_bounds__(kThreads) read_only(const uint4* __restrict__ src, int64_t n4, unsigned* sink) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  unsigned acc = 0;
  int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  for (; i + 3 * stride < n4; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n4; i += stride) {
    const uint4 a = src[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads
}

__global__ void __launch_bounds__(kThreads) copy4(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n4) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n4; i += stride) dst[i] = src[i];
}

// One block per row: the row (row_chunks 16-byte chunks, at most 8 per thread) loaded once, stored
// to k places, copy s of row r at row s * rows + r (k rows apart in the output: scattered).
template <bool CS>
__global__ void __launch_bounds__(128) fanout(const uint4* __restrict__ src, uint4* __restrict__ dst, int rows,
                                              int row_chunks, int k) {
  const int r = blockIdx.x;
  uint4 v[8];
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    const int c = threadIdx.x + u * 128;
    if (c < row_chunks) v[u] = src[static_cast<int64_t>(r) * row_chunks + c];
  }
  for (int s = 0; s < k; ++s) {
    uint4* d = dst + (static_cast<int64_t>(s) * rows + r) * row_chunks;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int c = threadIdx.x + u * 128;
      if (c < row_chunks) {
        if (CS) __stcs(d + c, v[u]);
        else d[c] = v[u];
      }
    }
  }
}
}  // namespace

extern "C" int bw_write(void* dst, int64_t bytes, int cs, cudaStream_t s) {
  if (cs) write_only<true><<<grid_for((const void*)write_only<true>), kThreads, 0, s>>>((uint4*)dst, bytes / 16, 7u);
  else write_only<false><<<grid_for((const void*)write_only<false>), kThreads, 0, s>>>((uint4*)dst, bytes / 16, 7u);
  return (int)cudaGetLastError();
}
extern "C" int bw_read(const void* src, int64_t bytes, void* sink, cudaStream_t s) {
  read_only<<<grid_for((const void*)read_only), kThreads, 0, s>>>((const uint4*)src, bytes / 16, (unsigned*)sink);
  return (int)cudaGetLastError();
}
extern "C" int bw_copy(const void* src, void* dst, int64_t bytes, cudaStream_t s) {
  copy4<<<grid_for((const void*)copy4), kThreads, 0, s>>>((const uint4*)src, (uint4*)dst, bytes / 16);
  return (int)cudaGetLastError();
}
extern "C" int bw_fanout(const void* src, void* dst, int rows, int row_bytes, int k, int cs, cudaStream_t s) {
  if (cs) fanout<true><<<rows, 128, 0, s>>>((const uint4*)src, (uint4*)dst, rows, row_bytes / 16, k);
  else fanout<false><<<rows, 128, 0, s>>>((const uint4*)src, (uint4*)dst, rows, row_bytes / 16, k);
  return (int)cudaGetLastError();
}
