// conv2d reference (trusted; agents never see it): the convolution written as the matrix product it
// is. Row m of the product is output pixel (n, h, w), column k an output channel, and the sum runs
// over (r, s, c) with the input pixel (h + r - pad, w + s - pad) read as zero outside the image.
// Every product and the whole sum in double (bf16 products are exact; the sum's error is far below a
// bf16 ulp), then one rounding to bf16 (nearest even). 16x16 tiles staged through shared memory
// only for speed.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

constexpr int kT = 16;

__global__ void conv2d_reference(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                                 int64_t batch, int64_t H, int64_t W, int64_t C, int64_t K,
                                 int64_t R) {
  __shared__ double a_tile[kT][kT];  // a_tile[p][j] = input value of pixel m0 + p, reduction index k0 + j
  __shared__ double b_tile[kT][kT];  // b_tile[j][q] = w[n0 + q][k0 + j]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t M = batch * H * W;
  const int64_t red = R * R * C;  // reduction length; w is K x red row-major (KRSC)
  const int64_t pad = R / 2;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kT;  // pixels along grid x (2^31 - 1)
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kT;  // channels along grid y (65535)
  // The pixel this thread loads input values for (row m0 + ty).
  const int64_t lm = m0 + ty;
  const int64_t ln = lm / (H * W), lh = (lm / W) % H, lw = lm % W;
  double acc = 0.0;
  for (int64_t k0 = 0; k0 < red; k0 += kT) {
    const int64_t k = k0 + tx;
    double a = 0.0;
    if (lm < M && k < red) {
      const int64_t r = k / (R * C), s = (k / C) % R, c = k % C;
      const int64_t ih = lh + r - pad, iw = lw + s - pad;
      if (ih >= 0 && ih < H && iw >= 0 && iw < W)
        a = static_cast<double>(__bfloat162float(x[((ln * H + ih) * W + iw) * C + c]));
    }
    a_tile[ty][tx] = a;
    const int64_t bn = n0 + ty;  // this thread loads row n0 + ty of w
    b_tile[tx][ty] = (bn < K && k < red) ? static_cast<double>(__bfloat162float(w[bn * red + k])) : 0.0;
    __syncthreads();
    for (int kk = 0; kk < kT; ++kk) acc += a_tile[ty][kk] * b_tile[kk][tx];
    __syncthreads();
  }
  const int64_t m = m0 + ty, n = n0 + tx;
  if (m < M && n < K) y[m * K + n] = __double2bfloat16(acc);
}

extern "C" int d2k_conv2d(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                          int64_t batch, int64_t H, int64_t W, int64_t C, int64_t K, int64_t R,
                          cudaStream_t stream) {
  if (batch <= 0 || H <= 0 || W <= 0 || C <= 0 || K <= 0) return 0;
  if (R != 1 && R != 3) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t gx = (batch * H * W + kT - 1) / kT;
  const int64_t gy = (K + kT - 1) / kT;
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  const dim3 block(kT, kT);
  conv2d_reference<<<grid, block, 0, stream>>>(x, w, y, batch, H, W, C, K, R);
  return static_cast<int>(cudaGetLastError());
}
