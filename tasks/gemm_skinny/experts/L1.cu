// gemm_skinny L1 expert: stream W once, split K so that every SM is busy.
// - One warp per W row n: the 32 lanes read the row together (consecutive bf16 pairs, coalesced
//   128-byte accesses) and each lane keeps M fp32 accumulators, so the row is read once for all M
//   rows of x (x is small and stays in L1/L2); a butterfly shuffle sums the lanes at the end.
// - Split-K: when N rows alone give too few warps to keep DRAM busy (N = 1031 is 8 warps per SM),
//   K is cut into S slices; each (row, slice) warp writes an fp32 partial and a second kernel sums
//   the S partials of each output and rounds once to bf16.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kWarps = 8;  // warps (rows) per block
constexpr int kUnroll = 4;  // W loads in flight per lane

template <int MT>
__global__ void __launch_bounds__(256) gemm_skinny_l1(const __nv_bfloat16* __restrict__ x,
                                                      const __nv_bfloat16* __restrict__ W,
                                                      __nv_bfloat16* __restrict__ y, float* __restrict__ part, int M,
                                                      int64_t N, int64_t K, int64_t slice) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (n >= N) return;
  const int64_t kbeg = static_cast<int64_t>(blockIdx.y) * slice;
  const int64_t kend = kbeg + slice < K ? kbeg + slice : K;
  const __nv_bfloat162* wr = reinterpret_cast<const __nv_bfloat162*>(W + n * K);
  float acc[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
  for (int64_t k = kbeg + 2 * lane; k < kend; k += 64 * kUnroll) {
    __nv_bfloat162 w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k + 64 * u;
      w[u] = kk < kend ? wr[kk / 2] : __floats2bfloat162_rn(0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k + 64 * u;
      if (kk < kend) {
        const float w0 = __bfloat162float(w[u].x), w1 = __bfloat162float(w[u].y);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if (m < M) {
            const __nv_bfloat162 xv = reinterpret_cast<const __nv_bfloat162*>(x + m * K)[kk / 2];
            acc[m] += __bfloat162float(xv.x) * w0 + __bfloat162float(xv.y) * w1;
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
    if (lane == 0 && m < M) {
      if (gridDim.y == 1) y[m * N + n] = __float2bfloat16(v);
      else part[(static_cast<int64_t>(blockIdx.y) * M + m) * N + n] = v;
    }
  }
}

// y[m][n] = bf16(sum over the S slices of part[s][m][n]).
__global__ void gemm_skinny_l1_reduce(const float* __restrict__ part, __nv_bfloat16* __restrict__ y, int64_t count,
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
void launch(dim3 grid, cudaStream_t stream, const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y,
            float* part, int M, int64_t N, int64_t K, int64_t slice) {
  gemm_skinny_l1<MT><<<grid, kWarps * 32, 0, stream>>>(x, W, y, part, M, N, K, slice);
}

}  // namespace

extern "C" int d2k_gemm_skinny(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int64_t M,
                               int64_t N, int64_t K, cudaStream_t stream) {
  if (M <= 0 || M > 64 || N <= 0 || K <= 0 || K % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return static_cast<int>(err);
  // Enough (row, slice) warps for 32 per SM, each slice at least 256 elements of K.
  const int64_t want_warps = static_cast<int64_t>(sms) * 32;
  int64_t slices = (want_warps + N - 1) / N;
  const int64_t max_slices = K / 256 > 1 ? K / 256 : 1;
  if (slices > max_slices) slices = max_slices;
  if (slices > 64) slices = 64;
  const int64_t slice = ((K + slices - 1) / slices + 63) / 64 * 64;
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
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(slices));
  const int m = static_cast<int>(M);
  if (m == 1) launch<1>(grid, stream, x, W, y, part, m, N, K, slice);
  else if (m <= 4) launch<4>(grid, stream, x, W, y, part, m, N, K, slice);
  else if (m <= 8) launch<8>(grid, stream, x, W, y, part, m, N, K, slice);
  else if (m <= 16) launch<16>(grid, stream, x, W, y, part, m, N, K, slice);
  else if (m <= 32) launch<32>(grid, stream, x, W, y, part, m, N, K, slice);
  else launch<64>(grid, stream, x, W, y, part, m, N, K, slice);
  if (slices > 1) {
    const int64_t count = M * N;
    gemm_skinny_l1_reduce<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(part, y, count,
                                                                                           static_cast<int>(slices));
  }
  return static_cast<int>(cudaGetLastError());
}
