// softmax expert, layer 1 (algorithmic insight): online softmax. One block of 256 threads per
// row, consecutive threads on consecutive columns (coalesced). Each thread keeps a running
// (max, sum) pair and rescales its sum when the max grows, so one read of the row gives the
// statistics; the 256 pairs are merged by a shared-memory tree; a second read writes the output.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// Merges the pair (m2, s2) into (m, s): s is a sum of exp(x - m). An empty pair is (-inf, 0).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  if (mm == -INFINITY) return;  // both empty
  s = s * expf(m - mm) + s2 * expf(m2 - mm);
  m = mm;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
softmax_block_online(const T* __restrict__ x, T* __restrict__ y, int64_t cols) {
  __shared__ float red_m[kThreads];
  __shared__ float red_s[kThreads];
  const int tid = threadIdx.x;
  const T* __restrict__ xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  T* __restrict__ yr = y + static_cast<int64_t>(blockIdx.x) * cols;

  // Statistics pass: one read of the row, running max and rescaled running sum.
  float m = -INFINITY, s = 0.0f;
  for (int64_t c = tid; c < cols; c += kThreads) {
    const float v = to_float(xr[c]);
    if (v > m) {
      s = s * expf(m - v) + 1.0f;  // the first element: 0 * exp(-inf) + 1 = 1
      m = v;
    } else {
      s += expf(v - m);
    }
  }

  // Tree reduction of the (max, sum) pairs in shared memory.
  red_m[tid] = m;
  red_s[tid] = s;
  __syncthreads();
  for (int off = kThreads / 2; off > 0; off /= 2) {
    if (tid < off) {
      merge(m, s, red_m[tid + off], red_s[tid + off]);
      red_m[tid] = m;
      red_s[tid] = s;
    }
    __syncthreads();
  }
  const float row_max = red_m[0];
  const float inv_sum = 1.0f / red_s[0];

  // Output pass: second read of the row.
  for (int64_t c = tid; c < cols; c += kThreads) {
    store(yr + c, expf(to_float(xr[c]) - row_max) * inv_sum);
  }
}

}  // namespace

extern "C" int d2k_softmax(const void* x, void* y, int64_t rows, int64_t cols, int elem_bytes,
                           cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const unsigned blocks = static_cast<unsigned>(rows);
  if (elem_bytes == 4) {
    softmax_block_online<float><<<blocks, kThreads, 0, stream>>>(
        static_cast<const float*>(x), static_cast<float*>(y), cols);
  } else if (elem_bytes == 2) {
    softmax_block_online<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(y), cols);
  } else {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}
