// softmax baseline: the kernel a beginner writes first. One thread per row, three passes over its
// row (maximum, sum of exponentials in double, normalised output). Correct, but the 32 threads of a warp
// walk 32 different rows, so every load touches 32 different cache lines (uncoalesced), the row
// is read three times, and a few thousand rows fill only a handful of SMs.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

__device__ float to_float(float v) { return v; }
__device__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ void store(float* p, float v) { *p = v; }
__device__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T>
__global__ void softmax_thread_per_row(const T* x, T* y, int64_t rows, int64_t cols) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const T* xr = x + r * cols;
  T* yr = y + r * cols;
  float m = -INFINITY;
  for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, to_float(xr[c]));
  double s = 0.0;  // a long sequential sum: accumulated in double to stay accurate
  for (int64_t c = 0; c < cols; ++c) s += expf(to_float(xr[c]) - m);
  const float inv_sum = static_cast<float>(1.0 / s);
  for (int64_t c = 0; c < cols; ++c) store(yr + c, expf(to_float(xr[c]) - m) * inv_sum);
}

}  // namespace

extern "C" int d2k_softmax(const void* x, void* y, int64_t rows, int64_t cols, int elem_bytes,
                           cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  const int threads = 256;
  const int64_t blocks = (rows + threads - 1) / threads;
  if (elem_bytes == 4) {
    softmax_thread_per_row<float><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        static_cast<const float*>(x), static_cast<float*>(y), rows, cols);
  } else if (elem_bytes == 2) {
    softmax_thread_per_row<__nv_bfloat16><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(y), rows, cols);
  } else {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}
