// gemm_bf16 expert, layer 1 (blocking for reuse): each 256-thread block computes a 64x64 tile of C.
// Per k-step it copies a 64x32 tile of A and a 64x32 tile of B into shared memory once (one 16-byte
// load per thread per operand), then every thread computes a 4x4 register tile of C from them with
// fp32 FMAs: each operand value fetched from global memory now serves 64 outputs instead of one.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kTile = 64;      // C tile is kTile x kTile
constexpr int kBK = 32;        // k per shared-memory step
constexpr int kPitch = kBK + 8;  // bf16 per shared row: 80 bytes, so 8 consecutive rows read as
                                 // 16-byte vectors hit 8 different bank groups
constexpr int kThreads = 256;

// Two bf16 packed in a 32-bit word -> two floats (bf16 is the top half of an fp32).
__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Copies rows [r0, r0 + 64) x k-columns [k0, k0 + 32) of a rows x K matrix into tile (row pitch
// kPitch), zero outside the matrix. Thread t copies row t / 4, bf16 columns 8 * (t % 4) .. + 7:
// K % 8 == 0, so such an 8-element chunk is either entirely inside the matrix or entirely outside.
__device__ __forceinline__ void load_tile(__nv_bfloat16 (*tile)[kPitch], const __nv_bfloat16* X,
                                          int64_t rows, int64_t K, int64_t r0, int64_t k0) {
  const int t = threadIdx.x;
  const int r = t / 4;
  const int c = (t % 4) * 8;
  uint4 v = make_uint4(0, 0, 0, 0);
  if (r0 + r < rows && k0 + c < K) v = *reinterpret_cast<const uint4*>(X + (r0 + r) * K + k0 + c);
  *reinterpret_cast<uint4*>(&tile[r][c]) = v;
}

__global__ void __launch_bounds__(kThreads)
gemm_bf16_tiled(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                const __nv_bfloat16* __restrict__ bias, __nv_bfloat16* __restrict__ C, int64_t M,
                int64_t N, int64_t K, int use_bias) {
  __shared__ __align__(16) __nv_bfloat16 a_tile[kTile][kPitch];
  __shared__ __align__(16) __nv_bfloat16 b_tile[kTile][kPitch];
  const int tx = threadIdx.x % 16;  // this thread's C columns: tx + 16 j
  const int ty = threadIdx.x / 16;  // this thread's C rows:    ty + 16 i
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTile;

  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    load_tile(a_tile, A, M, K, m0, k0);
    load_tile(b_tile, B, N, K, n0, k0);
    __syncthreads();
#pragma unroll
    for (int kc = 0; kc < kBK; kc += 8) {
      // 8 k values of each of this thread's 4 A rows and 4 B rows, as 16-byte shared loads.
      uint4 a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const uint4*>(&a_tile[ty + 16 * i][kc]);
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = *reinterpret_cast<const uint4*>(&b_tile[tx + 16 * j][kc]);
#pragma unroll
      for (int w = 0; w < 4; ++w) {  // the 4 words (8 k values) of each vector
        float af[2][4], bf[2][4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint32_t wa = w == 0 ? a[i].x : w == 1 ? a[i].y : w == 2 ? a[i].z : a[i].w;
          const uint32_t wb = w == 0 ? b[i].x : w == 1 ? b[i].y : w == 2 ? b[i].z : b[i].w;
          af[0][i] = lo_bf16(wa);
          af[1][i] = hi_bf16(wa);
          bf[0][i] = lo_bf16(wb);
          bf[1][i] = hi_bf16(wb);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(af[h][i], bf[h][j], acc[i][j]);
      }
    }
    __syncthreads();  // the tiles are overwritten by the next step
  }

#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t n = n0 + tx + 16 * j;
    if (n >= N) continue;
    const float b = use_bias ? __bfloat162float(bias[n]) : 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t m = m0 + ty + 16 * i;
      if (m < M) C[m * N + n] = __float2bfloat16_rn(acc[i][j] + b);
    }
  }
}

}  // namespace

extern "C" int d2k_gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B,
                             const __nv_bfloat16* bias, __nv_bfloat16* C, int64_t M, int64_t N,
                             int64_t K, int use_bias, cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  if (K % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t gx = (N + kTile - 1) / kTile;
  const int64_t gy = (M + kTile - 1) / kTile;
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  gemm_bf16_tiled<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), kThreads, 0,
                    stream>>>(A, B, bias, C, M, N, K, use_bias);
  return static_cast<int>(cudaGetLastError());
}
