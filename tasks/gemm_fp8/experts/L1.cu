// gemm_fp8 expert, layer 1 (algorithm): classic tiled GEMM on the CUDA cores. A 128 x 128 C tile per
// 256-thread block, each thread an 8 x 8 register tile; per k-step of 32 the block loads a 128 x 32
// slice of A and of B with one 16-byte load per thread each, converts the e4m3 bytes to fp32 once
// and stores them k-major in shared memory, where each value is then reused by 8 (A) or 8 (B)
// FMAs of every thread that needs it: 64 FMAs per 4 float4 shared loads instead of 2 global loads
// and 2 conversions per FMA.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 32;
constexpr int kThreads = 256;

// Two e4m3 values (the low 16 bits, lowest byte first) as floats.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t w) {
  return __half22float2(
      __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffff), __NV_E4M3)));
}

__global__ void __launch_bounds__(kThreads)
gemm_fp8_tiled(const uint8_t* __restrict__ A, const uint8_t* __restrict__ B,
               const float* __restrict__ scale_a, const float* __restrict__ scale_b,
               __nv_bfloat16* __restrict__ C, int64_t M, int64_t N, int64_t K) {
  __shared__ __align__(16) float As[kBK][kBM];  // As[k][m]: k-major, so a thread reads 4 m at once
  __shared__ __align__(16) float Bs[kBK][kBN];  // Bs[k][n]
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;  // thread's outputs: rows ty*4 + {0..3, 64..67}, same for n
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  // Loader mapping: thread tid loads row tid / 2, bytes (tid % 2) * 16 .. + 15 of the k-slice.
  const int lr = tid / 2;
  const int lc = (tid % 2) * 16;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    // K % 16 == 0: a 16-byte chunk is all inside or all outside [0, K).
    const bool kin = k0 + lc < K;
    uint4 a = make_uint4(0, 0, 0, 0), b = make_uint4(0, 0, 0, 0);
    if (kin && m0 + lr < M) a = *reinterpret_cast<const uint4*>(A + (m0 + lr) * K + k0 + lc);
    if (kin && n0 + lr < N) b = *reinterpret_cast<const uint4*>(B + (n0 + lr) * K + k0 + lc);
    const uint32_t aw[4] = {a.x, a.y, a.z, a.w};
    const uint32_t bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 a01 = e4m3x2_to_float2(aw[q]), a23 = e4m3x2_to_float2(aw[q] >> 16);
      const float2 b01 = e4m3x2_to_float2(bw[q]), b23 = e4m3x2_to_float2(bw[q] >> 16);
      const int k = lc + 4 * q;
      As[k][lr] = a01.x; As[k + 1][lr] = a01.y; As[k + 2][lr] = a23.x; As[k + 3][lr] = a23.y;
      Bs[k][lr] = b01.x; Bs[k + 1][lr] = b01.y; Bs[k + 2][lr] = b23.x; Bs[k + 3][lr] = b23.y;
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kBK; ++k) {
      const float4 a_lo = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
      const float4 a_hi = *reinterpret_cast<const float4*>(&As[k][64 + ty * 4]);
      const float4 b_lo = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
      const float4 b_hi = *reinterpret_cast<const float4*>(&Bs[k][64 + tx * 4]);
      const float av[8] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
      const float bv[8] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }

  const float scale = scale_a[0] * scale_b[0];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
      if (n < N) C[m * N + n] = __float2bfloat16_rn(acc[i][j] * scale);
    }
  }
}

}  // namespace

extern "C" int d2k_gemm_fp8(const void* A, const void* B, const float* scale_a,
                            const float* scale_b, __nv_bfloat16* C, int64_t M, int64_t N, int64_t K,
                            cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  if (K % 16 != 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t gx = (N + kBN - 1) / kBN;
  const int64_t gy = (M + kBM - 1) / kBM;
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  gemm_fp8_tiled<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(A), static_cast<const uint8_t*>(B), scale_a, scale_b, C, M, N, K);
  return static_cast<int>(cudaGetLastError());
}
