// softmax reference: trusted and obviously correct. Runs in a trusted process only; agents never
// see this file. One block per row, three passes over the row: the maximum (exact in float), the
// sum of exp(x - max) in double, then each output exp(x - max) / sum computed in double and
// rounded once to the output type.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__device__ double load(const float* p, int64_t i) { return static_cast<double>(p[i]); }
__device__ double load(const __nv_bfloat16* p, int64_t i) {
  return static_cast<double>(__bfloat162float(p[i]));
}
__device__ void store(float* p, int64_t i, double v) { p[i] = __double2float_rn(v); }
__device__ void store(__nv_bfloat16* p, int64_t i, double v) { p[i] = __double2bfloat16(v); }

template <typename T>
__global__ void softmax_reference(const T* x, T* y, int64_t cols) {
  __shared__ double red[kThreads];
  const int tid = threadIdx.x;
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  T* yr = y + static_cast<int64_t>(blockIdx.x) * cols;

  // Pass 1: the row maximum.
  double m = -INFINITY;
  for (int64_t c = tid; c < cols; c += kThreads) m = fmax(m, load(xr, c));
  red[tid] = m;
  __syncthreads();
  for (int off = kThreads / 2; off > 0; off /= 2) {
    if (tid < off) red[tid] = fmax(red[tid], red[tid + off]);
    __syncthreads();
  }
  const double row_max = red[0];
  __syncthreads();  // everyone has read red[0] before it is reused

  // Pass 2: the sum of exp(x - max), in double.
  double s = 0.0;
  for (int64_t c = tid; c < cols; c += kThreads) s += exp(load(xr, c) - row_max);
  red[tid] = s;
  __syncthreads();
  for (int off = kThreads / 2; off > 0; off /= 2) {
    if (tid < off) red[tid] = red[tid] + red[tid + off];
    __syncthreads();
  }
  const double row_sum = red[0];

  // Pass 3: each output, rounded once.
  for (int64_t c = tid; c < cols; c += kThreads) store(yr, c, exp(load(xr, c) - row_max) / row_sum);
}

}  // namespace

extern "C" int d2k_softmax(const void* x, void* y, int64_t rows, int64_t cols, int elem_bytes,
                           cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const unsigned blocks = static_cast<unsigned>(rows);
  if (elem_bytes == 4) {
    softmax_reference<float><<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(x),
                                                              static_cast<float*>(y), cols);
  } else if (elem_bytes == 2) {
    softmax_reference<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(y), cols);
  } else {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}
