// w4a16_gemm reference (trusted; agents never see it): one thread per y element. Each weight is
// dequantized as the definition says, bf16((q - 8) * scale) (the fp32 product is exact, then one
// rounding to nearest even); every product x * w and the whole sum in double (bf16 products are
// exact; the sum's error is far below a bf16 ulp), then one rounding to bf16. A block computes a
// 16 (n) x 16 (m) tile of y, staging 16 x 16 pieces of w and x through shared memory only for speed.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

constexpr int kT = 16;

// w[n][k] = bf16((q[n][k] - 8) * scales[n][k / 128]); q[n][k] is the low nibble of byte k / 2 of
// row n for even k, the high nibble for odd k.
__device__ double w4a16_weight(const uint8_t* Wq, const __nv_bfloat16* scales, int64_t n, int64_t k, int64_t K) {
  const unsigned byte = Wq[n * (K / 2) + k / 2];
  const int q = (k & 1) != 0 ? static_cast<int>(byte >> 4) : static_cast<int>(byte & 15u);
  const float product = static_cast<float>(q - 8) * __bfloat162float(scales[n * (K / 128) + k / 128]);
  return static_cast<double>(__bfloat162float(__float2bfloat16_rn(product)));
}

__global__ void w4a16_gemm_reference(const __nv_bfloat16* x, const uint8_t* Wq, const __nv_bfloat16* scales,
                                     __nv_bfloat16* y, int64_t M, int64_t N, int64_t K) {
  __shared__ double w_tile[kT][kT + 1];  // w_tile[c][k] = w[n0 + c][k0 + k]
  __shared__ double x_tile[kT][kT + 1];  // x_tile[r][k] = x[m0 + r][k0 + k]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kT;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kT;
  const int64_t n = n0 + tx, m = m0 + ty;
  double acc = 0.0;
  for (int64_t k0 = 0; k0 < K; k0 += kT) {
    const int64_t k = k0 + tx;  // K is a multiple of 128, so k < K
    w_tile[ty][tx] = n0 + ty < N ? w4a16_weight(Wq, scales, n0 + ty, k, K) : 0.0;
    x_tile[ty][tx] = m < M ? static_cast<double>(__bfloat162float(x[m * K + k])) : 0.0;
    __syncthreads();
    for (int kk = 0; kk < kT; ++kk) acc += x_tile[ty][kk] * w_tile[tx][kk];
    __syncthreads();
  }
  if (m < M && n < N) y[m * N + n] = __double2bfloat16(acc);
}

extern "C" int d2k_w4a16_gemm(const __nv_bfloat16* x, const uint8_t* Wq, const __nv_bfloat16* scales,
                              __nv_bfloat16* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0 || K % 128 != 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t gx = (N + kT - 1) / kT, gy = (M + kT - 1) / kT;
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  const dim3 block(kT, kT);
  w4a16_gemm_reference<<<grid, block, 0, stream>>>(x, Wq, scales, y, M, N, K);
  return static_cast<int>(cudaGetLastError());
}
