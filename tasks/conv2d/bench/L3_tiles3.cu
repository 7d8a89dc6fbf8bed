// conv2d L3 variant (workbench, not the task's expert): the layer-3 kernel with a choice of three
// CTA tiles per shape instead of two: 128 pixels x 256 channels (K % 256 == 0), 256 pixels x 128
// channels (each consumer warpgroup owns 128 rows as two m64 halves: two wgmma m64n128k16 per k16
// step), or 128 x 128. The 256 x 128 tile loads 48 KiB per k-step for twice the MMAs of a 128 x 128
// tile (a quarter less L2-to-shared traffic per multiply-add); the host picks the tile that needs
// the fewest waves of work, counting a 128 x 128 tile as 0.8 as efficient. The epilogue stores every
// 64-row chunk of the pixel box as its own 4-D TMA box. Otherwise identical to experts/L3.cu.
#include <cstdint>
#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes from the runtime's entry point
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kBK = 64;        // k per stage: 64 bf16 = 128 bytes = one swizzle row
constexpr int kEpiCols = 128;  // Y columns staged per epilogue pass
constexpr int kThreads = 384;  // warpgroup 0 produces, warpgroups 1 and 2 consume
constexpr uint32_t kEpiBytes = 64 * kEpiCols * 2;  // per consumer: 64 rows x kEpiCols bf16

template <int BM, int BN>
struct Config {
  static constexpr uint32_t kABytes = BM * kBK * 2;             // 16 or 32 KiB
  static constexpr uint32_t kBBytes = BN * kBK * 2;             // 32 or 16 KiB
  static constexpr uint32_t kStageBytes = kABytes + kBBytes;    // a multiple of 1024
  static constexpr int kStages = kStageBytes >= 48 * 1024 ? 4 : 6;  // 192 KiB of ring
  static constexpr int kSmemBytes = kStages * kStageBytes + 2 * kEpiBytes + 1024;  // + alignment
};

// Where a CTA's tiles lie: the pixel box and how the image tensors are cut into boxes.
struct Geometry {
  int tw, th, tn;   // boxes along w, h and the batch
  int bw, bh, bn;   // the box's extent along w, h, batch (bw * bh * bn == BM)
  int cw, ch, cn;   // the extent of a 64-row chunk of the box (64 consecutive rows form a box)
  int R, pad;       // filter size and padding (R / 2)
  int c_chunks;     // C / 64
  int num_k;        // R * R * C / 64 k-steps per tile
  int K;            // output channels
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int kGroupM = 16;  // pixel tiles per rasterization band

// Tile index -> (pixel box index, first output channel): bands of kGroupM pixel boxes,
// column-major inside a band, so the CTAs running at the same time share inputs and filters in L2.
__device__ __forceinline__ void tile_origin(int tile, int tiles_m, int tiles_n, int bn_cols, int& mt,
                                            int& n0) {
  const int band_tiles = kGroupM * tiles_n;
  const int band = tile / band_tiles;
  const int first_m = band * kGroupM;
  const int rows = min(tiles_m - first_m, kGroupM);
  const int in_band = tile - band * band_tiles;
  mt = first_m + in_band % rows;
  n0 = (in_band / rows) * bn_cols;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Returns once the phase of parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// TMA: copy the box at (c0 = k, c1 = row) of a 2-D tensor map into shared memory at dst;
// completion is reported to the mbarrier as transaction bytes. Out-of-bounds parts are zero-filled.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// The same for a 4-D map (channel, w, h, image). Coordinates are signed: a box that starts at
// w = -1 or h = -1 (the padding of a 3x3 window) reads zeros there.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// TMA store of a box from shared memory (128B-swizzled like the loads) to global memory at
// (channel, w, h, image); parts of the box outside the tensor are not written.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1,
                                             int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until the committed bulk stores have finished reading their shared-memory source.
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
// Wait until the committed bulk stores are complete (before the kernel exits).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// Barrier among the 128 threads of one consumer warpgroup (ids 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_bar(int id) {
  asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

// wgmma shared-memory matrix descriptor for a K-major tile written by TMA with 128-byte swizzle:
// rows of 128 bytes, 8-row swizzle atoms of 1024 bytes stacked along M/N (stride byte offset 1024),
// leading byte offset unused for swizzled K-major (encoded 1), layout type 1 = 128B swizzle. The
// 4-D input box lands as 128 rows of 128 bytes (w fastest, then h, then image), the same layout.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across the asynchronous MMAs.
template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// One m64n256k16 bf16 x bf16 -> fp32 warpgroup MMA, both operands K-major in shared memory
// (descriptors da, db), accumulating into the 128 fp32 registers d[] of each thread.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(1));
}

// One m64n128k16 bf16 x bf16 -> fp32 warpgroup MMA, both operands K-major in shared memory
// (descriptors da, db), accumulating into the 64 fp32 registers d[] of each thread.
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(1));
}


