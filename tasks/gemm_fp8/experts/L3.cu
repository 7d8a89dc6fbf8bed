// gemm_fp8 expert, layer 3 (low level): persistent, warp-specialized Hopper kernel (one CTA per SM)
// with a 256 x 128 C tile per CTA. A producer warpgroup TMA-loads 256x128-byte tiles of A and
// 128x128-byte tiles of B (128B swizzle) into a 4-stage mbarrier ring (4 x 48 KiB); two consumer
// warpgroups each own 128 rows as two m64 halves: per k-tile the 4 wgmma m64n128k32 e4m3 x e4m3 ->
// fp32 of half 0 run into a fresh partial accumulator, which is added to acc0 on the CUDA cores once
// they completed (promotion every 128 k: the tensor core's own fp8 accumulation keeps fewer bits
// than fp32), then the same for half 1 into acc1 (64 + 64 + 64 registers). Per k-tile the CTA loads
// 48 KiB for 256 x 128 x 128 multiply-adds (a 128 x 128 tile loads 32 KiB for half of that). The
// epilogue scales by scale_a * scale_b, rounds to bf16 and stages each 64-row half in shared
// memory: TMA stores when N % 8 == 0, otherwise each warp copies its 16 staged rows to C with
// coalesced 2-byte stores. sm_90a, K % 16 == 0.
#include <cstdint>
#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes from the runtime's entry point
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kBM = 256;                    // C tile rows per CTA (two consumer warpgroups x 128)
constexpr int kBN = 128;                    // C tile columns per CTA (one wgmma n128 per warpgroup)
constexpr int kBK = 128;                    // k per stage: 128 e4m3 = 128 bytes = one swizzle row
constexpr int kStages = 4;                  // shared-memory ring depth (4 x 48 KiB)
constexpr int kThreads = 384;               // warpgroup 0 produces, warpgroups 1 and 2 consume
constexpr uint32_t kABytes = kBM * kBK;                // 32 KiB
constexpr uint32_t kBBytes = kBN * kBK;                // 16 KiB
constexpr uint32_t kStageBytes = kABytes + kBBytes;    // 48 KiB, a multiple of 1024
constexpr uint32_t kEpiBytes = 64 * kBN * 2;           // per consumer: 64 rows x 128 bf16 (one half at a time)
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kEpiBytes + 1024;  // + slack to align to 1 KiB

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int kGroupM = 8;   // tile rows per rasterization band (2048 rows of C)

// Tile index -> (first row, first column) of its C tile: bands of kGroupM tile rows, column-major
// inside a band, so the CTAs running at the same time share A rows and B rows in L2.
__device__ __forceinline__ void tile_origin(int tile, int tiles_m, int tiles_n, int& m0, int& n0) {
  const int band_tiles = kGroupM * tiles_n;
  const int band = tile / band_tiles;
  const int first_m = band * kGroupM;
  const int rows = min(tiles_m - first_m, kGroupM);
  const int in_band = tile - band * band_tiles;
  m0 = (first_m + in_band % rows) * kBM;
  n0 = (in_band / rows) * kBN;
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

// TMA: copy the box at (c0 = k, c1 = row) of the tensor map into shared memory at dst; completion
// is reported to the mbarrier as transaction bytes. Out-of-bounds parts of the box are zero-filled.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// TMA store of a box from shared memory (128B-swizzled) to global memory at (c0 = column,
// c1 = row); parts of the box outside the matrix are not written.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, uint32_t src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1)
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
// leading byte offset unused for swizzled K-major (encoded 1), layout type 1 = 128B swizzle.
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
__device__ __forceinline__ void fence_acc(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// One m64n128k32 e4m3 x e4m3 -> fp32 warpgroup MMA, both operands K-major in shared memory
// (descriptors da, db): d = (accumulate ? d : 0) + A * B^T over 32 k. fp8 wgmma has no transpose
// options: both operands must be K-major, which is why B is given N x K.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t da, uint64_t db,
                                                      int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(accumulate));
}

