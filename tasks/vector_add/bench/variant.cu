// Parameterised vector_add builds for harness.cu: -DUNROLL=<float4s in flight per thread>
// -DHINT=<0|1 streaming cache hints> -DONEPASS=<1: one float4 per thread, grid covers the array>.
#include <cuda_runtime.h>

#include <cstdint>

#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef HINT
#define HINT 0
#endif
#ifndef ONEPASS
#define ONEPASS 0
#endif

namespace {
constexpr int kThreads = 256;

__device__ __forceinline__ float4 load(const float4* p) {
#if HINT
  return __ldcs(p);
#else
  return *p;
#endif
}
__device__ __forceinline__ void store(float4* p, float4 v) {
#if HINT
  __stcs(p, v);
#else
  *p = v;
#endif
}

__global__ void __launch_bounds__(kThreads) k_vec(const float4* __restrict__ a, const float4* __restrict__ b,
                                                  float4* __restrict__ y, int64_t n4) {
#if ONEPASS
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n4) {
    float4 x = load(a + i), z = load(b + i);
    store(y + i, make_float4(x.x + z.x, x.y + z.y, x.z + z.z, x.w + z.w));
  }
#else
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  for (; i + (UNROLL - 1) * stride < n4; i += UNROLL * stride) {
    float4 va[UNROLL], vb[UNROLL];
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) va[k] = load(a + i + k * stride);
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) vb[k] = load(b + i + k * stride);
#pragma unroll
    for (int k = 0; k < UNROLL; ++k)
      store(y + i + k * stride, make_float4(va[k].x + vb[k].x, va[k].y + vb[k].y, va[k].z + vb[k].z, va[k].w + vb[k].w));
  }
  for (; i < n4; i += stride) {
    float4 x = load(a + i), z = load(b + i);
    store(y + i, make_float4(x.x + z.x, x.y + z.y, x.z + z.z, x.w + z.w));
  }
#endif
}
}  // namespace

extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
  int64_t n4 = n / 4;  // the harness uses a multiple of 4 and aligned buffers
  static int blocks = 0;
  if (!blocks) {
    int sms = 0, per = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_vec, kThreads, 0);
    blocks = sms * per;
  }
  int64_t grid = ONEPASS ? (n4 + kThreads - 1) / kThreads : blocks;
  k_vec<<<(unsigned)grid, kThreads, 0, s>>>(reinterpret_cast<const float4*>(a), reinterpret_cast<const float4*>(b),
                                           reinterpret_cast<float4*>(y), n4);
  return (int)cudaGetLastError();
}
