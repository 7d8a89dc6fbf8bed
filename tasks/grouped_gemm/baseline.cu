// grouped_gemm baseline: the kernel a beginner writes first. One thread per element of Y finds its
// row's group by a binary search over the offsets, then computes the whole dot product of the row
// of X and the row of W_g straight from global memory, in fp32. Correct, but every operand is
// fetched again for each output that uses it: two loads per multiply-add, so the kernel is bound by
// load instructions and cache bandwidth (about 1 TFLOP/s), not by arithmetic.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void grouped_gemm_naive(const __nv_bfloat16* X, const __nv_bfloat16* W, const int* offsets,
                                   __nv_bfloat16* Y, int64_t T, int64_t G, int64_t N, int64_t K) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t t = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  if (t >= T || n >= N) return;
  // The group of row t: the last g with offsets[g] <= t (empty groups share their offset).
  int64_t lo = 0, hi = G - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= t) lo = mid; else hi = mid - 1;
  }
  const __nv_bfloat16* x = X + t * K;
  const __nv_bfloat16* w = W + (lo * N + n) * K;
  float acc = 0.0f;
  for (int64_t k = 0; k < K; ++k) acc += __bfloat162float(x[k]) * __bfloat162float(w[k]);
  Y[t * N + n] = __float2bfloat16_rn(acc);
}

extern "C" int d2k_grouped_gemm(const __nv_bfloat16* X, const __nv_bfloat16* W, const int* offsets,
                                __nv_bfloat16* Y, int64_t T, int64_t G, int64_t N, int64_t K,
                                cudaStream_t stream) {
  if (T <= 0 || G <= 0 || N <= 0 || K <= 0) return 0;
  const dim3 block(16, 16);
  const int64_t gx = (N + 15) / 16;
  const int64_t gy = (T + 15) / 16;
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  grouped_gemm_naive<<<grid, block, 0, stream>>>(X, W, offsets, Y, T, G, N, K);
  return static_cast<int>(cudaGetLastError());
}
