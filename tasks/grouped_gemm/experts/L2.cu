// grouped_gemm expert, layer 2 (dataflow): tensor cores through mma.sync, fed by a cp.async ring,
// with the same tile scheduler over groups as L1. A 128 x 128 Y tile of one group per 256-thread
// block (8 warps as 2 x 4, each warp 64 x 32); tile rows are the concatenated groups' 128-row tiles
// (warp 0 finds its group by a shuffle scan of the offsets; one spare tile row per group exits),
// rasterized in bands of 8 tile rows so the blocks in flight share X rows and W_g rows in L2.
// k-tiles of 64 bf16 = 128 bytes per row, copied into a 4-stage ring (4 x 32 KiB) with cp.async
// (zero-filled past the group's last row and past N), 16-byte chunks XOR-swizzled so ldmatrix
// reads 8 rows without bank conflicts; each k-tile is 4 k16 steps of mma.sync m16n8k16 bf16 -> fp32.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 64;  // kBK bf16 = 128 bytes per tile row
constexpr int kStages = 4;
constexpr int kThreads = 256;
constexpr int kTileBytes = kBM * kBK * 2;       // 16 KiB: 128 rows x 128 bytes (X and W tiles alike)
constexpr int kStageBytes = 2 * kTileBytes;     // A tile, then B tile
constexpr int kSmemBytes = kStages * kStageBytes;  // 128 KiB
constexpr int kGroupM = 8;                      // tile rows per rasterization band

// Byte offset of 16-byte chunk c (0..7) of row r in a 128-byte-row tile: chunk c ^ (r % 8), so the
// 8 rows one ldmatrix phase reads (same logical chunk) sit in 8 different bank groups.
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;  // 0: nothing is read, the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += A (16 x 16, row) * B (16 x 8, col) in bf16 with fp32 accumulation.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Issues the copies of k-tile kt (if it exists) into the stage at shared address `stage`: 128 rows
// x 8 chunks of 16 bytes for X (rows m0.. of the group, zero past m_end) and for W_g, four chunks of
// each per thread. K % 8 == 0: a chunk is all inside or all outside [0, K).
__device__ __forceinline__ void issue_stage(uint32_t stage, const __nv_bfloat16* A,
                                            const __nv_bfloat16* B, int64_t M, int64_t N, int64_t K,
                                            int64_t m0, int64_t n0, int64_t kt, int64_t num_k) {
  if (kt < num_k) {
    const int64_t k0 = kt * kBK;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int idx = threadIdx.x + kThreads * q;  // 0..1023
      const int r = idx / 8;
      const int c = idx % 8;
      const bool kin = k0 + 8 * c < K;
      const bool a_ok = kin && m0 + r < M;
      const bool b_ok = kin && n0 + r < N;
      cp_async_16(stage + swz(r, c), a_ok ? A + (m0 + r) * K + k0 + 8 * c : A, a_ok);
      cp_async_16(stage + kTileBytes + swz(r, c), b_ok ? B + (n0 + r) * K + k0 + 8 * c : B, b_ok);
    }
  }
  cp_async_commit();  // always one group per k-tile (possibly empty): the wait counts stay exact
}

