// w4a16_gemm baseline: what a first attempt looks like. One thread per output y[m][n] (threads of a
// warp take consecutive n), each walking its packed W row one byte (two codes) at a time: unpack the
// two nibbles, convert them to float, multiply by the group's scale, round to bf16 (the task's
// dequantized weight) and accumulate x * w in fp32. Correct, but the 32 lanes of a warp read 32
// different W rows (K / 2 bytes apart) one byte at a time, and W is read again for each of the M
// rows of x (from L2 at best).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void w4a16_gemm_baseline(const __nv_bfloat16* x, const uint8_t* Wq, const __nv_bfloat16* scales,
                                    __nv_bfloat16* y, int64_t M, int64_t N, int64_t K) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t m = blockIdx.y;
  if (n >= N || m >= M) return;
  const uint8_t* wr = Wq + n * (K / 2);
  const __nv_bfloat16* sr = scales + n * (K / 128);
  const __nv_bfloat16* xr = x + m * K;
  float acc = 0.0f;
  for (int64_t k = 0; k < K; k += 2) {
    const float s = __bfloat162float(sr[k / 128]);
    const unsigned byte = wr[k / 2];
    const float w0 = __bfloat162float(__float2bfloat16_rn(static_cast<float>(static_cast<int>(byte & 15u) - 8) * s));
    const float w1 = __bfloat162float(__float2bfloat16_rn(static_cast<float>(static_cast<int>(byte >> 4) - 8) * s));
    acc += __bfloat162float(xr[k]) * w0;
    acc += __bfloat162float(xr[k + 1]) * w1;
  }
  y[m * N + n] = __float2bfloat16(acc);
}

extern "C" int d2k_w4a16_gemm(const __nv_bfloat16* x, const uint8_t* Wq, const __nv_bfloat16* scales,
                              __nv_bfloat16* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0 || K % 128 != 0 || M > 65535) return static_cast<int>(cudaErrorInvalidValue);
  const int threads = 128;
  const int64_t gx = (N + threads - 1) / threads;
  if (gx > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(M));
  w4a16_gemm_baseline<<<grid, threads, 0, stream>>>(x, Wq, scales, y, M, N, K);
  return static_cast<int>(cudaGetLastError());
}
