// w4a16_gemm L2 expert: the L1 design (packed W streamed once, dequantized in registers, split-K,
// token chunks of 64 for prefill) with a dataflow built for bandwidth:
// - a block owns one K slice (and one chunk of up to 64 tokens): it stages x[:, slice] in shared
//   memory once, converted to fp32 (up to 72 KiB with padding: 16384 k at M = 1, 1024 k at M = 16,
//   256 k at M = 64), and its 8 warps then walk many W rows (8 rows per warp at a time, row stride
//   gridDim.x * 64), so x is read from L2 once per block;
// - four lanes per W row: each lane loads 16-byte pieces of packed W (32 codes, LDG.128), four of
//   them issued before any is used (2 KiB in flight per warp), streaming (evict-first) since W is
//   used once; the four lanes of a row cover 64 contiguous bytes, two full sectors;
// - the 8 rows of a warp share each x read: the lanes at the same position of their row group read
//   the same 8 x values from shared memory (a broadcast), so one shared load feeds 8 rows x 8 FMAs;
// - each 32-bit word is dequantized once (8 fp32 weights in registers) before the token loop, which
//   then only loads x and does FMAs (inside the token loop the conversions would run M times per
//   weight: the compiler does not hoist them);
// - the group's scale is loaded once per 16-byte piece (a piece never straddles a group of 128);
// - the grid is sized to the machine (occupancy x SMs x 2 blocks): slices x row groups x token
//   chunks; the fp32 partials of the slices are summed by a second kernel, which rounds once to bf16.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 8;                  // 4 lanes per row
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kUnroll = 4;                       // 16-byte W pieces in flight per lane
constexpr int kXBytes = 72 * 1024;               // shared-memory budget for the fp32 x slice (padded)
constexpr int kTokens = 64;                      // tokens per grid-z chunk

// The eight weights of one 32-bit word (codes k = 8c .. 8c + 7, low nibble first), each
// bf16((q - 8) * s) as an fp32 value: computed once per word, then used for every token.
__device__ __forceinline__ void dequant8(uint32_t word, float s, float (&w)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
    w[i] = __bfloat162float(__float2bfloat16_rn(static_cast<float>(static_cast<int>((word >> (4 * i)) & 15u) - 8) * s));
}

// acc += the eight weights w times eight fp32 x values.
__device__ __forceinline__ void dot8(float& acc, const float (&w)[8], float4 xa, float4 xb) {
  acc += w[0] * xa.x + w[1] * xa.y + w[2] * xa.z + w[3] * xa.w;
  acc += w[4] * xb.x + w[5] * xb.y + w[6] * xb.z + w[7] * xb.w;
}

