// w4a16_gemm L1 expert: stream the packed W once, dequantize in registers, split K so that every SM
// is busy.
// - One warp per W row n: the 32 lanes read the row together, one 32-bit word (8 codes) each per
//   step, so every warp access is one contiguous 128-byte piece; each lane unpacks its 8 nibbles,
//   dequantizes them with the group's scale (bf16((q - 8) * s), the task's weight) and keeps M fp32
//   accumulators, one per token, so the row is read once for all M rows of x (x is small and stays
//   in L1/L2); a butterfly shuffle sums the lanes at the end.
// - Split-K: when the rows alone give too few warps to keep DRAM busy (N = 1031 is 8 warps per SM),
//   K is cut into S slices; each (row, slice) warp writes an fp32 partial and a second kernel sums
//   the S partials of each output and rounds once to bf16.
// - M > 64 (prefill): the tokens are taken 64 at a time (grid z), each chunk re-reading W (from L2).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kWarps = 8;   // warps (rows) per block
constexpr int kUnroll = 4;  // W words in flight per lane
constexpr int kTokens = 64;  // tokens per grid-z chunk

template <int MT>
__global__ void __launch_bounds__(256) w4a16_l1(const __nv_bfloat16* __restrict__ x, const uint8_t* __restrict__ Wq,
                                                const __nv_bfloat16* __restrict__ scales,
                                                __nv_bfloat16* __restrict__ y, float* __restrict__ part, int M,
                                                int64_t N, int64_t K, int64_t slice) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (n >= N) return;
  const int m0 = static_cast<int>(blockIdx.z) * kTokens;
  const int rows = M - m0 < MT ? M - m0 : MT;
  const int64_t kbeg = static_cast<int64_t>(blockIdx.y) * slice;
  const int64_t kend = kbeg + slice < K ? kbeg + slice : K;
  const int64_t cend = kend / 8;  // word c holds codes k = 8c .. 8c + 7
  const uint32_t* wr = reinterpret_cast<const uint32_t*>(Wq + n * (K / 2));
  const __nv_bfloat16* sr = scales + n * (K / 128);
  float acc[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
  for (int64_t c = kbeg / 8 + lane; c < cend; c += 32 * kUnroll) {
    uint32_t w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) w[u] = c + 32 * u < cend ? wr[c + 32 * u] : 0u;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t cc = c + 32 * u;
      if (cc < cend) {
        const float s = __bfloat162float(sr[cc / 16]);  // 16 words per group of 128
        float wf[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int q = static_cast<int>((w[u] >> (4 * i)) & 15u);
          wf[i] = __bfloat162float(__float2bfloat16_rn(static_cast<float>(q - 8) * s));
        }
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if (m < rows) {
            const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(x + (m0 + m) * K + 8 * cc);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const __nv_bfloat162 xv = xp[i];
              acc[m] += __bfloat162float(xv.x) * wf[2 * i] + __bfloat162float(xv.y) * wf[2 * i + 1];
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    float v = acc[m];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && m < rows) {
      const int64_t row = m0 + m;
      if (gridDim.y == 1) y[row * N + n] = __float2bfloat16(v);
      else part[(static_cast<int64_t>(blockIdx.y) * M + row) * N + n] = v;
    }
  }
}

// y[i] = bf16(sum over the S slices of part[s][i]).
__global__ void w4a16_l1_reduce(const float* __restrict__ part, __nv_bfloat16* __restrict__ y, int64_t count,
                                int slices) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  float s = 0.0f;
  for (int p = 0; p < slices; ++p) s += part[p * count + i];
  y[i] = __float2bfloat16(s);
}

struct Scratch {
  float* ptr = nullptr;
  size_t bytes = 0;
};

cudaError_t ensure_scratch(Scratch& s, size_t bytes) {
  if (s.bytes >= bytes) return cudaSuccess;
  if (s.ptr != nullptr) cudaFree(s.ptr);
  s.ptr = nullptr;
  s.bytes = 0;
  const cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&s.ptr), bytes);
  if (err == cudaSuccess) s.bytes = bytes;
  return err;
}

template <int MT>
void launch(dim3 grid, cudaStream_t stream, const __nv_bfloat16* x, const uint8_t* Wq, const __nv_bfloat16* scales,
            __nv_bfloat16* y, float* part, int M, int64_t N, int64_t K, int64_t slice) {
  w4a16_l1<MT><<<grid, kWarps * 32, 0, stream>>>(x, Wq, scales, y, part, M, N, K, slice);
}

}  // namespace

extern "C" int d2k_w4a16_gemm(const __nv_bfloat16* x, const uint8_t* Wq, const __nv_bfloat16* scales,
                              __nv_bfloat16* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  if (M <= 0 || M > 4096 || N <= 0 || K <= 0 || K % 128 != 0) return static_cast<int>(cudaErrorInvalidValue);
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int64_t chunks = (M + kTokens - 1) / kTokens;
  // Enough (row, slice, token chunk) warps for 32 per SM, each slice a multiple of 256 k (one word
  // per lane) and at least 256 long.
  const int64_t want_warps = static_cast<int64_t>(sms) * 32;
  int64_t slices = (want_warps + N * chunks - 1) / (N * chunks);
  const int64_t max_slices = K / 256 > 1 ? K / 256 : 1;
  if (slices > max_slices) slices = max_slices;
  if (slices > 64) slices = 64;
  const int64_t slice = ((K + slices - 1) / slices + 255) / 256 * 256;
  slices = (K + slice - 1) / slice;
  const int64_t gx = (N + kWarps - 1) / kWarps;
  if (gx > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  static Scratch scratch;
  float* part = nullptr;
  if (slices > 1) {
    err = ensure_scratch(scratch, static_cast<size_t>(slices * M * N) * sizeof(float));
    if (err != cudaSuccess) return static_cast<int>(err);
    part = scratch.ptr;
  }
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(slices), static_cast<unsigned>(chunks));
  const int m = static_cast<int>(M);
  if (m == 1) launch<1>(grid, stream, x, Wq, scales, y, part, m, N, K, slice);
  else if (m <= 4) launch<4>(grid, stream, x, Wq, scales, y, part, m, N, K, slice);
  else if (m <= 8) launch<8>(grid, stream, x, Wq, scales, y, part, m, N, K, slice);
  else if (m <= 16) launch<16>(grid, stream, x, Wq, scales, y, part, m, N, K, slice);
  else if (m <= 32) launch<32>(grid, stream, x, Wq, scales, y, part, m, N, K, slice);
  else launch<64>(grid, stream, x, Wq, scales, y, part, m, N, K, slice);
  if (slices > 1) {
    const int64_t count = M * N;
    w4a16_l1_reduce<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(part, y, count,
                                                                                    static_cast<int>(slices));
  }
  return static_cast<int>(cudaGetLastError());
}