// Writes one warpgroup's 64 x 128 half-tile acc (rows row0.., columns n0..) to C as bf16 of
// acc * scale. Accumulator layout of m64nNk32: warp w owns rows 16w..16w+15; acc[4j + 2h + c] is
// row lane/4 + 8h, column 8j + 2*(lane%4) + c. The half is staged in shared memory as two
// 64-column boxes of 64 rows x 128 B, 128B-swizzled (16-byte chunk q of row r at chunk q ^ (r % 8)),
// then stored by TMA (tma_store: N % 8 == 0) or copied row by row with coalesced 2-byte stores.
__device__ __forceinline__ void epilogue_half(const float (&acc)[64], uint32_t cbuf,
                                              const CUtensorMap* tma_c, __nv_bfloat16* C,
                                              float scale, int M, int N, int row0, int n0,
                                              int tma_store, int ltid) {
  const int warp = ltid / 32;
  const int lane = ltid % 32;
  const int bar_id = 1 + (threadIdx.x / 128 - 1);  // this consumer warpgroup's named barrier
  if (tma_store && ltid == 0) bulk_wait_read();  // earlier stores no longer read the buffer
  warpgroup_bar(bar_id);                          // earlier direct copies no longer read it
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const int cl = 8 * j + 2 * (lane % 4);  // column inside the tile
    const uint32_t box = cbuf + (cl / 64) * (64 * 128);
    const int chunk = (cl % 64) / 8;
    const int in_chunk = (cl % 8) * 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * 16 + lane / 4 + 8 * h;
      const __nv_bfloat162 v =
          __floats2bfloat162_rn(acc[4 * j + 2 * h] * scale, acc[4 * j + 2 * h + 1] * scale);
      const uint32_t addr = box + r * 128 + ((chunk ^ (r % 8)) * 16) + in_chunk;
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(*reinterpret_cast<const uint32_t*>(&v))
                   : "memory");
    }
  }
  if (tma_store) {
    // Make the generic-proxy writes visible to the TMA (async proxy), then hand over.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    warpgroup_bar(bar_id);
    if (ltid == 0) {
#pragma unroll
      for (int b = 0; b < kBN / 64; ++b) tma_store_2d(tma_c, cbuf + b * (64 * 128), n0 + 64 * b, row0);
      bulk_commit();
    }
  } else {
    // N % 8 != 0: rows of C are not 16-byte aligned (TMA cannot store them). Warp w copies rows
    // 16w..16w+15; lane l takes columns l, l + 32, l + 64, l + 96: each store instruction writes
    // 32 consecutive bf16 of one row.
    warpgroup_bar(bar_id);
    for (int rr = 0; rr < 16; ++rr) {
      const int r = warp * 16 + rr;
      const int row = row0 + r;
      if (row >= M) break;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int cl = lane + 32 * q;
        const int col = n0 + cl;
        const uint32_t addr =
            cbuf + (cl / 64) * (64 * 128) + r * 128 + ((((cl % 64) / 8) ^ (r % 8)) * 16) + (cl % 8) * 2;
        uint16_t bits;
        asm volatile("ld.shared.u16 %0, [%1];" : "=h"(bits) : "r"(addr) : "memory");
        if (col < N) reinterpret_cast<uint16_t*>(C)[static_cast<int64_t>(row) * N + col] = bits;
      }
    }
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

__global__ void __launch_bounds__(kThreads, 1)
gemm_fp8_wgmma(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b,
               const __grid_constant__ CUtensorMap tma_c, const float* __restrict__ scale_a,
               const float* __restrict__ scale_b, __nv_bfloat16* __restrict__ C, int M, int N, int K,
               int tma_store) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
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

  const int tiles_m = (M + kBM - 1) / kBM;
  const int tiles_n = (N + kBN - 1) / kBN;
  const int num_tiles = tiles_m * tiles_n;
  const int num_k = (K + kBK - 1) / kBK;

  if (wg == 0) {
    // Producer warpgroup: give registers to the consumers; one thread issues every copy.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tma_a)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tma_b)) : "memory");
      int stage = 0;
      uint32_t phase = 0;
      for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        int m0, n0;
        tile_origin(tile, tiles_m, tiles_n, m0, n0);
        for (int kt = 0; kt < num_k; ++kt) {
          // A fresh barrier counts as having completed the phase of parity 1: the first pass
          // over the ring does not wait.
          mbar_wait(smem_addr(&empty_bar[stage]), phase ^ 1u);
          const uint32_t full = smem_addr(&full_bar[stage]);
          mbar_arrive_expect_tx(full, kStageBytes);  // full boxes, zero-filled parts included
          const uint32_t sa = ring + stage * kStageBytes;
          tma_load_2d(sa, &tma_a, full, kt * kBK, m0);
          tma_load_2d(sa + kABytes, &tma_b, full, kt * kBK, n0);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int consumer = wg - 1;       // which 128-row half of the C tile
    const int ltid = tid - wg * 128;   // 0..127 inside the warpgroup
    const float scale = scale_a[0] * scale_b[0];
    int stage = 0;
    uint32_t phase = 0;
    float acc0[64];  // rows 0-63 of this warpgroup's 128 x 128 part of C, fp32, summed on the CUDA cores
    float acc1[64];  // rows 64-127
    float part[64];  // one k-tile's 64 x 128 x 128 product of one half, from the tensor cores

    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      int m0, n0;
      tile_origin(tile, tiles_m, tiles_n, m0, n0);
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        acc0[i] = 0.0f;
        acc1[i] = 0.0f;
      }

      for (int kt = 0; kt < num_k; ++kt) {
        mbar_wait(smem_addr(&full_bar[stage]), phase);
        const uint32_t sa = ring + stage * kStageBytes + consumer * (128 * 128);  // this half's rows
        const uint32_t sb = ring + stage * kStageBytes + kABytes;
        const uint64_t da0 = smem_desc(sa);              // rows 0-63 of this warpgroup
        const uint64_t da1 = smem_desc(sa + 64 * 128);   // rows 64-127
        const uint64_t db = smem_desc(sb);
        // Half 0: the k-tile's 4 MMAs into part (the first starts from zero), wait for them (the
        // other consumer warpgroup keeps the tensor cores busy meanwhile), promote into acc0.
        fence_acc(part);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 32; ++kk) {
          // Advancing 32 e4m3 = 32 bytes along K inside the swizzled rows: +2 in the address field.
          wgmma_m64n128k32_e4m3(part, da0 + 2 * kk, db + 2 * kk, kk > 0 ? 1 : 0);
        }
        wgmma_commit();
        fence_acc(part);
        wgmma_wait<0>();
        fence_acc(part);
#pragma unroll
        for (int i = 0; i < 64; ++i) acc0[i] += part[i];
        // Half 1, the same into acc1; then the stage is free.
        fence_acc(part);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 32; ++kk) {
          wgmma_m64n128k32_e4m3(part, da1 + 2 * kk, db + 2 * kk, kk > 0 ? 1 : 0);
        }
        wgmma_commit();
        fence_acc(part);
        wgmma_wait<0>();
        fence_acc(part);
        if (ltid == 0) mbar_arrive(smem_addr(&empty_bar[stage]));
