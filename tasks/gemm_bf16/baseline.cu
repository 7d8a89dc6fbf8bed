// gemm_bf16 baseline: the kernel a beginner writes first. One thread per element of C computes the
// whole dot product of a row of A and a row of B straight from global memory, in fp32. Correct, but
// every operand is fetched again for each output that uses it: two loads per multiply-add, so the
// kernel is bound by load instructions and cache bandwidth (about 1 TFLOP/s), not by arithmetic.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void gemm_bf16_naive(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                const __nv_bfloat16* bias, __nv_bfloat16* C, int64_t M, int64_t N,
                                int64_t K, int use_bias) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t m = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  if (m >= M || n >= N) return;
  const __nv_bfloat16* a = A + m * K;
  const __nv_bfloat16* b = B + n * K;
  float acc = 0.0f;
  for (int64_t k = 0; k < K; ++k) acc += __bfloat162float(a[k]) * __bfloat162float(b[k]);
  if (use_bias) acc += __bfloat162float(bias[n]);
  C[m * N + n] = __float2bfloat16_rn(acc);
}

extern "C" int d2k_gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B,
                             const __nv_bfloat16* bias, __nv_bfloat16* C, int64_t M, int64_t N,
                             int64_t K, int use_bias, cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  const dim3 block(16, 16);
  const int64_t gx = (N + 15) / 16;
  const int64_t gy = (M + 15) / 16;
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  gemm_bf16_naive<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), block, 0, stream>>>(
      A, B, bias, C, M, N, K, use_bias);
  return static_cast<int>(cudaGetLastError());
}
