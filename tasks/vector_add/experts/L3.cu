// vector_add expert, layer 3 (low level): a grid of four machine waves, moving data as 128-bit vectors
// (float4: one LDG.E.128 per 4 elements instead of 4 LDG.E), four vectors of a and four of b in
// flight per thread over block-contiguous tiles, a scalar tail (n % 4 elements), and a scalar
// fallback for pointers that are not 16-byte aligned. No streaming cache hints: on the H200 they
// cost about 8% here (bench/vector_add, 2026-12-01).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
#ifndef VA_VECS
#define VA_VECS 4  // bench/vector_add builds variants with -DVA_VECS=...
#endif
constexpr int kVecPerIter = VA_VECS;  // float4 vectors of a (and of b) in flight per thread
constexpr int64_t kTile = int64_t{kThreads} * kVecPerIter;  // float4s a block moves per iteration

__device__ __forceinline__ float4 add4(float4 x, float4 z) {
  return make_float4(x.x + z.x, x.y + z.y, x.z + z.z, x.w + z.w);
}

// Each block walks contiguous tiles of kTile vectors (grid-stride over tiles): a warp's accesses
// stay within one 2 KiB stretch per load, and
// consecutive loads of a thread are 4 KiB apart instead of a whole grid apart.
__global__ void __launch_bounds__(kThreads)
vector_add_vec4(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y,
                int64_t n) {
  const float4* __restrict__ a4 = reinterpret_cast<const float4*>(a);
  const float4* __restrict__ b4 = reinterpret_cast<const float4*>(b);
  float4* __restrict__ y4 = reinterpret_cast<float4*>(y);
  const int64_t n4 = n / 4;
  const int64_t tile_stride = static_cast<int64_t>(gridDim.x) * kTile;
  int64_t base = static_cast<int64_t>(blockIdx.x) * kTile;
  for (; base + kTile <= n4; base += tile_stride) {
    float4 va[kVecPerIter], vb[kVecPerIter];
#pragma unroll
    for (int k = 0; k < kVecPerIter; ++k) va[k] = a4[base + k * kThreads + threadIdx.x];
#pragma unroll
    for (int k = 0; k < kVecPerIter; ++k) vb[k] = b4[base + k * kThreads + threadIdx.x];
#pragma unroll
    for (int k = 0; k < kVecPerIter; ++k) y4[base + k * kThreads + threadIdx.x] = add4(va[k], vb[k]);
  }
  // The last, partial tile (one block reaches it).
  if (base < n4)
    for (int64_t i = base + threadIdx.x; i < n4; i += kThreads) y4[i] = add4(a4[i], b4[i]);
  // The n % 4 scalar tail, by the first threads of the grid.
  const int64_t tail = 4 * n4 + static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (tail < n) y[tail] = a[tail] + b[tail];
}

__global__ void __launch_bounds__(kThreads)
vector_add_scalar(const float* __restrict__ a, const float* __restrict__ b,
                  float* __restrict__ y, int64_t begin, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = a[i] + b[i];
  }
}

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
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vector_add_vec4, kThreads, 0);
    if (err != cudaSuccess) return err;
    // Four waves of the full machine (32 blocks per SM at 256 threads, still within L2's
    // grid_sized_to_machine bound): a block that finishes its tiles early makes room for another.
    cached_blocks = sms * (per_sm > 0 ? per_sm : 1) * 4;
    cached_device = device;
  }
  *blocks = cached_blocks;
  return cudaSuccess;
}

int clamp_blocks(int64_t work_items, int full) {
  const int64_t needed = (work_items + kThreads - 1) / kThreads;
  return static_cast<int>(needed < full ? needed : full);
}

}  // namespace

extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n,
                              cudaStream_t stream) {
  if (n <= 0) return 0;
  int full = 0;
  const cudaError_t err = full_grid(&full);
  if (err != cudaSuccess) return static_cast<int>(err);

  const auto misaligned = (reinterpret_cast<std::uintptr_t>(a) | reinterpret_cast<std::uintptr_t>(b) |
                           reinterpret_cast<std::uintptr_t>(y)) & 15u;
  if (misaligned) {
    vector_add_scalar<<<clamp_blocks(n, full), kThreads, 0, stream>>>(a, b, y, 0, n);
  } else {
    // At least n % 4 threads for the tail, at most one full machine.
    const int64_t work = n / 4 > n % 4 ? n / 4 : n % 4;
    vector_add_vec4<<<clamp_blocks(work, full), kThreads, 0, stream>>>(a, b, y, n);
  }
  return static_cast<int>(cudaGetLastError());
}
