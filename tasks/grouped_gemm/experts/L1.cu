// grouped_gemm expert, layer 1 (blocking for reuse, a tile scheduler over groups): each 256-thread
// block computes a 64x64 tile of one group's Y_g. Block row b is the b-th 64-row tile of the
// concatenated groups (warp 0 finds its group with a shuffle scan of the per-group tile counts; the
// grid has one spare row per group, those blocks exit). Per k-step the block copies a 64x32 tile of
// X_g and of W_g into shared memory once (one 16-byte load per thread per operand), then every
// thread computes a 4x4 register tile of Y from them with fp32 FMAs.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kTile = 64;      // C tile is kTile x kTile
constexpr int kBK = 32;        // k per shared-memory step
constexpr int kPitch = kBK + 8;  // bf16 per shared row: 80 bytes, so 8 consecutive rows read as
                                 // 16-byte vectors hit 8 different bank groups
constexpr int kThreads = 256;

// Two bf16 packed in a 32-bit word -> two floats (bf16 is the top half of an fp32).
__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Copies rows [r0, r0 + 64) x k-columns [k0, k0 + 32) of a rows x K matrix into tile (row pitch
// kPitch), zero outside the matrix. Thread t copies row t / 4, bf16 columns 8 * (t % 4) .. + 7:
// K % 8 == 0, so such an 8-element chunk is either entirely inside the matrix or entirely outside.
__device__ __forceinline__ void load_tile(__nv_bfloat16 (*tile)[kPitch], const __nv_bfloat16* X,
                                          int64_t rows, int64_t K, int64_t r0, int64_t k0) {
  const int t = threadIdx.x;
  const int r = t / 4;
  const int c = (t % 4) * 8;
  uint4 v = make_uint4(0, 0, 0, 0);
  if (r0 + r < rows && k0 + c < K) v = *reinterpret_cast<const uint4*>(X + (r0 + r) * K + k0 + c);
  *reinterpret_cast<uint4*>(&tile[r][c]) = v;
}

// The tile scheduler: block row `mt` is the mt-th 64-row tile in the concatenation of every group's
// tiles (a group of m rows has ceil(m / 64)). Warp 0 scans the group sizes 32 at a time (an
// inclusive shuffle scan of the tile counts) until the running total passes mt; the block learns
// its group g, its first row and the group's end. mt past the last tile: g = -1 (nothing to do).
struct TileSlot {
  int64_t group, m0, m_end;
};

__device__ __forceinline__ TileSlot locate_tile(const int* __restrict__ offsets, int64_t G, int64_t mt) {
  __shared__ TileSlot slot;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    int64_t before = 0;  // tiles of the groups before this chunk
    TileSlot s{-1, 0, 0};
    for (int64_t g0 = 0; g0 < G; g0 += 32) {
      const int64_t g = g0 + lane;
      int64_t begin = 0, end = 0;
      if (g < G) {
        begin = offsets[g];
        end = offsets[g + 1];
      }
      const int64_t tiles = (end - begin + kTile - 1) / kTile;
      int64_t incl = tiles;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int64_t v = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += v;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, mt < before + incl);
      if (hit != 0) {
        const int first = __ffs(hit) - 1;  // the first group whose tiles reach past mt
        if (lane == first) s = TileSlot{g, begin + (mt - (before + incl - tiles)) * kTile, end};
        break;
      }
      before += __shfl_sync(0xffffffffu, incl, 31);
    }
    const unsigned has = __ballot_sync(0xffffffffu, s.group >= 0);
    if (has == 0 && lane == 0) slot = s;
    if (has != 0 && lane == __ffs(has) - 1) slot = s;
  }
  __syncthreads();
  return slot;
}

__global__ void __launch_bounds__(kThreads)
grouped_gemm_tiled(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
                   const int* __restrict__ offsets, __nv_bfloat16* __restrict__ Y, int64_t G,
                   int64_t N, int64_t K) {
  __shared__ __align__(16) __nv_bfloat16 a_tile[kTile][kPitch];
  __shared__ __align__(16) __nv_bfloat16 b_tile[kTile][kPitch];
  const int tx = threadIdx.x % 16;  // this thread's Y columns: tx + 16 j
  const int ty = threadIdx.x / 16;  // this thread's Y rows:    ty + 16 i
  const TileSlot slot = locate_tile(offsets, G, blockIdx.y);
  if (slot.group < 0) return;  // the grid has a tile per group more than needed, at most
  const int64_t m0 = slot.m0, M = slot.m_end;  // rows m0 .. min(m0 + 64, M) - 1 of X and Y
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const __nv_bfloat16* A = X;
  const __nv_bfloat16* B = W + slot.group * N * K;  // expert g's N x K weights
  __nv_bfloat16* C = Y;

  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    load_tile(a_tile, A, M, K, m0, k0);
    load_tile(b_tile, B, N, K, n0, k0);
    __syncthreads();
#pragma unroll
    for (int kc = 0; kc < kBK; kc += 8) {
      // 8 k values of each of this thread's 4 A rows and 4 B rows, as 16-byte shared loads.
      uint4 a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const uint4*>(&a_tile[ty + 16 * i][kc]);
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = *reinterpret_cast<const uint4*>(&b_tile[tx + 16 * j][kc]);
#pragma unroll
      for (int w = 0; w < 4; ++w) {  // the 4 words (8 k values) of each vector
        float af[2][4], bf[2][4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint32_t wa = w == 0 ? a[i].x : w == 1 ? a[i].y : w == 2 ? a[i].z : a[i].w;
          const uint32_t wb = w == 0 ? b[i].x : w == 1 ? b[i].y : w == 2 ? b[i].z : b[i].w;
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
    if (n >= N) continue;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t m = m0 + ty + 16 * i;
      if (m < M) C[m * N + n] = __float2bfloat16_rn(acc[i][j]);
    }
  }
}

}  // namespace

extern "C" int d2k_grouped_gemm(const __nv_bfloat16* X, const __nv_bfloat16* W, const int* offsets,
                                __nv_bfloat16* Y, int64_t T, int64_t G, int64_t N, int64_t K,
                                cudaStream_t stream) {
  if (T <= 0 || G <= 0 || N <= 0 || K <= 0) return 0;
  if (K % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t gx = (N + kTile - 1) / kTile;
  const int64_t gy = (T + kTile - 1) / kTile + G;  // >= the 64-row tiles of all groups together
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  grouped_gemm_tiled<<<grid, kThreads, 0, stream>>>(X, W, offsets, Y, G, N, K);
  return static_cast<int>(cudaGetLastError());
}
