// grouped_gemm reference (trusted; agents never see it): Y_g = X_g * W_g^T per expert g, every
// product and the whole sum in double (bf16 products are exact; the sum's error is far below a
// bf16 ulp), one rounding to bf16 (nearest even). Block row b is the b-th 64-row tile in the
// concatenation of every group's tiles (a group of m rows has ceil(m/64) of them; thread 0 finds the
// group by walking the offsets); one thread computes 4 x 4 outputs of a 64 x 64 tile whose operands
// are staged through shared memory 32 k at a time, for speed only (the runner replays this on every
// timed call's inputs).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

constexpr int kT = 64;   // Y tile edge; 16 x 16 threads, each 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j)
constexpr int kTK = 32;  // k per staged slice

__global__ void grouped_gemm_reference(const __nv_bfloat16* X, const __nv_bfloat16* W,
                                       const int* offsets, __nv_bfloat16* Y, int64_t G, int64_t N,
                                       int64_t K) {
  __shared__ double a_tile[kT][kTK + 1];  // a_tile[r][k] = X[m0 + r][k0 + k]
  __shared__ double b_tile[kT][kTK + 1];  // b_tile[c][k] = W[g][n0 + c][k0 + k]
  __shared__ int64_t s_group, s_m0, s_end;
  const int tx = threadIdx.x, ty = threadIdx.y;
  if (tx == 0 && ty == 0) {
    int64_t before = 0;  // tiles of the groups before g
    s_group = -1;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t begin = offsets[g], end = offsets[g + 1];
      const int64_t tiles = (end - begin + kT - 1) / kT;
      if (blockIdx.y < before + tiles) {
        s_group = g;
        s_m0 = begin + (blockIdx.y - before) * kT;
        s_end = end;
        break;
      }
      before += tiles;
    }
  }
  __syncthreads();
  if (s_group < 0) return;  // past the last group's last tile
  const int64_t m0 = s_m0, m_end = s_end;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kT;
  const __nv_bfloat16* Wg = W + s_group * N * K;
  double acc[4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kTK) {
    for (int idx = ty * 16 + tx; idx < kT * kTK; idx += 256) {  // 8 entries of each tile per thread
      const int r = idx / kTK, k = idx % kTK;
      const int64_t m = m0 + r, n = n0 + r, kk = k0 + k;
      a_tile[r][k] = (m < m_end && kk < K) ? static_cast<double>(__bfloat162float(X[m * K + kk])) : 0.0;
      b_tile[r][k] = (n < N && kk < K) ? static_cast<double>(__bfloat162float(Wg[n * K + kk])) : 0.0;
    }
    __syncthreads();
    for (int k = 0; k < kTK; ++k) {
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) acc[i][j] += a_tile[ty + 16 * i][k] * b_tile[tx + 16 * j][k];
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      const int64_t m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m < m_end && n < N) Y[m * N + n] = __double2bfloat16(acc[i][j]);
    }
  }
}

extern "C" int d2k_grouped_gemm(const __nv_bfloat16* X, const __nv_bfloat16* W, const int* offsets,
                                __nv_bfloat16* Y, int64_t T, int64_t G, int64_t N, int64_t K,
                                cudaStream_t stream) {
  if (T <= 0 || G <= 0 || N <= 0 || K <= 0) return 0;
  const int64_t gx = (N + kT - 1) / kT;
  const int64_t gy = (T + kT - 1) / kT + G;  // at least the number of 64-row tiles of all groups
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  const dim3 block(16, 16);
  grouped_gemm_reference<<<grid, block, 0, stream>>>(X, W, offsets, Y, G, N, K);
  return static_cast<int>(cudaGetLastError());
}