template <int BN>
__device__ __forceinline__ void wgmma_step(float (&d)[BN / 2], uint64_t da, uint64_t db) {
  if constexpr (BN == 256) {
    wgmma_m64n256k16(d, da, db);
  } else {
    wgmma_m64n128k16(d, da, db);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <int BM, int BN>
__global__ void __launch_bounds__(kThreads, 1)
conv2d_wgmma(const __grid_constant__ CUtensorMap tma_x, const __grid_constant__ CUtensorMap tma_w,
             const __grid_constant__ CUtensorMap tma_y, const Geometry g) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = Config<BM, BN>;
  constexpr int kStages = Cfg::kStages;
  constexpr uint32_t kStageBytes = Cfg::kStageBytes;
  constexpr int MB = BM / 128;  // m64 blocks per consumer warpgroup
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];   // TMA -> consumers: stage filled
  __shared__ __align__(8) uint64_t empty_bar[kStages];  // consumers -> producer: stage free

  // The 128B swizzle pattern repeats every 1024 bytes: align the ring to 1024.
  const uint32_t ring = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const int tid = threadIdx.x;
  const int wg = tid / 128;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(smem_addr(&full_bar[s]), 1);   // the producer's arrive.expect_tx (+ the bytes)
      mbar_init(smem_addr(&empty_bar[s]), 2);  // one arrive per consumer warpgroup
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();  // the last block-wide barrier: warpgroups run independently from here

  const int tiles_m = g.tw * g.th * g.tn;
  const int tiles_n = (g.K + BN - 1) / BN;
  const int num_tiles = tiles_m * tiles_n;

  if (wg == 0) {
    // Producer warpgroup: give registers to the consumers; one thread issues every copy.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tma_x)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tma_w)) : "memory");
      int stage = 0;
      uint32_t phase = 0;
      for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        int mt, n0;
        tile_origin(tile, tiles_m, tiles_n, BN, mt, n0);
        const int w0 = (mt % g.tw) * g.bw;
        const int h0 = ((mt / g.tw) % g.th) * g.bh;
        const int b0 = (mt / (g.tw * g.th)) * g.bn;
        int cc = 0, r = 0, s = 0;  // k-step kt = (r * R + s) * c_chunks + cc
        for (int kt = 0; kt < g.num_k; ++kt) {
          // A fresh barrier counts as having completed the phase of parity 1: the first pass
          // over the ring does not wait.
          mbar_wait(smem_addr(&empty_bar[stage]), phase ^ 1u);
          const uint32_t full = smem_addr(&full_bar[stage]);
          mbar_arrive_expect_tx(full, kStageBytes);  // full boxes, zero-filled parts included
          const uint32_t sa = ring + stage * kStageBytes;
          tma_load_4d(sa, &tma_x, full, cc * kBK, w0 + s - g.pad, h0 + r - g.pad, b0);
          tma_load_2d(sa + Cfg::kABytes, &tma_w, full, kt * kBK, n0);
          if (++cc == g.c_chunks) {
            cc = 0;
            if (++s == g.R) {
              s = 0;
              ++r;
            }
          }
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int consumer = wg - 1;       // which half (BM / 2 rows) of the Y tile
    const int ltid = tid - wg * 128;   // 0..127 inside the warpgroup
    const int warp = ltid / 32;
    const int lane = ltid % 32;
    int stage = 0;
    uint32_t phase = 0;
    float acc[MB][BN / 2];

    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      int mt, n0;
      tile_origin(tile, tiles_m, tiles_n, BN, mt, n0);
      const int w0 = (mt % g.tw) * g.bw;
      const int h0 = ((mt / g.tw) % g.th) * g.bh;
      const int b0 = (mt / (g.tw * g.th)) * g.bn;
#pragma unroll
      for (int mb = 0; mb < MB; ++mb)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[mb][i] = 0.0f;

      int prev_stage = -1;
      for (int kt = 0; kt < g.num_k; ++kt) {
        mbar_wait(smem_addr(&full_bar[stage]), phase);
        // This consumer's rows: BM / 2 rows of 128 bytes from row consumer * BM / 2.
        const uint32_t sa = ring + stage * kStageBytes + consumer * (BM / 2) * 128;
        const uint32_t sb = ring + stage * kStageBytes + Cfg::kABytes;
        const uint64_t dbd = smem_desc(sb);
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) fence_acc(acc[mb]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
#pragma unroll
          for (int mb = 0; mb < MB; ++mb) {
            // Advancing 16 bf16 = 32 bytes along K inside the swizzled rows: +2 in the address
            // field; the second m64 block starts 64 rows (8 KiB) further.
            wgmma_step<BN>(acc[mb], smem_desc(sa + mb * (64 * 128)) + 2 * kk, dbd + 2 * kk);
          }
        }
        wgmma_commit();
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) fence_acc(acc[mb]);
        // Keep this k-step's MMAs in flight; the previous step's are done, so its stage is free.
        wgmma_wait<1>();
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) fence_acc(acc[mb]);
        if (prev_stage >= 0 && ltid == 0) mbar_arrive(smem_addr(&empty_bar[prev_stage]));
        prev_stage = stage;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1u;
        }
      }
      wgmma_wait<0>();
