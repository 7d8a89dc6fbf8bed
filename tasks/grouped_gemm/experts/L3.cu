// grouped_gemm expert, layer 3 (Hopper machinery): one persistent, warp-specialized kernel over the
// tiles of all groups (one CTA per SM). Each CTA first builds a table of the groups' 128-row tile
// counts (a shuffle scan of the offsets) in shared memory; tile t maps to (group, row tile, column
// tile) by a binary search. A producer warpgroup TMA-loads 128x64 X / 256x64 W_g tiles (128B
// swizzle; X as T x K and W as (G*N) x K: two tensor maps serve every group) into a 4-stage
// mbarrier ring; two consumer warpgroups run wgmma m64n256k16 into fp32 registers; the epilogue
// TMA-stores bf16 Y for 64-row halves inside the group (N % 8 == 0), else masked direct stores; a
// half that lies wholly past its group's end skips its MMAs.
// sm_90a, K % 8 == 0, G <= 1024.
#include <cstdint>
#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes from the runtime's entry point
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kBM = 128;                    // C tile rows per CTA (two consumer warpgroups x 64)
constexpr int kBN = 256;                    // C tile columns per CTA (one wgmma n256 per warpgroup)
constexpr int kBK = 64;                     // k per stage: 64 bf16 = 128 bytes = one swizzle row
constexpr int kStages = 4;                  // shared-memory ring depth (4 x 48 KiB)
constexpr int kEpiCols = 64;                // Y columns staged per epilogue pass (4 passes of 256)
constexpr int kMaxGroups = 1024;            // the statement's bound on G (the tile table's size)
constexpr int kThreads = 384;               // warpgroup 0 produces, warpgroups 1 and 2 consume
constexpr uint32_t kABytes = kBM * kBK * 2;            // 16 KiB
constexpr uint32_t kBBytes = kBN * kBK * 2;            // 32 KiB
constexpr uint32_t kStageBytes = kABytes + kBBytes;    // 48 KiB, a multiple of 1024
constexpr uint32_t kEpiBytes = 64 * kEpiCols * 2;      // per consumer: 64 rows x kEpiCols bf16
constexpr uint32_t kTableBytes = kMaxGroups * 4;        // per group: its tiles' running total
constexpr int kSmemBytes =
    kStages * kStageBytes + 2 * kEpiBytes + kTableBytes + 1024;  // + slack to align to 1 KiB

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int kGroupM = 16;  // tile rows per rasterization band

// One tile of the persistent schedule: group g, its first X/Y row, the group's end row and the
// first column.
struct Tile {
  int group, m0, m_end, n0;
};

// Tile index -> Tile. Tile rows are the concatenated groups' 128-row tiles (table[g] = tile rows of
// groups 0..g, in shared memory); bands of kGroupM tile rows, column-major inside a band, so the
// CTAs running at the same time share X rows and W_g rows in L2 (the tile rows of one band belong
// to one or a few neighbouring groups).
__device__ __forceinline__ Tile tile_at(int tile, int tiles_m, int tiles_n, const int* table, int G,
                                        const int* __restrict__ offsets) {
  const int band_tiles = kGroupM * tiles_n;
  const int band = tile / band_tiles;
  const int first_m = band * kGroupM;
  const int rows = min(tiles_m - first_m, kGroupM);
  const int in_band = tile - band * band_tiles;
  const int mt = first_m + in_band % rows;
  int lo = 0, hi = G - 1;  // the first group with table[g] > mt
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (table[mid] > mt) hi = mid; else lo = mid + 1;
  }
  const int before = lo > 0 ? table[lo - 1] : 0;
  Tile t;
  t.group = lo;
  t.m0 = __ldg(offsets + lo) + (mt - before) * kBM;
  t.m_end = __ldg(offsets + lo + 1);
  t.n0 = (in_band / rows) * kBN;
  return t;
}

// Warp 0 fills table[g] = the number of 128-row tiles of groups 0..g (a shuffle scan, 32 groups at
// a time) and returns the total in lane 0's *total.
__device__ __forceinline__ void build_table(const int* __restrict__ offsets, int G, int* table,
                                            int* total) {
  const int lane = threadIdx.x % 32;
  int before = 0;
  for (int g0 = 0; g0 < G; g0 += 32) {
    const int g = g0 + lane;
    const int tiles = g < G ? (__ldg(offsets + g + 1) - __ldg(offsets + g) + kBM - 1) / kBM : 0;
    int incl = tiles;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += v;
    }
    if (g < G) table[g] = before + incl;
    before += __shfl_sync(0xffffffffu, incl, 31);
  }
  if (lane == 0) *total = before;
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

