// gemm_skinny L2 expert: the L1 design (W streamed once, split-K, warp per row) with a dataflow
// built for bandwidth:
// - a block owns one K slice: it stages x[:, slice] in shared memory once (up to 64 KiB: 4096 k at
//   M <= 8, 512 k at M = 64) and its 8 warps then walk many W rows (row stride gridDim.x * 8), so
//   x is read from L2 once per block instead of once per row;
// - each lane loads W with 128-bit loads (8 bf16), four of them issued before any is used (2 KiB
//   in flight per warp), streaming (evict-first) since W is used once; x comes from shared memory
//   with 128-bit loads too, 8 FMAs per load per row of x;
// - the grid is sized to the machine (occupancy x SMs x 2 blocks): slices x row groups; the fp32
//   partials of the slices are summed by a second kernel, which rounds once to bf16.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;              // 16-byte W loads in flight per lane
constexpr int kXBytes = 64 * 1024;      // shared-memory budget for the x slice

__device__ __forceinline__ void fma8(float& acc, uint4 w, uint4 xv) {
  const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc += __bfloat162float(wp[i].x) * __bfloat162float(xp[i].x);
    acc += __bfloat162float(wp[i].y) * __bfloat162float(xp[i].y);
  }
}

template <int MT>
__global__ void __launch_bounds__(kThreads) gemm_skinny_l2(const __nv_bfloat16* __restrict__ x,
                                                           const __nv_bfloat16* __restrict__ W,
                                                           __nv_bfloat16* __restrict__ y, float* __restrict__ part,
                                                           int M, int64_t N, int64_t K, int slice) {
  extern __shared__ uint4 xs[];  // xs[m * (slice / 8) + c]: x[m][kbeg + 8c .. 8c + 8)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t kbeg = static_cast<int64_t>(blockIdx.y) * slice;
  const int len = static_cast<int>(kbeg + slice < K ? slice : K - kbeg);  // a multiple of 8
  const int chunks = len / 8, row_chunks = slice / 8;
  for (int i = threadIdx.x; i < M * chunks; i += kThreads) {
    const int m = i / chunks, c = i - m * chunks;
    xs[m * row_chunks + c] = *reinterpret_cast<const uint4*>(x + m * K + kbeg + 8 * c);
  }
  __syncthreads();
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + warp; n < N; n += static_cast<int64_t>(gridDim.x) * kWarps) {
    const uint4* wr = reinterpret_cast<const uint4*>(W + n * K + kbeg);
    float acc[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
    for (int c = lane; c < chunks; c += 32 * kUnroll) {
      uint4 w[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) w[u] = c + 32 * u < chunks ? __ldcs(wr + c + 32 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (c + 32 * u < chunks) {
#pragma unroll
          for (int m = 0; m < MT; ++m)
            if (m < M) fma8(acc[m], w[u], xs[m * row_chunks + c + 32 * u]);
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
}

__global__ void gemm_skinny_l2_reduce(const float* __restrict__ part, __nv_bfloat16* __restrict__ y, int64_t count,
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
cudaError_t run(cudaStream_t stream, const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int M,
                int64_t N, int64_t K, int sms) {
  // Slice length: the x slice fits the shared budget; more slices when the rows alone cannot give
  // every SM two blocks; each slice at least 256 elements of K (one 16-byte load per lane).
  int64_t slice = kXBytes / (MT * 2);
  if (slice > K) slice = K;
  const int64_t row_groups = (N + kWarps - 1) / kWarps;
  int64_t slices = (K + slice - 1) / slice;
  if (slices * row_groups < 2 * sms) {
    int64_t want = (2 * sms + row_groups - 1) / row_groups;
    const int64_t most = K / 256 > 1 ? K / 256 : 1;
    if (want > most) want = most;
    if (want > slices) slices = want;
  }
  if (slices > 1024) slices = 1024;
  slice = ((K + slices - 1) / slices + 7) / 8 * 8;
  slices = (K + slice - 1) / slice;
  const size_t smem = static_cast<size_t>(M) * slice * 2;
  cudaError_t err = cudaFuncSetAttribute(gemm_skinny_l2<MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, kXBytes);
  if (err != cudaSuccess) return err;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemm_skinny_l2<MT>, kThreads, smem);
  if (err != cudaSuccess) return err;
  if (per_sm < 1) per_sm = 1;
  int64_t gx = (2LL * per_sm * sms + slices - 1) / slices;
  if (gx > row_groups) gx = row_groups;
  if (gx < 1) gx = 1;
  static Scratch scratch;
  float* part = nullptr;
  if (slices > 1) {
    err = ensure_scratch(scratch, static_cast<size_t>(slices * M * N) * sizeof(float));
    if (err != cudaSuccess) return err;
    part = scratch.ptr;
  }
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(slices));
  gemm_skinny_l2<MT><<<grid, kThreads, smem, stream>>>(x, W, y, part, M, N, K, static_cast<int>(slice));
  if (slices > 1) {
    const int64_t count = static_cast<int64_t>(M) * N;
    gemm_skinny_l2_reduce<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(part, y, count,
                                                                                           static_cast<int>(slices));
  }
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_gemm_skinny(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int64_t M,
                               int64_t N, int64_t K, cudaStream_t stream) {
  if (M <= 0 || M > 64 || N <= 0 || K <= 0 || K % 8 != 0 || K > 0x7fffffff)
    return static_cast<int>(cudaErrorInvalidValue);
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int m = static_cast<int>(M);
  if (m == 1) err = run<1>(stream, x, W, y, m, N, K, sms);
  else if (m <= 4) err = run<4>(stream, x, W, y, m, N, K, sms);
  else if (m <= 8) err = run<8>(stream, x, W, y, m, N, K, sms);
  else if (m <= 16) err = run<16>(stream, x, W, y, m, N, K, sms);
  else if (m <= 32) err = run<32>(stream, x, W, y, m, N, K, sms);
  else err = run<64>(stream, x, W, y, m, N, K, sms);
  return static_cast<int>(err);
}