#pragma unroll
        for (int i = 0; i < 64; ++i) acc1[i] += part[i];
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1u;
        }
      }

      // Epilogue (the producer already fills the ring for the next tile), one 64-row half at a
      // time through the same 16 KiB buffer.
      const uint32_t cbuf = ring + kStages * kStageBytes + consumer * kEpiBytes;
      epilogue_half(acc0, cbuf, &tma_c, C, scale, M, N, m0 + consumer * 128, n0, tma_store, ltid);
      epilogue_half(acc1, cbuf, &tma_c, C, scale, M, N, m0 + consumer * 128 + 64, n0, tma_store, ltid);
    }
    if (tma_store && ltid == 0) bulk_wait_all();  // stores complete before the CTA retires
  }
#else
  // Built without sm_90a features (no wgmma): this image must never run.
  (void)tma_a; (void)tma_b; (void)tma_c; (void)scale_a; (void)scale_b; (void)C; (void)M; (void)N;
  (void)K; (void)tma_store;
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

// A 2-D row-major matrix of `rows` x `cols` (cols contiguous, elem_bytes each) as a TMA tensor map
// with boxes of 128 bytes (the row of one swizzle atom) x box_rows, 128-byte swizzled in shared
// memory, zero fill outside the matrix.
bool make_tensor_map(CUtensorMap* map, EncodeTiledFn enc, CUtensorMapDataType type, int elem_bytes,
                     const void* base, int64_t rows, int64_t cols, uint32_t box_rows) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * elem_bytes};  // multiple of 16
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / elem_bytes), box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return enc(map, type, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

struct DeviceInfo {
  int device = -1;
  int sms = 0;
};

cudaError_t prepare(int* sms) {
  static DeviceInfo info;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != info.device) {
    err = cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    err = cudaFuncSetAttribute(gemm_fp8_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kSmemBytes);
    if (err != cudaSuccess) return err;
    info.device = device;
  }
  *sms = info.sms;
  return cudaSuccess;
}

}  // namespace

extern "C" int d2k_gemm_fp8(const void* A, const void* B, const float* scale_a,
                            const float* scale_b, __nv_bfloat16* C, int64_t M, int64_t N, int64_t K,
                            cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  if (K % 16 != 0 || M > 0x7fffffff || N > 0x7fffffff || K > 0x7fffffff) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  int sms = 0;
  cudaError_t err = prepare(&sms);
  if (err != cudaSuccess) return static_cast<int>(err);
  const EncodeTiledFn enc = encode_fn();
  if (enc == nullptr) return static_cast<int>(cudaErrorNotSupported);
  CUtensorMap map_a, map_b, map_c;
  if (!make_tensor_map(&map_a, enc, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, A, M, K, kBM) ||
      !make_tensor_map(&map_b, enc, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, B, N, K, kBN)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  // C through TMA stores when its rows are 16-byte aligned (N % 8 == 0); 64 x 64 boxes.
  int tma_store = N % 8 == 0 ? 1 : 0;
  if (tma_store && !make_tensor_map(&map_c, enc, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, C, M, N, 64)) {
    tma_store = 0;
  }
  if (!tma_store) map_c = map_a;  // unused
  const int64_t tiles = ((M + kBM - 1) / kBM) * ((N + kBN - 1) / kBN);
  const int grid = static_cast<int>(tiles < sms ? tiles : sms);
  gemm_fp8_wgmma<<<grid, kThreads, kSmemBytes, stream>>>(
      map_a, map_b, map_c, scale_a, scale_b, C, static_cast<int>(M), static_cast<int>(N),
      static_cast<int>(K), tma_store);
  return static_cast<int>(cudaGetLastError());
}
