// conv2d baseline: the direct convolution a beginner writes first. One thread per output element
// (n, h, w, k) loops over the R x R window and all C input channels straight from global memory, in
// fp32. Correct, but every input value is fetched again by each of the K channels and R*R pixels
// that use it: two loads per multiply-add, bound by load instructions and cache bandwidth.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void conv2d_direct(const __nv_bfloat16* x, const __nv_bfloat16* wt, __nv_bfloat16* y,
                              int64_t batch, int64_t H, int64_t W, int64_t C, int64_t K, int64_t R) {
  // Threads of a warp take consecutive output channels of one pixel: the input reads are the same
  // address for the whole warp (a broadcast), the output writes are contiguous.
  const int64_t k = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  const int64_t m = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;  // pixel
  if (k >= K || m >= batch * H * W) return;
  const int64_t n = m / (H * W), h = (m / W) % H, w = m % W;
  const int64_t pad = R / 2;
  float acc = 0.0f;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t ih = h + r - pad;
    if (ih < 0 || ih >= H) continue;
    for (int64_t s = 0; s < R; ++s) {
      const int64_t iw = w + s - pad;
      if (iw < 0 || iw >= W) continue;
      const __nv_bfloat16* xp = x + ((n * H + ih) * W + iw) * C;
      const __nv_bfloat16* wp = wt + ((k * R + r) * R + s) * C;
      for (int64_t c = 0; c < C; ++c) acc += __bfloat162float(xp[c]) * __bfloat162float(wp[c]);
    }
  }
  y[m * K + k] = __float2bfloat16_rn(acc);
}

extern "C" int d2k_conv2d(const __nv_bfloat16* x, const __nv_bfloat16* wt, __nv_bfloat16* y,
                          int64_t batch, int64_t H, int64_t W, int64_t C, int64_t K, int64_t R,
                          cudaStream_t stream) {
  if (batch <= 0 || H <= 0 || W <= 0 || C <= 0 || K <= 0) return 0;
  if (R != 1 && R != 3) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 block(32, 8);
  const int64_t gx = (batch * H * W + 7) / 8;  // pixels along grid x (2^31 - 1 blocks)
  const int64_t gy = (K + 31) / 32;            // channels along grid y (65535)
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  conv2d_direct<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), block, 0, stream>>>(
      x, wt, y, batch, H, W, C, K, R);
  return static_cast<int>(cudaGetLastError());
}
