// vector_add expert, layer 3 (low level): 128-bit vectors (float4: one LDG.E.128 per 4 elements
// instead of 4 LDG.E) in tiles of 4 vectors per thread of a 1,024-thread block (16,384 elements
// per tile, all loads of a tile issued before its adds and stores), one tile per block in address
// order while the array has at most 32 tiles per SM (the bound of layer 2's grid_sized_to_machine
// property; 69 M elements on an H200), blocks looping over further tiles beyond that; a scalar
// tail (n % 4 elements) and a scalar fallback for pointers that are not 16-byte aligned. No
// streaming cache hints: on the H200 they cost about 8% here (bench/, 2026-12-01).
// Why not layer 2's few resident waves with every block looping: measured on the H200
// (bench/sweep, 2026-12-02), blocks that take one contiguous tile each and retire stream 3 to 7%
// faster than a resident grid walking its tiles, persistent or four waves deep.
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 1024;
#ifndef VA_VECS
#define VA_VECS 4  // bench/vector_add builds variants with -DVA_VECS=...
#endif
constexpr int kVecPerIter = VA_VECS;  // float4 vectors of a (and of b) in flight per thread
constexpr int64_t kTile = int64_t{kThreads} * kVecPerIter;  // float4s of one tile
constexpr int kMaxBlocksPerSm = 32;  // the grid's bound: layer 2's grid_sized_to_machine property
constexpr int kScalarThreads = 256;

__device__ __forceinline__ float4 add4(float4 x, float4 z) {
  return make_float4(x.x + z.x, x.y + z.y, x.z + z.z, x.w + z.w);
}

// Block b takes tiles b, b + grid, ... (one tile when the grid covers the array): a warp's
// accesses stay within one 512-byte stretch per load, a block's within one 64 KiB stretch of each
// array, and the resident blocks within one contiguous window that moves through the arrays.
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

__global__ void __launch_bounds__(kScalarThreads)
vector_add_scalar(const float* __restrict__ a, const float* __restrict__ b,
                  float* __restrict__ y, int64_t begin, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = a[i] + b[i];
  }
}

// The grid's bound: kMaxBlocksPerSm blocks per SM (cached per device).
cudaError_t max_blocks(int* blocks) {
  static int cached_device = -1;
  static int cached_blocks = 0;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != cached_device) {
    int sms = 0;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    cached_blocks = (sms > 0 ? sms : 1) * kMaxBlocksPerSm;
    cached_device = device;
  }
  *blocks = cached_blocks;
  return cudaSuccess;
}

int clamp_blocks(int64_t needed, int bound) {
  if (needed < 1) needed = 1;
  return static_cast<int>(needed < bound ? needed : bound);
}

}  // namespace

extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n,
                              cudaStream_t stream) {
  if (n <= 0) return 0;
  int bound = 0;
  const cudaError_t err = max_blocks(&bound);
  if (err != cudaSuccess) return static_cast<int>(err);

  const auto misaligned = (reinterpret_cast<std::uintptr_t>(a) | reinterpret_cast<std::uintptr_t>(b) |
                           reinterpret_cast<std::uintptr_t>(y)) & 15u;
  if (misaligned) {
    vector_add_scalar<<<clamp_blocks((n + kScalarThreads - 1) / kScalarThreads, bound), kScalarThreads, 0, stream>>>(
        a, b, y, 0, n);
  } else {
    // One block per tile (the partial tile included), at most the bound; a grid of one block
    // still has the threads for the n % 4 tail.
    vector_add_vec4<<<clamp_blocks((n / 4 + kTile - 1) / kTile, bound), kThreads, 0, stream>>>(a, b, y, n);
  }
  return static_cast<int>(cudaGetLastError());
}
