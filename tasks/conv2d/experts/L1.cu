// conv2d expert, layer 1 (implicit GEMM, blocking for reuse): the convolution is the matrix product
// Y (pixels x K) = A (pixels x R*R*C, the im2col matrix) * wt^T, and A is never built: each 256-thread
// block computes a 64-pixel x 64-channel tile of Y. Per k-step (32 values of one filter tap's
// channels) it gathers the 64 pixels' shifted input rows (zero outside the image) and the 64
// filters' slice into shared memory, one 16-byte load per thread per operand, then every thread
// computes a 4x4 register tile with fp32 FMAs: each value fetched now serves 64 outputs.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kTile = 64;        // Y tile is kTile pixels x kTile output channels
constexpr int kBK = 32;          // reduction values per shared-memory step (C % 64 == 0: one tap)
constexpr int kPitch = kBK + 8;  // bf16 per shared row: 80 bytes, so 8 consecutive rows read as
                                 // 16-byte vectors hit 8 different bank groups
constexpr int kThreads = 256;

// Two bf16 packed in a 32-bit word -> two floats (bf16 is the top half of an fp32).
__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__global__ void __launch_bounds__(kThreads)
conv2d_implicit_gemm(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ wt,
                     __nv_bfloat16* __restrict__ y, int64_t batch, int64_t H, int64_t W, int64_t C,
                     int64_t K, int R) {
  __shared__ __align__(16) __nv_bfloat16 a_tile[kTile][kPitch];
  __shared__ __align__(16) __nv_bfloat16 b_tile[kTile][kPitch];
  const int tx = threadIdx.x % 16;  // this thread's output channels: tx + 16 j
  const int ty = threadIdx.x / 16;  // this thread's pixels:          ty + 16 i
  const int64_t M = batch * H * W;
  const int64_t red = static_cast<int64_t>(R) * R * C;
  const int pad = R / 2;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTile;

  // Loader role: thread t copies 8 values (16 bytes) of row t / 4 of each tile, columns 8 * (t % 4).
  // Its pixel's coordinates are fixed for the whole loop.
  const int lr = threadIdx.x / 4;
  const int lc = (threadIdx.x % 4) * 8;
  const int64_t lm = m0 + lr;
  const bool lm_ok = lm < M;
  const int64_t ln = lm / (H * W);
  const int lh = static_cast<int>((lm / W) % H), lw = static_cast<int>(lm % W);
  const bool ln_ok = n0 + lr < K;
  const __nv_bfloat16* wrow = wt + (n0 + lr) * red + lc;

  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  for (int64_t k0 = 0; k0 < red; k0 += kBK) {
    // The k-step's filter tap (r, s) and first channel: all 32 values share the tap.
    const int tap = static_cast<int>(k0 / C);
    const int64_t c0 = k0 - static_cast<int64_t>(tap) * C;
    const int ih = lh + tap / R - pad, iw = lw + tap % R - pad;
    uint4 va = make_uint4(0, 0, 0, 0);
    if (lm_ok && ih >= 0 && ih < H && iw >= 0 && iw < W)
      va = *reinterpret_cast<const uint4*>(x + ((ln * H + ih) * W + iw) * C + c0 + lc);
    *reinterpret_cast<uint4*>(&a_tile[lr][lc]) = va;
    uint4 vb = make_uint4(0, 0, 0, 0);
    if (ln_ok) vb = *reinterpret_cast<const uint4*>(wrow + k0);
    *reinterpret_cast<uint4*>(&b_tile[lr][lc]) = vb;
    __syncthreads();
#pragma unroll
    for (int kc = 0; kc < kBK; kc += 8) {
      // 8 reduction values of each of this thread's 4 pixels and 4 filters, as 16-byte loads.
      uint4 a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const uint4*>(&a_tile[ty + 16 * i][kc]);
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = *reinterpret_cast<const uint4*>(&b_tile[tx + 16 * j][kc]);
#pragma unroll
      for (int q = 0; q < 4; ++q) {  // the 4 words (8 values) of each vector
        float af[2][4], bf[2][4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint32_t wa = q == 0 ? a[i].x : q == 1 ? a[i].y : q == 2 ? a[i].z : a[i].w;
          const uint32_t wb = q == 0 ? b[i].x : q == 1 ? b[i].y : q == 2 ? b[i].z : b[i].w;
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
    if (n >= K) continue;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t m = m0 + ty + 16 * i;
      if (m < M) y[m * K + n] = __float2bfloat16_rn(acc[i][j]);
    }
  }
}

}  // namespace

extern "C" int d2k_conv2d(const __nv_bfloat16* x, const __nv_bfloat16* wt, __nv_bfloat16* y,
                          int64_t batch, int64_t H, int64_t W, int64_t C, int64_t K, int64_t R,
                          cudaStream_t stream) {
  if (batch <= 0 || H <= 0 || W <= 0 || C <= 0 || K <= 0) return 0;
  if ((R != 1 && R != 3) || C % kBK != 0 || K % 8 != 0 || H > 0x7fffffff || W > 0x7fffffff) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int64_t gx = (batch * H * W + kTile - 1) / kTile;
  const int64_t gy = (K + kTile - 1) / kTile;
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  conv2d_implicit_gemm<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), kThreads, 0,
                         stream>>>(x, wt, y, batch, H, W, C, K, static_cast<int>(R));
  return static_cast<int>(cudaGetLastError());
}
