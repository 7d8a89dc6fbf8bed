// grouped_gemm reference (trusted; agents never see it): Y_g = X_g * W_g^T per expert g, one thread
// per Y element, every product and the whole sum in double (bf16 products are exact; the sum's
// error is far below a bf16 ulp), one rounding to bf16 (nearest even). 16x16 tiles of one group
// staged through shared memory only for speed: block row b is the b-th 16-row tile in the
// concatenation of every group's tiles (a group of m rows has ceil(m/16) of them).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

constexpr int kT = 16;

__global__ void grouped_gemm_reference(const __nv_bfloat16* X, const __nv_bfloat16* W,
                                       const int* offsets, __nv_bfloat16* Y, int64_t G, int64_t N,
                                       int64_t K) {
  __shared__ double a_tile[kT][kT];  // a_tile[r][k] = X[m0 + r][k0 + k]
  __shared__ double b_tile[kT][kT];  // b_tile[k][c] = W[g][n0 + c][k0 + k]
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
  const int64_t g = s_group, m0 = s_m0, m_end = s_end;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kT;
  const int64_t m = m0 + ty;
  const int64_t n = n0 + tx;
  const __nv_bfloat16* Wg = W + g * N * K;
  double acc = 0.0;
  for (int64_t k0 = 0; k0 < K; k0 += kT) {
    const int64_t k = k0 + tx;
    a_tile[ty][tx] = (m < m_end && k < K) ? static_cast<double>(__bfloat162float(X[m * K + k])) : 0.0;
    const int64_t bn = n0 + ty;  // this thread loads row n0 + ty of W_g
    b_tile[tx][ty] = (bn < N && k < K) ? static_cast<double>(__bfloat162float(Wg[bn * K + k])) : 0.0;
    __syncthreads();
    for (int kk = 0; kk < kT; ++kk) acc += a_tile[ty][kk] * b_tile[kk][tx];
    __syncthreads();
  }
  if (m < m_end && n < N) Y[m * N + n] = __double2bfloat16(acc);
}

extern "C" int d2k_grouped_gemm(const __nv_bfloat16* X, const __nv_bfloat16* W, const int* offsets,
                                __nv_bfloat16* Y, int64_t T, int64_t G, int64_t N, int64_t K,
                                cudaStream_t stream) {
  if (T <= 0 || G <= 0 || N <= 0 || K <= 0) return 0;
  const int64_t gx = (N + kT - 1) / kT;
  const int64_t gy = (T + kT - 1) / kT + G;  // at least the number of 16-row tiles of all groups
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  grouped_gemm_reference<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), dim3(kT, kT), 0,
                           stream>>>(X, W, offsets, Y, G, N, K);
  return static_cast<int>(cudaGetLastError());
}