// TMA store of a box from shared memory (128B-swizzled like the loads) to global memory at
// (c0 = column, c1 = row); parts of the box outside the matrix are not written.
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
__device__ __forceinline__ void fence_acc(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
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

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

__global__ void __launch_bounds__(kThreads, 1)
grouped_gemm_wgmma(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b,
                   const __grid_constant__ CUtensorMap tma_c, const int* __restrict__ offsets,
                   __nv_bfloat16* __restrict__ C, int G, int N, int K, int tma_store) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kStages];   // TMA -> consumers: stage filled
  __shared__ __align__(8) uint64_t empty_bar[kStages];  // consumers -> producer: stage free
  __shared__ int total_m_tiles;

  // The 128B swizzle pattern repeats every 1024 bytes: align the ring to 1024.
  const uint32_t ring = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  int* table = reinterpret_cast<int*>(smem_raw + (ring - smem_addr(smem_raw)) + kStages * kStageBytes +
                                      2 * kEpiBytes);
  if (tid < 32) build_table(offsets, G, table, &total_m_tiles);

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(smem_addr(&full_bar[s]), 1);   // the producer's arrive.expect_tx (+ the bytes)
      mbar_init(smem_addr(&empty_bar[s]), 2);  // one arrive per consumer warpgroup
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();  // the last block-wide barrier: warpgroups run independently from here

  const int tiles_m = total_m_tiles;
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
        const Tile t = tile_at(tile, tiles_m, tiles_n, table, G, offsets);
        for (int kt = 0; kt < num_k; ++kt) {
          // A fresh barrier counts as having completed the phase of parity 1: the first pass
          // over the ring does not wait.
          mbar_wait(smem_addr(&empty_bar[stage]), phase ^ 1u);
          const uint32_t full = smem_addr(&full_bar[stage]);
          mbar_arrive_expect_tx(full, kStageBytes);  // full boxes, zero-filled parts included
          const uint32_t sa = ring + stage * kStageBytes;
          // 128 X rows from the group's tile (rows past the group's end belong to the next group or
          // are zero-filled past T: computed, never stored) and 256 rows of W viewed as G*N x K.
          tma_load_2d(sa, &tma_a, full, kt * kBK, t.m0);
          tma_load_2d(sa + kABytes, &tma_b, full, kt * kBK, t.group * N + t.n0);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int consumer = wg - 1;       // which 64-row half of the C tile
    const int ltid = tid - wg * 128;   // 0..127 inside the warpgroup
    const int warp = ltid / 32;
    const int lane = ltid % 32;
    const bool even_n = (N % 2) == 0;
    int stage = 0;
    uint32_t phase = 0;
    float acc[128];

    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      const Tile t = tile_at(tile, tiles_m, tiles_n, table, G, offsets);
      const int n0 = t.n0;
      if (t.m0 + consumer * 64 >= t.m_end) {
        // The group ends in the tile's first half: this half would only compute rows of the next
        // group, which are never stored. Skip its MMAs (the tensor cores serve the other half
        // alone) but keep the ring's protocol: wait for each stage, release it. The warpgroup
        // barrier keeps every thread's view of the stage's phase in step before the release (no
        // wgmma synchronises the warps here): a thread still waiting for this fill after the
        // producer refilled the stage would see the parity flip back and wait forever.
        for (int kt = 0; kt < num_k; ++kt) {
          mbar_wait(smem_addr(&full_bar[stage]), phase);
          warpgroup_bar(1 + consumer);
          if (ltid == 0) mbar_arrive(smem_addr(&empty_bar[stage]));
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
        continue;
      }
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = 0.0f;

      int prev_stage = -1;
      for (int kt = 0; kt < num_k; ++kt) {
        mbar_wait(smem_addr(&full_bar[stage]), phase);
        const uint32_t sa = ring + stage * kStageBytes + consumer * (64 * 128);  // this half's rows
        const uint32_t sb = ring + stage * kStageBytes + kABytes;
        const uint64_t da = smem_desc(sa);
        const uint64_t db = smem_desc(sb);
        fence_acc(acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
          // Advancing 16 bf16 = 32 bytes along K inside the swizzled rows: +2 in the address field.
          wgmma_m64n256k16(acc, da + 2 * kk, db + 2 * kk);
        }
        wgmma_commit();
        fence_acc(acc);
        // Keep this k-step's MMAs in flight; the previous step's are done, so its stage is free.
        wgmma_wait<1>();
        fence_acc(acc);
        if (prev_stage >= 0 && ltid == 0) mbar_arrive(smem_addr(&empty_bar[prev_stage]));
        prev_stage = stage;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1u;
        }
      }
      wgmma_wait<0>();
      fence_acc(acc);
      if (ltid == 0) mbar_arrive(smem_addr(&empty_bar[prev_stage]));  // num_k >= 1

      // Epilogue (the producer already fills the ring for the next tile). Accumulator layout of
      // m64nNk16: warp w owns rows 16w..16w+15; acc[4j + 2h + c] is row lane/4 + 8h, column
      // 8j + 2*(lane%4) + c. This consumer's 64 rows start at r0; only rows before the group's end
      // are written (the rest belong to the next group).
      const int r0 = t.m0 + consumer * 64;  // < t.m_end (checked before the main loop)
      if (tma_store && r0 + 64 <= t.m_end) {
        // Stage 64 x kEpiCols of bf16 Y in shared memory as 64-column boxes of 64 rows x 128 B,
        // 128B-swizzled (16-byte chunk q of row r at chunk q ^ (r % 8): the 8 rows a warp writes
        // per store land in 8 different bank groups), then one thread stores them with TMA.
        const uint32_t cbuf = ring + kStages * kStageBytes + consumer * kEpiBytes;
#pragma unroll
        for (int pass = 0; pass < 256 / kEpiCols; ++pass) {
          if (n0 + pass * kEpiCols >= N) break;  // no columns left (uniform in the warpgroup)
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
              const __nv_bfloat162 v = __floats2bfloat162_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
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
              tma_store_2d(&tma_c, cbuf + b * (64 * 128), n0 + pass * kEpiCols + 64 * b, r0);
            }
            bulk_commit();
          }
        }
      } else {
        // A half that ends inside the group's last rows, or N % 8 != 0 (Y rows not 16-byte
        // aligned, TMA cannot store them): write from registers, masked.
        const int row0 = r0 + warp * 16 + lane / 4;
        const int col0 = n0 + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          const int col = col0 + 8 * j;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = row0 + 8 * h;
            if (row < t.m_end && col < N) {
              const float v0 = acc[4 * j + 2 * h];
              const float v1 = acc[4 * j + 2 * h + 1];
              __nv_bfloat16* p = C + static_cast<int64_t>(row) * N + col;
              if (even_n) {  // col even and N even: 4-byte aligned pair, col + 1 < N
                *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
              } else {
                p[0] = __float2bfloat16_rn(v0);
                if (col + 1 < N) p[1] = __float2bfloat16_rn(v1);
              }
            }
          }
        }
      }
    }
    if (tma_store && ltid == 0) bulk_wait_all();  // stores complete before the CTA retires
  }