#pragma unroll
      for (int mb = 0; mb < MB; ++mb) fence_acc(acc[mb]);
      if (ltid == 0) mbar_arrive(smem_addr(&empty_bar[prev_stage]));  // num_k >= 1

      // Epilogue (the producer already fills the ring for the next tile). Accumulator layout of
      // m64nNk16: warp w owns rows 16w..16w+15; acc[4j + 2h + c] is row lane/4 + 8h, column
      // 8j + 2*(lane%4) + c. Per m64 block and pass, stage 64 x kEpiCols of bf16 Y in shared
      // memory as 64-column boxes of 64 rows x 128 B, 128B-swizzled (16-byte chunk q of row r at
      // chunk q ^ (r % 8)), then one thread stores them with TMA. The block's 64 rows are rows
      // 64 j .. 64 j + 63 of the pixel box (j = consumer * MB + mb), a chunk box of cw x ch x cn
      // pixels whose origin is row 64 j's position (w fastest, then h, then image).
      const uint32_t cbuf = ring + kStages * kStageBytes + consumer * kEpiBytes;
#pragma unroll
      for (int mb = 0; mb < MB; ++mb) {
        const int t = 64 * (consumer * MB + mb);
        const int ow = t % g.bw, oh = (t / g.bw) % g.bh, on = t / (g.bw * g.bh);
#pragma unroll
        for (int pass = 0; pass < BN / kEpiCols; ++pass) {
          if (ltid == 0) bulk_wait_read();  // the previous stores no longer read the buffer
          warpgroup_bar(1 + consumer);
#pragma unroll
          for (int jj = 0; jj < kEpiCols / 8; ++jj) {
            const int j = pass * (kEpiCols / 8) + jj;
            const int cl = 8 * jj + 2 * (lane % 4);  // column inside this pass
            const uint32_t box = cbuf + (cl / 64) * (64 * 128);
            const int chunk = (cl % 64) / 8;
            const int in_chunk = (cl % 8) * 2;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = warp * 16 + lane / 4 + 8 * h;
              const __nv_bfloat162 v =
                  __floats2bfloat162_rn(acc[mb][4 * j + 2 * h], acc[mb][4 * j + 2 * h + 1]);
              const uint32_t addr = box + r * 128 + ((chunk ^ (r % 8)) * 16) + in_chunk;
              asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr),
                           "r"(*reinterpret_cast<const uint32_t*>(&v))
                           : "memory");
            }
          }
          // Make the generic-proxy writes visible to the TMA (async proxy), then hand over.
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
          warpgroup_bar(1 + consumer);
          if (ltid == 0) {
#pragma unroll
            for (int b = 0; b < kEpiCols / 64; ++b) {
              const int col = n0 + pass * kEpiCols + 64 * b;
              if (col < g.K) {  // K % 64 == 0: a 64-column box is all inside or all outside
                tma_store_4d(&tma_y, cbuf + b * (64 * 128), col, w0 + ow, h0 + oh, b0 + on);
              }
            }
            bulk_commit();
          }
        }
      }
    }
    if (ltid == 0) bulk_wait_all();  // stores complete before the CTA retires
  }