// The tile scheduler: block row `mt` is the mt-th 128-row tile in the concatenation of every group's
// tiles (a group of m rows has ceil(m / 128)). Warp 0 scans the group sizes 32 at a time (an
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
      const int64_t tiles = (end - begin + kBM - 1) / kBM;
      int64_t incl = tiles;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int64_t v = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += v;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, mt < before + incl);
      if (hit != 0) {
        const int first = __ffs(hit) - 1;  // the first group whose tiles reach past mt
        if (lane == first) s = TileSlot{g, begin + (mt - (before + incl - tiles)) * kBM, end};
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

__global__ void __launch_bounds__(kThreads, 1)
grouped_gemm_mma(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
                 const int* __restrict__ offsets, __nv_bfloat16* __restrict__ Y, int64_t G, int64_t N,
                 int64_t K, int tiles_m, int tiles_n) {
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int wm = warp / 4;  // warp's 64 rows: wm * 64
  const int wn = warp % 4;  // warp's 32 columns: wn * 32

  // Bands of kGroupM tile rows, column-major inside a band: blocks in flight share A and B in L2.
  const int tile = blockIdx.x;
  const int band_tiles = kGroupM * tiles_n;
  const int band = tile / band_tiles;
  const int first_m = band * kGroupM;
  const int rows = min(tiles_m - first_m, kGroupM);
  const int in_band = tile - band * band_tiles;
  const TileSlot slot = locate_tile(offsets, G, first_m + in_band % rows);
  if (slot.group < 0) return;  // one of the spare tile rows (the grid has one per group)
  const int64_t m0 = slot.m0, M = slot.m_end;  // rows m0 .. min(m0 + 128, M) - 1 of X and Y
  const int64_t n0 = static_cast<int64_t>(in_band / rows) * kBN;
  const int64_t num_k = (K + kBK - 1) / kBK;
  const __nv_bfloat16* A = X;
  const __nv_bfloat16* B = W + slot.group * N * K;  // expert g's N x K weights
  __nv_bfloat16* C = Y;

  float acc[4][4][4];   // [m16 tile][n8 tile][fragment]: the warp's 64 x 32 of C in fp32
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue_stage(base + s * kStageBytes, A, B, M, N, K, m0, n0, s, num_k);

  for (int64_t kt = 0; kt < num_k; ++kt) {
    cp_async_wait<kStages - 2>();  // k-tile kt has landed (for this thread's copies) ...
    __syncthreads();               // ... and for everyone's; stage (kt - 1) % kStages is free
    issue_stage(base + ((kt + kStages - 1) % kStages) * kStageBytes, A, B, M, N, K, m0, n0,
                kt + kStages - 1, num_k);
    const uint32_t sa = base + (kt % kStages) * kStageBytes;
    const uint32_t sb = sa + kTileBytes;

#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t af[4][4], bf[2][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // Matrices: rows 0-7 / 8-15 of the m16 tile, k 0-7 / 8-15 of the k16 step.
        const int r = wm * 64 + i * 16 + (lane % 16);
        ldmatrix_x4(sa + swz(r, 2 * ks + lane / 16), af[i]);
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        // Matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
        const int r = wn * 32 + j * 16 + (lane / 16) * 8 + (lane % 8);
        ldmatrix_x4(sb + swz(r, 2 * ks + ((lane / 8) & 1)), bf[j]);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_bf16(acc[i][j], af[i], bf[j / 2][2 * (j % 2)], bf[j / 2][2 * (j % 2) + 1]);
    }
  }
  cp_async_wait<0>();

  // Fragment layout of m16n8: e = 2h + c is row lane/4 + 8h, column 2*(lane%4) + c.
  const bool even_n = (N % 2) == 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = m0 + wm * 64 + i * 16 + lane / 4 + 8 * h;
      if (m >= M) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t n = n0 + wn * 32 + j * 8 + 2 * (lane % 4);
        if (n >= N) continue;
        const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        __nv_bfloat16* p = C + m * N + n;
        if (even_n) {  // n even and N even: 4-byte aligned pair, n + 1 < N
          *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
        } else {
          p[0] = __float2bfloat16_rn(v0);
          if (n + 1 < N) p[1] = __float2bfloat16_rn(v1);
        }
      }
    }
  }
}

}  // namespace

extern "C" int d2k_grouped_gemm(const __nv_bfloat16* X, const __nv_bfloat16* W, const int* offsets,
                                __nv_bfloat16* Y, int64_t T, int64_t G, int64_t N, int64_t K,
                                cudaStream_t stream) {
  if (T <= 0 || G <= 0 || N <= 0 || K <= 0) return 0;
  if (K % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t tiles_m = (T + kBM - 1) / kBM + G;  // >= the 128-row tiles of all groups together
  const int64_t tiles_n = (N + kBN - 1) / kBN;
  if (tiles_m * tiles_n > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  static bool configured = false;  // the attribute is per function and device; set it once
  if (!configured) {
    const cudaError_t err =
        cudaFuncSetAttribute(grouped_gemm_mma, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    configured = true;
  }
  grouped_gemm_mma<<<static_cast<unsigned>(tiles_m * tiles_n), kThreads, kSmemBytes, stream>>>(
      X, W, offsets, Y, G, N, K, static_cast<int>(tiles_m), static_cast<int>(tiles_n));
  return static_cast<int>(cudaGetLastError());
}