template <int MT>
__global__ void __launch_bounds__(kThreads) w4a16_l2(const __nv_bfloat16* __restrict__ x,
                                                     const uint8_t* __restrict__ Wq,
                                                     const __nv_bfloat16* __restrict__ scales,
                                                     __nv_bfloat16* __restrict__ y, float* __restrict__ part, int M,
                                                     int64_t N, int64_t K, int slice) {
  // xs[m * stride + c + c / 8]: x[m0 + m][kbeg + 4c .. 4c + 4) in fp32, one float4 of padding per
  // 128 bytes so that the four lanes of a row group (pieces 128 bytes of x apart) hit different banks.
  extern __shared__ float4 xs[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int pos = lane & 3, sub = lane >> 2;  // position in the row group, row within the warp
  const int m0 = static_cast<int>(blockIdx.z) * kTokens;
  const int rows = M - m0 < MT ? M - m0 : MT;
  const int64_t kbeg = static_cast<int64_t>(blockIdx.y) * slice;
  const int len = static_cast<int>(kbeg + slice < K ? slice : K - kbeg);  // a multiple of 128
  const int quads = len / 4, stride = slice / 4 + slice / 32;
  for (int i = threadIdx.x; i < rows * quads; i += kThreads) {
    const int m = i / quads, c = i - m * quads;
    const __nv_bfloat162* src = reinterpret_cast<const __nv_bfloat162*>(x + (m0 + m) * K + kbeg + 4 * c);
    const __nv_bfloat162 a = src[0], b = src[1];
    xs[m * stride + c + c / 8] =
        make_float4(__bfloat162float(a.x), __bfloat162float(a.y), __bfloat162float(b.x), __bfloat162float(b.y));
  }
  __syncthreads();
  const int pieces = len / 32;  // 16-byte pieces of a row in this slice (a multiple of 4)
  for (int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp * kRowsPerWarp; n0 < N;
       n0 += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int64_t n = n0 + sub;
    const bool valid = n < N;
    const uint4* wr = reinterpret_cast<const uint4*>(Wq + (valid ? n : 0) * (K / 2) + kbeg / 2);
    const __nv_bfloat16* sr = scales + (valid ? n : 0) * (K / 128) + kbeg / 128;
    float acc[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
    for (int p = pos; p < pieces; p += 4 * kUnroll) {
      uint4 w[kUnroll];
      float s[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int pp = p + 4 * u;
        w[u] = pp < pieces ? __ldcs(wr + pp) : make_uint4(0, 0, 0, 0);
        s[u] = pp < pieces ? __bfloat162float(sr[pp / 4]) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int pp = p + 4 * u;
        if (pp < pieces) {
          const uint32_t words[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int q = 9 * pp + 2 * i;  // padded quad index of k = 32 pp + 8 i (8 pp + 2 i + pp)
            float wf[8];  // dequantized once, outside the token loop
            dequant8(words[i], s[u], wf);
#pragma unroll
            for (int m = 0; m < MT; ++m)
              if (m < rows) dot8(acc[m], wf, xs[m * stride + q], xs[m * stride + q + 1]);
          }
        }
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float v = acc[m];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      if (pos == 0 && valid && m < rows) {
        const int64_t row = m0 + m;
        if (gridDim.y == 1) y[row * N + n] = __float2bfloat16(v);
        else part[(static_cast<int64_t>(blockIdx.y) * M + row) * N + n] = v;
      }
    }
  }
}

__global__ void w4a16_l2_reduce(const float* __restrict__ part, __nv_bfloat16* __restrict__ y, int64_t count,
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
cudaError_t run(cudaStream_t stream, const __nv_bfloat16* x, const uint8_t* Wq, const __nv_bfloat16* scales,
                __nv_bfloat16* y, int M, int64_t N, int64_t K, int sms) {
  // Slice length: the fp32 x slice fits the shared budget (a multiple of 128, whole groups); more
  // slices when the rows alone cannot give every SM two blocks.
  const int64_t chunks = (M + kTokens - 1) / kTokens;
  int64_t slice = kXBytes * 2 / (MT * 9) / 128 * 128;  // 4.5 bytes per k and token
  if (slice > K) slice = K;
  const int64_t row_groups = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  int64_t slices = (K + slice - 1) / slice;
  if (slices * row_groups * chunks < 2 * sms) {
    int64_t want = (2 * sms + row_groups * chunks - 1) / (row_groups * chunks);
    const int64_t most = K / 512 > 1 ? K / 512 : 1;
    if (want > most) want = most;
    if (want > slices) slices = want;
  }
  if (slices > 1024) slices = 1024;
  slice = ((K + slices - 1) / slices + 127) / 128 * 128;
  slices = (K + slice - 1) / slice;
  const size_t smem = static_cast<size_t>(MT < M ? MT : M) * (slice / 4 + slice / 32) * 16;
  cudaError_t err = cudaFuncSetAttribute(w4a16_l2<MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, kXBytes);
  if (err != cudaSuccess) return err;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, w4a16_l2<MT>, kThreads, smem);
  if (err != cudaSuccess) return err;
  if (per_sm < 1) per_sm = 1;
  int64_t gx = (2LL * per_sm * sms + slices * chunks - 1) / (slices * chunks);
  if (gx > row_groups) gx = row_groups;
  if (gx < 1) gx = 1;
  static Scratch scratch;
  float* part = nullptr;
  if (slices > 1) {
    err = ensure_scratch(scratch, static_cast<size_t>(slices * M * N) * sizeof(float));
    if (err != cudaSuccess) return err;
    part = scratch.ptr;
  }
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(slices), static_cast<unsigned>(chunks));
  w4a16_l2<MT><<<grid, kThreads, smem, stream>>>(x, Wq, scales, y, part, M, N, K, static_cast<int>(slice));
  if (slices > 1) {
    const int64_t count = static_cast<int64_t>(M) * N;
    w4a16_l2_reduce<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(part, y, count,
                                                                                    static_cast<int>(slices));
  }
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_w4a16_gemm(const __nv_bfloat16* x, const uint8_t* Wq, const __nv_bfloat16* scales,
                              __nv_bfloat16* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  if (M <= 0 || M > 4096 || N <= 0 || K <= 0 || K % 128 != 0 || K > 0x7fffffff)
    return static_cast<int>(cudaErrorInvalidValue);
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int m = static_cast<int>(M);
  if (m == 1) err = run<1>(stream, x, Wq, scales, y, m, N, K, sms);
  else if (m <= 4) err = run<4>(stream, x, Wq, scales, y, m, N, K, sms);
  else if (m <= 8) err = run<8>(stream, x, Wq, scales, y, m, N, K, sms);
  else if (m <= 16) err = run<16>(stream, x, Wq, scales, y, m, N, K, sms);
  else if (m <= 32) err = run<32>(stream, x, Wq, scales, y, m, N, K, sms);
  else err = run<64>(stream, x, Wq, scales, y, m, N, K, sms);
  return static_cast<int>(err);
}
