// gemm_skinny reference (trusted; agents never see it): one thread per y element, every product and
// the whole sum in double (bf16 products are exact; the sum's error is far below a bf16 ulp), then
// one rounding to bf16 (nearest even). A block computes a 16 (n) x 16 (m) tile of y, staging
// 16 x 16 pieces of W and x through shared memory only for speed.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

constexpr int kT = 16;

__global__ void gemm_skinny_reference(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int64_t M,
                                      int64_t N, int64_t K) {
  __shared__ double w_tile[kT][kT + 1];  // w_tile[c][k] = W[n0 + c][k0 + k]
  __shared__ double x_tile[kT][kT + 1];  // x_tile[r][k] = x[m0 + r][k0 + k]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kT;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kT;
  const int64_t n = n0 + tx, m = m0 + ty;
  double acc = 0.0;
  for (int64_t k0 = 0; k0 < K; k0 += kT) {
    const int64_t k = k0 + tx;
    w_tile[ty][tx] = (n0 + ty < N && k < K) ? static_cast<double>(__bfloat162float(W[(n0 + ty) * K + k])) : 0.0;
    x_tile[ty][tx] = (m < M && k < K) ? static_cast<double>(__bfloat162float(x[m * K + k])) : 0.0;
    __syncthreads();
    for (int kk = 0; kk < kT; ++kk) acc += x_tile[ty][kk] * w_tile[tx][kk];
    __syncthreads();
  }
  if (m < M && n < N) y[m * N + n] = __double2bfloat16(acc);
}

extern "C" int d2k_gemm_skinny(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int64_t M,
                               int64_t N, int64_t K, cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t gx = (N + kT - 1) / kT, gy = (M + kT - 1) / kT;
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  const dim3 block(kT, kT);
  gemm_skinny_reference<<<grid, block, 0, stream>>>(x, W, y, M, N, K);
  return static_cast<int>(cudaGetLastError());
}