#else
  // Built without sm_90a features (no wgmma): this image must never run.
  (void)tma_a; (void)tma_b; (void)tma_c; (void)offsets; (void)C; (void)G; (void)N; (void)K;
  (void)tma_store;
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

// A 2-D row-major bf16 matrix of `rows` x `k` (k contiguous) as a TMA tensor map with boxes of
// 64 (k) x box_rows, 128-byte swizzled in shared memory, zero fill outside the matrix.
bool make_tensor_map(CUtensorMap* map, EncodeTiledFn enc, const void* base, int64_t rows, int64_t k,
                     uint32_t box_rows) {  // k: the contiguous dimension (K for A and B, N for C)
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};  // bytes, multiple of 16
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
             elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
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
    err = cudaFuncSetAttribute(grouped_gemm_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kSmemBytes);
    if (err != cudaSuccess) return err;
    info.device = device;
  }
  *sms = info.sms;
  return cudaSuccess;
}

}  // namespace

extern "C" int d2k_grouped_gemm(const __nv_bfloat16* X, const __nv_bfloat16* W, const int* offsets,
                                __nv_bfloat16* Y, int64_t T, int64_t G, int64_t N, int64_t K,
                                cudaStream_t stream) {
  if (T <= 0 || G <= 0 || N <= 0 || K <= 0) return 0;
  if (K % 8 != 0 || G > kMaxGroups || T > 0x7fffffff || K > 0x7fffffff || G * N > 0x7fffffff) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  int sms = 0;
  cudaError_t err = prepare(&sms);
  if (err != cudaSuccess) return static_cast<int>(err);
  const EncodeTiledFn enc = encode_fn();
  if (enc == nullptr) return static_cast<int>(cudaErrorNotSupported);
  CUtensorMap map_a, map_b, map_c;
  // X as T x K, W as one (G*N) x K matrix: a tile's group picks its rows, so two maps serve all
  // groups (no per-group descriptors to build or fetch).
  if (!make_tensor_map(&map_a, enc, X, T, K, kBM) || !make_tensor_map(&map_b, enc, W, G * N, K, kBN)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  // Y through TMA stores when its rows are 16-byte aligned (N % 8 == 0); 64 x 64 boxes.
  int tma_store = N % 8 == 0 ? 1 : 0;
  if (tma_store && !make_tensor_map(&map_c, enc, Y, T, N, 64)) tma_store = 0;
  if (!tma_store) map_c = map_a;  // unused
  // The tile count is only known on the device (the offsets): at most one tile row per group
  // more than T / 128. A persistent grid of one CTA per SM (fewer if there cannot be enough tiles).
  const int64_t max_tiles = ((T + kBM - 1) / kBM + G) * ((N + kBN - 1) / kBN);
  const int grid = static_cast<int>(max_tiles < sms ? max_tiles : sms);
  grouped_gemm_wgmma<<<grid, kThreads, kSmemBytes, stream>>>(
      map_a, map_b, map_c, offsets, Y, static_cast<int>(G), static_cast<int>(N), static_cast<int>(K),
      tma_store);
  return static_cast<int>(cudaGetLastError());
}
