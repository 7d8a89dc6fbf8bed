// swiglu expert, layer 3 (low level): L2's persistent grid, with data moved as 128-bit vectors and
// the math done on packed bf16 pairs. When cols is a multiple of 8 and both pointers are 16-byte
// aligned, every row of the gate half, of the up half and of y starts on a 16-byte boundary: the
// tensor is then a flat sequence of 8-column chunks (y chunk k = gate chunk k + row * cols / 8), so
// one 32-bit division per chunk finds the row and no lane idles at the end of a row. Each thread
// moves two chunks per step: four LDG.E.128 in flight (64 bytes) and two STG.E.128. silu(g) * u is
// computed as g * u / (1 + 2^(-g log2 e)) with the fast exponential and reciprocal (MUFU.EX2,
// MUFU.RCP), and two results are rounded to bf16 by one packed conversion. Other shapes (cols not
// a multiple of 8, or misaligned pointers) take a tiled scalar kernel with eight elements per
// thread in flight and the same fast math.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kChunksPerThread = 2;                       // 16-byte chunks of y per thread and step
constexpr int kScalarPerThread = 8;                       // fallback: elements per thread and tile
constexpr int kScalarTile = kThreads * kScalarPerThread;  // fallback: columns per tile

__device__ __forceinline__ float silu_mul(float g, float u) {
  return __fdividef(g * u, 1.0f + __expf(-g));
}

// One packed word of gate (two bf16) and one of up -> one packed word of y.
__device__ __forceinline__ uint32_t swiglu2(uint32_t gw, uint32_t uw) {
  const float g0 = __uint_as_float(gw << 16), g1 = __uint_as_float(gw & 0xffff0000u);
  const float u0 = __uint_as_float(uw << 16), u1 = __uint_as_float(uw & 0xffff0000u);
  const __nv_bfloat162 o = __floats2bfloat162_rn(silu_mul(g0, u0), silu_mul(g1, u1));
  return *reinterpret_cast<const uint32_t*>(&o);
}

__global__ void __launch_bounds__(kThreads)
swiglu_vec8(const uint4* __restrict__ x, uint4* __restrict__ y, uint32_t chunks_per_row,
            uint32_t chunks) {
  const uint32_t stride = gridDim.x * kThreads * kChunksPerThread;
  for (uint32_t base = blockIdx.x * kThreads * kChunksPerThread + threadIdx.x; base < chunks;
       base += stride) {
    uint4 g[kChunksPerThread], u[kChunksPerThread];
#pragma unroll
    for (int j = 0; j < kChunksPerThread; ++j) {
      const uint32_t k = base + j * kThreads;
      if (k < chunks) {
        const uint32_t r = k / chunks_per_row;
        const uint4* gp = x + (static_cast<size_t>(k) + static_cast<size_t>(r) * chunks_per_row);
        g[j] = gp[0];
        u[j] = gp[chunks_per_row];
      }
    }
#pragma unroll
    for (int j = 0; j < kChunksPerThread; ++j) {
      const uint32_t k = base + j * kThreads;
      if (k < chunks) {
        uint4 o;
        o.x = swiglu2(g[j].x, u[j].x);
        o.y = swiglu2(g[j].y, u[j].y);
        o.z = swiglu2(g[j].z, u[j].z);
        o.w = swiglu2(g[j].w, u[j].w);
        y[k] = o;
      }
    }
  }
}

// Any cols, any 2-byte alignment: tiles of 2048 columns of one row, thread t owns columns
// t + 256 i (i < 8), all sixteen loads issued before the math.
__global__ void __launch_bounds__(kThreads)
swiglu_scalar_tiles(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y,
                    int64_t cols, int64_t tiles_per_row, int64_t tiles) {
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r = t / tiles_per_row;
    const int64_t c0 = (t - r * tiles_per_row) * kScalarTile + threadIdx.x;
    const __nv_bfloat16* gate = x + r * 2 * cols;
    const __nv_bfloat16* up = gate + cols;
    __nv_bfloat16* yr = y + r * cols;
    float g[kScalarPerThread], u[kScalarPerThread];
#pragma unroll
    for (int i = 0; i < kScalarPerThread; ++i) {
      const int64_t c = c0 + i * kThreads;
      g[i] = c < cols ? __bfloat162float(gate[c]) : 0.0f;
      u[i] = c < cols ? __bfloat162float(up[c]) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kScalarPerThread; ++i) {
      const int64_t c = c0 + i * kThreads;
      if (c < cols) yr[c] = __float2bfloat16(silu_mul(g[i], u[i]));
    }
  }
}

// SMs x resident blocks of `kernel`, cached per device (each kernel has its own cache).
template <typename Kernel>
cudaError_t full_grid(Kernel kernel, int* cached_device, int* cached_blocks, int* blocks) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != *cached_device) {
    int sms = 0, per_sm = 0;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
    if (err != cudaSuccess) return err;
    *cached_blocks = sms * (per_sm > 0 ? per_sm : 1);
    *cached_device = device;
  }
  *blocks = *cached_blocks;
  return cudaSuccess;
}

}  // namespace

extern "C" int d2k_swiglu(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows * cols > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const bool aligned = cols % 8 == 0 && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  int full = 0;
  cudaError_t err;
  if (aligned) {
    static int dev = -1, cached = 0;
    err = full_grid(swiglu_vec8, &dev, &cached, &full);
    if (err != cudaSuccess) return static_cast<int>(err);
    const int64_t chunks = rows * (cols / 8);
    const int64_t wanted = (chunks + kThreads * kChunksPerThread - 1) / (kThreads * kChunksPerThread);
    const unsigned blocks = static_cast<unsigned>(wanted < full ? wanted : full);
    swiglu_vec8<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<const uint4*>(x),
                                                 reinterpret_cast<uint4*>(y),
                                                 static_cast<uint32_t>(cols / 8),
                                                 static_cast<uint32_t>(chunks));
  } else {
    static int dev = -1, cached = 0;
    err = full_grid(swiglu_scalar_tiles, &dev, &cached, &full);
    if (err != cudaSuccess) return static_cast<int>(err);
    const int64_t tiles_per_row = (cols + kScalarTile - 1) / kScalarTile;
    const int64_t tiles = rows * tiles_per_row;
    const unsigned blocks = static_cast<unsigned>(tiles < full ? tiles : full);
    swiglu_scalar_tiles<<<blocks, kThreads, 0, stream>>>(x, y, cols, tiles_per_row, tiles);
  }
  return static_cast<int>(cudaGetLastError());
}
