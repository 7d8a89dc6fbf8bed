// gemm_fp8 baseline: the kernel a beginner writes first. One thread per element of C computes the
// whole dot product of a row of A and a row of B straight from global memory: four e4m3 bytes per
// 32-bit load, converted to fp32 (cuda_fp8.h) and summed with fp32 FMAs, then scaled and rounded
// to bf16. Correct, but every operand is fetched again for each output that uses it and converted
// again each time: the kernel is bound by load and convert instructions (about 1 TFLOP/s), not by
// arithmetic, and never touches the tensor cores.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

// Four e4m3 values packed in a 32-bit word (lowest byte first) as floats.
__device__ __forceinline__ float4 e4m3x4_to_float4(uint32_t w) {
  const __half2 lo = __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffff), __NV_E4M3));
  const __half2 hi = __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3));
  const float2 a = __half22float2(lo), b = __half22float2(hi);
  return make_float4(a.x, a.y, b.x, b.y);
}

__global__ void gemm_fp8_naive(const uint8_t* A, const uint8_t* B, const float* scale_a,
                               const float* scale_b, __nv_bfloat16* C, int64_t M, int64_t N,
                               int64_t K) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t m = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  if (m >= M || n >= N) return;
  const uint32_t* a = reinterpret_cast<const uint32_t*>(A + m * K);  // K % 16 == 0: aligned
  const uint32_t* b = reinterpret_cast<const uint32_t*>(B + n * K);
  float acc = 0.0f;
  for (int64_t k = 0; k < K / 4; ++k) {
    const float4 x = e4m3x4_to_float4(a[k]);
    const float4 y = e4m3x4_to_float4(b[k]);
    acc += x.x * y.x;
    acc += x.y * y.y;
    acc += x.z * y.z;
    acc += x.w * y.w;
  }
  C[m * N + n] = __float2bfloat16_rn(acc * (scale_a[0] * scale_b[0]));
}

extern "C" int d2k_gemm_fp8(const void* A, const void* B, const float* scale_a,
                            const float* scale_b, __nv_bfloat16* C, int64_t M, int64_t N, int64_t K,
                            cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  if (K % 16 != 0) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 block(16, 16);
  const int64_t gx = (N + 15) / 16;
  const int64_t gy = (M + 15) / 16;
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  gemm_fp8_naive<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), block, 0, stream>>>(
      static_cast<const uint8_t*>(A), static_cast<const uint8_t*>(B), scale_a, scale_b, C, M, N, K);
  return static_cast<int>(cudaGetLastError());
}
