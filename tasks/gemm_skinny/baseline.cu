// gemm_skinny baseline: what a first attempt looks like. One thread per output y[m][n] (threads of
// a warp take consecutive n), each walking its W row and x row one bf16 at a time with an fp32
// accumulator. Correct, but the 32 lanes of a warp read 32 different W rows (K * 2 bytes apart) at
// every step, so each load instruction touches 32 sectors for 64 useful bytes, and W is read again
// for every one of the M rows of x (from L2 at best).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void gemm_skinny_baseline(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int64_t M,
                                     int64_t N, int64_t K) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t m = blockIdx.y;
  if (n >= N || m >= M) return;
  const __nv_bfloat16* wr = W + n * K;
  const __nv_bfloat16* xr = x + m * K;
  float acc = 0.0f;
  for (int64_t k = 0; k < K; ++k) acc += __bfloat162float(xr[k]) * __bfloat162float(wr[k]);
  y[m * N + n] = __float2bfloat16(acc);
}

extern "C" int d2k_gemm_skinny(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int64_t M,
                               int64_t N, int64_t K, cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0 || M > 65535) return static_cast<int>(cudaErrorInvalidValue);
  const int threads = 128;
  const int64_t gx = (N + threads - 1) / threads;
  if (gx > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(M));
  gemm_skinny_baseline<<<grid, threads, 0, stream>>>(x, W, y, M, N, K);
  return static_cast<int>(cudaGetLastError());
}