#else
  // Built without sm_90a features (no wgmma): this image must never run.
  (void)tma_x; (void)tma_w; (void)tma_y; (void)g;
  __trap();
#endif
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_fn() {
  static EncodeTiledFn fn = nullptr;
  if (fn == nullptr) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<EncodeTiledFn>(p);
    }
  }
  return fn;
}

// A bf16 tensor of `rank` dimensions (dims[0] contiguous, a multiple of 64) as a TMA tensor map
// with the given box, 128-byte swizzled in shared memory, zero fill outside the tensor.
bool make_map(CUtensorMap* map, EncodeTiledFn enc, const void* base, int rank, const int64_t* dims,
              const uint32_t* box) {
  cuuint64_t gdim[4], gstride[3];
  cuuint32_t gbox[4], estride[4];
  int64_t stride = 2;
  for (int i = 0; i < rank; ++i) {
    gdim[i] = static_cast<cuuint64_t>(dims[i]);
    gbox[i] = box[i];
    estride[i] = 1;
    stride *= dims[i];
    if (i + 1 < rank) gstride[i] = static_cast<cuuint64_t>(stride);  // bytes, multiples of 128
  }
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, static_cast<cuuint32_t>(rank), const_cast<void*>(base),
             gdim, gstride, gbox, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The pixel box of `rows` pixels for images of wd x hd (x nd): bw * bh * bn == rows with
// power-of-two extents, the fewest boxes to cover the tensor; among equals the one that
// overshoots the fewest dimensions, then the smallest input window (bw + R - 1) x (bh + R - 1) x bn
// (the rows the 9 taps of a 3x3 layer read around the box: the squarest box), then the widest.
int64_t pick_box(int64_t wd, int64_t hd, int64_t nd, int R, int rows, Geometry& g) {
  int64_t best = -1;
  int best_over = 0, best_window = 0;
  g.bw = 0;
  for (int bw = 1; bw <= rows; bw *= 2) {
    for (int bh = 1; bw * bh <= rows; bh *= 2) {
      const int bn = rows / (bw * bh);
      const int64_t tiles = ((wd + bw - 1) / bw) * ((hd + bh - 1) / bh) * ((nd + bn - 1) / bn);
      const int over = (bw > wd) + (bh > hd) + (bn > nd);
      const int window = (bw + R - 1) * (bh + R - 1) * bn;
      const bool better =
          best < 0 || tiles < best ||
          (tiles == best && (over < best_over ||
                             (over == best_over && (window < best_window ||
                                                    (window == best_window && bw > g.bw)))));
      if (better) {
        best = tiles;
        best_over = over;
        best_window = window;
        g.bw = bw;
        g.bh = bh;
        g.bn = bn;
        g.tw = static_cast<int>((wd + bw - 1) / bw);
        g.th = static_cast<int>((hd + bh - 1) / bh);
        g.tn = static_cast<int>((nd + bn - 1) / bn);
      }
    }
  }
  // A chunk of 64 consecutive rows of the box is itself a box (all extents are powers of two).
  if (g.bw >= 64) {
    g.cw = 64, g.ch = 1, g.cn = 1;
  } else if (g.bw * g.bh >= 64) {
    g.cw = g.bw, g.ch = 64 / g.bw, g.cn = 1;
  } else {
    g.cw = g.bw, g.ch = g.bh, g.cn = 64 / (g.bw * g.bh);
  }
  return best;
}

cudaError_t device_sms(int* sms) {
  static int cached_device = -1, cached_sms = 0;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != cached_device) {
    err = cudaDeviceGetAttribute(&cached_sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    cached_device = device;
  }
  *sms = cached_sms;
  return cudaSuccess;
}

template <int BM, int BN>
cudaError_t launch(const CUtensorMap& mx, const CUtensorMap& mw, const CUtensorMap& my,
                   const Geometry& g, int sms, cudaStream_t stream) {
  static int configured_device = -1;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != configured_device) {
    err = cudaFuncSetAttribute(conv2d_wgmma<BM, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               Config<BM, BN>::kSmemBytes);
    if (err != cudaSuccess) return err;
    configured_device = device;
  }
  const int64_t tiles = static_cast<int64_t>(g.tw) * g.th * g.tn * ((g.K + BN - 1) / BN);
  const int grid = static_cast<int>(tiles < sms ? tiles : sms);
  conv2d_wgmma<BM, BN><<<grid, kThreads, Config<BM, BN>::kSmemBytes, stream>>>(mx, mw, my, g);
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_conv2d(const __nv_bfloat16* x, const __nv_bfloat16* wt, __nv_bfloat16* y,
                          int64_t batch, int64_t H, int64_t W, int64_t C, int64_t K, int64_t R,
                          cudaStream_t stream) {
  if (batch <= 0 || H <= 0 || W <= 0 || C <= 0 || K <= 0) return 0;
  if ((R != 1 && R != 3) || C % kBK != 0 || K % 64 != 0) return static_cast<int>(cudaErrorInvalidValue);
  // A 1x1 layer has no window: all pixels form one image of width batch*H*W (the GEMM's M).
  const int64_t wd = R == 1 ? batch * H * W : W;
  const int64_t hd = R == 1 ? 1 : H;
  const int64_t nd = R == 1 ? 1 : batch;
  if (wd > 0x7fffffff || K > 0x7fffffff || R * R * C > 0x7fffffff) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  int sms = 0;
  cudaError_t err = device_sms(&sms);
  if (err != cudaSuccess) return static_cast<int>(err);

  // The CTA tile: the candidate with the least work in whole waves, a 128 x 128 tile counted as
  // 0.8 as efficient as the two 32 Ki-output tiles (it moves a third more bytes per MMA).
  const int cand[3][2] = {{128, 256}, {256, 128}, {128, 128}};
  int bm = 0, bn_cols = 0;
  double best_cost = 0;
  Geometry g{};
  for (const auto& c : cand) {
    if (c[1] == 256 && K % 256 != 0) continue;  // no half-empty 256-column tiles
    Geometry t{};
    const int64_t tiles = pick_box(wd, hd, nd, static_cast<int>(R), c[0], t) * ((K + c[1] - 1) / c[1]);
    if (tiles > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
    const double waves = static_cast<double>((tiles + sms - 1) / sms);
    const double cost = waves * c[0] * c[1] / (c[0] * c[1] == 128 * 128 ? 0.8 : 1.0);
    if (bm == 0 || cost < best_cost) {
      bm = c[0];
      bn_cols = c[1];
      best_cost = cost;
      g = t;
    }
  }
  g.R = static_cast<int>(R);
  g.pad = static_cast<int>(R / 2);
  g.c_chunks = static_cast<int>(C / kBK);
  g.num_k = static_cast<int>(R * R * C / kBK);
  g.K = static_cast<int>(K);

  const EncodeTiledFn enc = encode_fn();
  if (enc == nullptr) return static_cast<int>(cudaErrorNotSupported);
  CUtensorMap mx, mw, my;
  const int64_t xdims[4] = {C, wd, hd, nd};
  const uint32_t xbox[4] = {kBK, static_cast<uint32_t>(g.bw), static_cast<uint32_t>(g.bh),
                            static_cast<uint32_t>(g.bn)};
  const int64_t wdims[2] = {R * R * C, K};
  const uint32_t wbox[2] = {kBK, static_cast<uint32_t>(bn_cols)};
  const int64_t ydims[4] = {K, wd, hd, nd};
  const uint32_t ybox[4] = {64, static_cast<uint32_t>(g.cw), static_cast<uint32_t>(g.ch),
                            static_cast<uint32_t>(g.cn)};  // one 64-row chunk
  if (!make_map(&mx, enc, x, 4, xdims, xbox) || !make_map(&mw, enc, wt, 2, wdims, wbox) ||
      !make_map(&my, enc, y, 4, ydims, ybox)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (bm == 128 && bn_cols == 256) err = launch<128, 256>(mx, mw, my, g, sms, stream);
  else if (bm == 256) err = launch<256, 128>(mx, mw, my, g, sms, stream);
  else err = launch<128, 128>(mx, mw, my, g, sms, stream);
  return static_cast<int>(err);
}
