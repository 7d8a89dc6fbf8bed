// gemm_fp8 reference (trusted; agents never see it): C[m][n] = bf16(scale_a * scale_b *
// sum_k A[m][k] * B[n][k]) with A and B decoded from OCP FP8 E4M3 bytes by hand (sign, 4-bit
// exponent with bias 7, 3-bit mantissa; exponent 0 is subnormal, 0x7F and 0xFF are NaN, no
// infinities). Decoded values, products and partial sums are exact in double: values are
// multiples of 2^-9 below 2^9, products multiples of 2^-18 below 2^18, partial sums multiples of
// 2^-18 below K * 2^18, which a 53-bit significand holds exactly for K < 2^17. The scales multiply
// the exact sum in double (relative error 2^-53), then one rounding to
// bf16 (nearest even) follows. One thread computes 4 x 4 outputs of a 64 x 64 tile whose operands
// are staged through shared memory 32 k at a time, for speed only.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

constexpr int kT = 64;   // C tile edge; 16 x 16 threads, each 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j)
constexpr int kTK = 32;  // k per staged slice

__device__ double e4m3_to_double(uint8_t v) {
  const int sign = v >> 7;
  const int exponent = (v >> 3) & 0xF;
  const int mantissa = v & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return __longlong_as_double(0x7ff8000000000000LL);  // NaN
  double magnitude;
  if (exponent == 0) {
    magnitude = ldexp(static_cast<double>(mantissa), -9);  // subnormal: mantissa / 8 * 2^(1 - 7)
  } else {
    magnitude = ldexp(static_cast<double>(8 + mantissa), exponent - 10);  // (1 + m/8) * 2^(e - 7)
  }
  return sign ? -magnitude : magnitude;
}

__global__ void gemm_fp8_reference(const uint8_t* A, const uint8_t* B, const float* scale_a,
                                   const float* scale_b, __nv_bfloat16* C, int64_t M, int64_t N,
                                   int64_t K) {
  __shared__ double a_tile[kT][kTK + 1];  // a_tile[r][k] = A[m0 + r][k0 + k]
  __shared__ double b_tile[kT][kTK + 1];  // b_tile[c][k] = B[n0 + c][k0 + k]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kT;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kT;
  double acc[4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kTK) {
    for (int idx = ty * 16 + tx; idx < kT * kTK; idx += 256) {  // 8 entries of each tile per thread
      const int r = idx / kTK, k = idx % kTK;
      const int64_t m = m0 + r, n = n0 + r, kk = k0 + k;
      a_tile[r][k] = (m < M && kk < K) ? e4m3_to_double(A[m * K + kk]) : 0.0;
      b_tile[r][k] = (n < N && kk < K) ? e4m3_to_double(B[n * K + kk]) : 0.0;
    }
    __syncthreads();
    for (int k = 0; k < kTK; ++k) {
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) acc[i][j] += a_tile[ty + 16 * i][k] * b_tile[tx + 16 * j][k];
      }
    }
    __syncthreads();
  }
  const double scale = static_cast<double>(scale_a[0]) * static_cast<double>(scale_b[0]);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      const int64_t m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m < M && n < N) C[m * N + n] = __double2bfloat16(acc[i][j] * scale);
    }
  }
}

extern "C" int d2k_gemm_fp8(const void* A, const void* B, const float* scale_a,
                            const float* scale_b, __nv_bfloat16* C, int64_t M, int64_t N, int64_t K,
                            cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  const int64_t gx = (N + kT - 1) / kT;
  const int64_t gy = (M + kT - 1) / kT;
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  const dim3 block(16, 16);
  gemm_fp8_reference<<<grid, block, 0, stream>>>(static_cast<const uint8_t*>(A),
                                                 static_cast<const uint8_t*>(B), scale_a, scale_b,
                                                 C, M, N, K);
  return static_cast<int>(cudaGetLastError());
}
