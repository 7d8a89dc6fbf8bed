// conv2d expert, layer 2 (dataflow): implicit GEMM on tensor cores through mma.sync, fed by a
// cp.async ring. A 128-pixel x 128-channel Y tile per 256-thread block (8 warps as 2 x 4, each warp
// 64 x 32). A k-tile is 64 channels of one filter tap (128 bytes per row): the A rows are the 128
// pixels' input pixels shifted by the tap (cp.async with a zero-byte source outside the image, so
// the padding costs no branch in the math), the B rows 64 values of 128 filters. 4-stage ring
// (4 x 32 KiB), 16-byte chunks XOR-swizzled so ldmatrix reads 8 rows without bank conflicts; each
// k-tile is 4 k16 steps of mma.sync m16n8k16 bf16 x bf16 -> fp32.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 64;   // kBK bf16 = 128 bytes per row
constexpr int kStages = 4;
constexpr int kThreads = 256;
constexpr int kTileBytes = kBM * kBK * 2;       // 16 KiB (A and B tiles are the same size)
constexpr int kStageBytes = 2 * kTileBytes;     // A tile, then B tile
constexpr int kSmemBytes = kStages * kStageBytes;  // 128 KiB

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

// The pixels this thread copies input rows for (tile rows tid / 8 + 32 q), found once per block.
struct Rows {
  int64_t pix[4];  // (n*H + h)*W + w, the pixel's own index
  int h[4], w[4];  // its image coordinates; h = -1 << 20 for a row past the last pixel
};

// Issues the copies of k-tile kt (if it exists) into the stage at shared address `stage`: 128 rows
// x 8 chunks of 16 bytes for A and for B, four chunks of each per thread (chunk tid % 8).
__device__ __forceinline__ void issue_stage(uint32_t stage, const __nv_bfloat16* x,
                                            const __nv_bfloat16* wt, const Rows& rows, int H, int W,
                                            int64_t C, int64_t K, int R, int64_t red, int64_t n0,
                                            int64_t kt, int64_t num_k) {
  if (kt < num_k) {
    const int64_t k0 = kt * kBK;
    const int tap = static_cast<int>(k0 / C);  // C % 64 == 0: the whole k-tile is one tap
    const int64_t c0 = k0 - tap * C;
    const int dr = tap / R - R / 2, ds = tap % R - R / 2;
    const int c = threadIdx.x % 8;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = threadIdx.x / 8 + 32 * q;
      const int ih = rows.h[q] + dr, iw = rows.w[q] + ds;
      const bool a_ok = ih >= 0 && ih < H && iw >= 0 && iw < W;
      const bool b_ok = n0 + r < K;
      const __nv_bfloat16* a_src = x + (rows.pix[q] + static_cast<int64_t>(dr) * W + ds) * C + c0 + 8 * c;
      cp_async_16(stage + swz(r, c), a_ok ? a_src : x, a_ok);
      cp_async_16(stage + kTileBytes + swz(r, c), b_ok ? wt + (n0 + r) * red + k0 + 8 * c : wt, b_ok);
    }
  }
  cp_async_commit();  // always one group per k-tile (possibly empty): the wait counts stay exact
}

__global__ void __launch_bounds__(kThreads, 1)
conv2d_mma(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ wt,
           __nv_bfloat16* __restrict__ y, int64_t M, int H, int W, int64_t C, int64_t K, int R) {
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int wm = warp / 4;  // warp's 64 rows: wm * 64
  const int wn = warp % 4;  // warp's 32 columns: wn * 32

  // Grid: (pixel tiles, channel tiles). The filters (a few MiB at most) stay in L2 for every block.
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBN;
  const int64_t red = static_cast<int64_t>(R) * R * C;
  const int64_t num_k = red / kBK;

  Rows rows;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int64_t m = m0 + tid / 8 + 32 * q;
    rows.pix[q] = m;
    rows.w[q] = static_cast<int>(m % W);
    rows.h[q] = m < M ? static_cast<int>((m / W) % H) : -(1 << 20);  // never inside the image
  }

  float acc[4][4][4];   // [m16 tile][n8 tile][fragment]: the warp's 64 x 32 of Y in fp32
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    issue_stage(base + s * kStageBytes, x, wt, rows, H, W, C, K, R, red, n0, s, num_k);

  for (int64_t kt = 0; kt < num_k; ++kt) {
    cp_async_wait<kStages - 2>();  // k-tile kt has landed (for this thread's copies) ...
    __syncthreads();               // ... and for everyone's; stage (kt - 1) % kStages is free
    issue_stage(base + ((kt + kStages - 1) % kStages) * kStageBytes, x, wt, rows, H, W, C, K, R,
                red, n0, kt + kStages - 1, num_k);
    const uint32_t sa = base + (kt % kStages) * kStageBytes;
    const uint32_t sb = sa + kTileBytes;

#pragma unroll 2
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

  // Fragment layout of m16n8: e = 2h + c is row lane/4 + 8h, column 2*(lane%4) + c. K % 64 == 0:
  // a column pair is inside or outside together and 4-byte aligned.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = m0 + wm * 64 + i * 16 + lane / 4 + 8 * h;
      if (m >= M) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t n = n0 + wn * 32 + j * 8 + 2 * (lane % 4);
        if (n >= K) continue;
        *reinterpret_cast<__nv_bfloat162*>(y + m * K + n) =
            __floats2bfloat162_rn(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
    }
  }
}

}  // namespace

extern "C" int d2k_conv2d(const __nv_bfloat16* x, const __nv_bfloat16* wt, __nv_bfloat16* y,
                          int64_t batch, int64_t H, int64_t W, int64_t C, int64_t K, int64_t R,
                          cudaStream_t stream) {
  if (batch <= 0 || H <= 0 || W <= 0 || C <= 0 || K <= 0) return 0;
  if ((R != 1 && R != 3) || C % kBK != 0 || K % 8 != 0 || H >= (1 << 20) || W >= (1 << 20)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int64_t M = batch * H * W;
  const int64_t gx = (M + kBM - 1) / kBM;
  const int64_t gy = (K + kBN - 1) / kBN;
  if (gx > 0x7fffffff || gy > 65535) return static_cast<int>(cudaErrorInvalidValue);
  static bool configured = false;  // the attribute is per function and device; set it once
  if (!configured) {
    const cudaError_t err =
        cudaFuncSetAttribute(conv2d_mma, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    configured = true;
  }
  conv2d_mma<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), kThreads, kSmemBytes,
               stream>>>(x, wt, y, M, static_cast<int>(H), static_cast<int>(W), C, K,
                         static_cast<int>(R));
  return static_cast<int>(cudaGetLastError());
}
