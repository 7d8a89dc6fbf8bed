// flash_attention_fwd expert, layer 3 (low level): FlashAttention-3 style forward kernel for Hopper
// (sm_90a). On the H200 (bench/flash_attention, 2026-12-01): 608 TFLOP/s at b4 h32 s4096 d128
// (88% of PyTorch SDPA), 287-501 TFLOP/s on the other workloads (77-87% of SDPA).
//
// One CTA of 384 threads per (128-query tile, batch*head); the query tiles of one head are
// consecutive CTAs (so a head's K/V is read from DRAM about once and then hits L2), heaviest causal
// tiles first. Warpgroup 0 is the producer: one thread TMA-loads the Q tile once and streams
// 128-key K and V tiles through a shared-memory ring (separate full/empty mbarriers for K and V,
// 3-D tensor maps [bh][seq][d] so rows past seq are zero-filled and never cross into the next head,
// 128-byte swizzle, boxes of 64 columns x 128 rows). Warpgroups 1 and 2 are consumers, 64 query rows
// each: S = Q K^T with wgmma m64n128k16 (Q and K from shared memory, both K-major), online softmax
// in registers (log2 domain, one FFMA + MUFU.EX2 per score), P rounded to bf16 in registers and fed
// as the register A operand of O += P V (wgmma m64nDk16, V from shared memory MN-major: transposed
// B). Intra-warpgroup overlap as in FA3: the S GEMM of tile t and the P V GEMM of tile t-1 are in
// flight together, the softmax of tile t runs while P V of tile t-1 finishes. Causal: tiles past
// the diagonal are never loaded; only the diagonal tile (and a partial last tile) is masked.
// setmaxnreg gives the consumers 240 registers. head_dim 64 or 128 (template).
#include <cmath>
#include <cstdint>
#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes from the runtime's entry point
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#ifndef FA_STAGES128
#define FA_STAGES128 2  // K/V ring depth for head_dim 128 (2: 164 KiB of shared memory, 3: 225 KiB)
#endif
#ifndef FA_STAGES64
#define FA_STAGES64 3  // K/V ring depth for head_dim 64 (3: 113 KiB)
#endif
#ifndef FA_PRODUCER_REGS
#define FA_PRODUCER_REGS 24
#endif
#ifndef FA_CONSUMER_REGS
#define FA_CONSUMER_REGS 240
#endif
#ifndef FA_HEAD_MAJOR
#define FA_HEAD_MAJOR 1  // 1: the query tiles of a head are consecutive CTAs; 0: heads fastest
#endif

namespace {

constexpr int kBQ = 128;        // query rows per CTA: 2 consumer warpgroups x 64
constexpr int kBK = 128;        // keys per K/V tile (= n of the S GEMM)
constexpr int kThreads = 384;   // warpgroup 0 produces, 1 and 2 consume
constexpr uint32_t kBlockBytes = 128 * 128;  // 128 rows x 64 bf16 (128 bytes): one TMA box

template <int D>
struct Cfg {
  static constexpr int kStages = D == 128 ? FA_STAGES128 : FA_STAGES64;
  static constexpr int kColBlocks = D / 64;                        // 128-byte column blocks
  static constexpr uint32_t kTileBytes = kColBlocks * kBlockBytes;  // a Q, K or V tile of 128 rows
  static constexpr int kSmem = (1 + 2 * kStages) * kTileBytes + 1024;  // + slack to align to 1 KiB
};
static_assert(kBQ == kBK, "causal tile count assumes square tiles");
static_assert(Cfg<128>::kSmem <= 232448, "shared memory");
static_assert(Cfg<64>::kSmem <= 232448, "shared memory");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

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
// Returns once the phase with parity `parity` of the barrier has completed.
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
// TMA: the box at (c0 = column, c1 = row, c2 = batch*head) of a 3-D map into shared memory at dst;
// completion is counted on the mbarrier in bytes (zero-filled out-of-bounds rows included).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// wgmma shared-memory descriptor of a K-major operand written by TMA with 128B swizzle: 128-byte
// rows, 8-row atoms of 1024 bytes stacked along M/N (stride byte offset 1024), leading byte offset
// unused (1), layout type 1 = 128B swizzle. Advancing k by 16 bf16 inside a row: +32 bytes.
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}
// Descriptor of the V tile as the MN-major ("transposed") B operand of P V: rows are keys (k),
// 64 d-values (n) per 128-byte row. Canonical MN-major SW128 layout in 16-byte units:
// ((8,n),(8,k)) : ((1,LBO),(8,SBO)): LBO = bytes between 64-column blocks (one TMA box, 128 rows
// x 128 B = 16 KiB), SBO = bytes between 8-key groups (1024). A k16 step advances 16 rows = 2048 B.
__device__ __forceinline__ uint64_t desc_mnmajor(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(kBlockBytes >> 4) << 16) |
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
// Keep the compiler from moving register reads/writes across the asynchronous MMAs.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void fence_regs(uint32_t (&p)[8][4]) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(p[i][j])::"memory");
}

// ---- generated by gen_wgmma.py ----
// S (+)= A * B^T: m64n128k16, A and B K-major bf16 in shared memory (descriptors da, db),
// fp32 accumulators; kScaleD = 0 overwrites d (d = A*B), 1 accumulates.
template <int kScaleD>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "n"(kScaleD));
}

// O += P * V: m64n128k16, A (P) from registers in the mma.m16n8k16 A layout per warp, B (V)
// MN-major ('transposed', imm-trans-b = 1) bf16 in shared memory; always accumulates.
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}

// O += P * V: m64n64k16, A (P) from registers in the mma.m16n8k16 A layout per warp, B (V)
// MN-major ('transposed', imm-trans-b = 1) bf16 in shared memory; always accumulates.
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}
// ---- end of generated code ----

// 2^x on the MUFU unit (ex2.approx.ftz: 2^-inf = +0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lower column
  return *reinterpret_cast<const uint32_t*>(&h);
}

// S = Q K^T for this warpgroup's 64 rows and the 128 keys of one K stage. Q and K tiles are
// kColBlocks blocks of [128 rows][128 bytes]; k-step kk is block kk / 4, byte offset 32 (kk % 4).
template <int D>
__device__ __forceinline__ void issue_qk(float (&s)[64], uint32_t sq, uint32_t sk) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t off = (kk / 4) * kBlockBytes + (kk % 4) * 32;
    if (kk == 0) {
      wgmma_ss_n128<0>(s, desc_kmajor(sq + off), desc_kmajor(sk + off));
    } else {
      wgmma_ss_n128<1>(s, desc_kmajor(sq + off), desc_kmajor(sk + off));
    }
  }
}

// O += P V for one V stage: 8 k-steps of 16 keys, P[kk] is the A fragment of keys 16kk..16kk+15.
template <int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const uint32_t (&p)[8][4], uint32_t sv) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    if constexpr (D == 128) {
      wgmma_rs_n128(o, p[kk], desc_mnmajor(sv + kk * 2048));
    } else {
      wgmma_rs_n64(o, p[kk], desc_mnmajor(sv + kk * 2048));
    }
  }
}

// Masks (kMask), updates the running maxima m0/m1 (raw scores of rows g and g + 8) and turns s
// into p = exp2(s * c - m * c) in place. Returns the rescale factors of the old O in alpha0/alpha1
// and updates this thread's part of the running row sums: l = l * alpha + sum(p).
// Accumulator layout (m64nNk16): s[4j + 2h + e] is row 16 warp + g + 8h, column 8j + 2 t4 + e.
template <bool kMask>
__device__ __forceinline__ void softmax_tile(float (&s)[64], int kv0, int seq,
                                             int causal, int row0, int t4, float c, float& m0,
                                             float& m1, float& alpha0, float& alpha1, float& l0,
                                             float& l1) {
  if (kMask) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kv0 + 8 * j + 2 * t4 + (e & 1);
        const int row = row0 + 8 * (e >> 1);
        if (key >= seq || (causal && key > row)) s[4 * j + e] = -INFINITY;
      }
    }
  }
  float mx0 = m0, mx1 = m1;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    mx0 = fmaxf(mx0, fmaxf(s[4 * j], s[4 * j + 1]));
    mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  // Key 0 is allowed for every row, so the maxima are finite from the first tile on; guard anyway.
  const float ms0 = (mx0 == -INFINITY ? 0.0f : mx0) * c;
  const float ms1 = (mx1 == -INFINITY ? 0.0f : mx1) * c;
  alpha0 = fast_exp2(m0 * c - ms0);  // 0 on the first tile (m = -inf)
  alpha1 = fast_exp2(m1 * c - ms1);
  m0 = mx0;
  m1 = mx1;
  float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    s[4 * j] = fast_exp2(fmaf(s[4 * j], c, -ms0));
    s[4 * j + 1] = fast_exp2(fmaf(s[4 * j + 1], c, -ms0));
    s[4 * j + 2] = fast_exp2(fmaf(s[4 * j + 2], c, -ms1));
    s[4 * j + 3] = fast_exp2(fmaf(s[4 * j + 3], c, -ms1));
    sum0 += s[4 * j] + s[4 * j + 1];
    sum1 += s[4 * j + 2] + s[4 * j + 3];
  }
  l0 = l0 * alpha0 + sum0;
  l1 = l1 * alpha1 + sum1;
}

// P (bf16 A fragments) from p: key step kk = S n-tiles 2kk (regs 0, 1) and 2kk + 1 (regs 2, 3).
__device__ __forceinline__ void make_p(uint32_t (&p)[8][4], const float (&s)[64]) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    p[kk][0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);  // row g,     keys 2t4, 2t4+1
    p[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);  // row g + 8, keys 2t4, 2t4+1
    p[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);  // row g,     keys 2t4+8, 2t4+9
    p[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);  // row g + 8, keys 2t4+8, 2t4+9
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <int D>
__global__ void __launch_bounds__(kThreads, 1)
fa3_fwd(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
        const __grid_constant__ CUtensorMap tm_v, __nv_bfloat16* __restrict__ o, int seq,
        int bh_count, int q_tiles, int causal, float scale_log2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kStages = Cfg<D>::kStages;
  constexpr uint32_t kTileBytes = Cfg<D>::kTileBytes;
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t q_full;
  __shared__ __align__(8) uint64_t k_full[kStages];   // TMA -> consumers: K stage filled
  __shared__ __align__(8) uint64_t v_full[kStages];   // TMA -> consumers: V stage filled
  __shared__ __align__(8) uint64_t k_empty[kStages];  // consumers -> producer: K stage free
  __shared__ __align__(8) uint64_t v_empty[kStages];  // consumers -> producer: V stage free

  // 128B swizzle repeats every 1024 bytes: align every tile to 1024.
  const uint32_t sq = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t sk = sq + kTileBytes;                 // K stage s at sk + s * kTileBytes
  const uint32_t sv = sq + (1 + kStages) * kTileBytes;  // V stage s at sv + s * kTileBytes
  const int tid = threadIdx.x;
  const int wg = tid / 128;

#if FA_HEAD_MAJOR
  const int bh = static_cast<int>(blockIdx.x / q_tiles);
  const int qt = q_tiles - 1 - static_cast<int>(blockIdx.x % q_tiles);
#else
  const int bh = static_cast<int>(blockIdx.x % bh_count);
  const int qt = q_tiles - 1 - static_cast<int>(blockIdx.x / bh_count);
#endif
  const int q0 = qt * kBQ;
  // Causal: kBQ == kBK, so key tile qt holds the diagonal and later tiles are fully masked.
  const int n_tiles = causal ? qt + 1 : (seq + kBK - 1) / kBK;

  if (tid == 0) {
    mbar_init(smem_addr(&q_full), 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(smem_addr(&k_full[s]), 1);   // the producer's arrive.expect_tx (+ the bytes)
      mbar_init(smem_addr(&v_full[s]), 1);
      mbar_init(smem_addr(&k_empty[s]), 2);  // one arrive per consumer warpgroup
      mbar_init(smem_addr(&v_empty[s]), 2);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();  // the last block-wide barrier: warpgroups run independently from here

  if (wg == 0) {
    // Producer warpgroup: one thread issues every copy.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(FA_PRODUCER_REGS));
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tm_q)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tm_k)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tm_v)) : "memory");
      mbar_arrive_expect_tx(smem_addr(&q_full), kTileBytes);
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb) {
        tma_load_3d(sq + cb * kBlockBytes, &tm_q, smem_addr(&q_full), cb * 64, q0, bh);
      }
      int stage = 0;
      uint32_t phase = 0;
      for (int t = 0; t < n_tiles; ++t) {
        // A fresh barrier counts as having completed the phase of parity 1: the first pass over
        // the ring does not wait.
        mbar_wait(smem_addr(&k_empty[stage]), phase ^ 1u);
        const uint32_t kf = smem_addr(&k_full[stage]);
        mbar_arrive_expect_tx(kf, kTileBytes);  // full boxes, zero-filled rows included
#pragma unroll
        for (int cb = 0; cb < D / 64; ++cb) {
          tma_load_3d(sk + stage * kTileBytes + cb * kBlockBytes, &tm_k, kf, cb * 64, t * kBK, bh);
        }
        mbar_wait(smem_addr(&v_empty[stage]), phase ^ 1u);
        const uint32_t vf = smem_addr(&v_full[stage]);
        mbar_arrive_expect_tx(vf, kTileBytes);
#pragma unroll
        for (int cb = 0; cb < D / 64; ++cb) {
          tma_load_3d(sv + stage * kTileBytes + cb * kBlockBytes, &tm_v, vf, cb * 64, t * kBK, bh);
        }
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(FA_CONSUMER_REGS));
    const int cw = wg - 1;            // which 64-row half of the query tile
    const int ltid = tid - wg * 128;  // 0..127 inside the warpgroup
    const int warp = ltid / 32, lane = ltid % 32;
    const int g = lane / 4, t4 = lane % 4;
    const int row0 = q0 + cw * 64 + warp * 16 + g;  // this thread's rows: row0 and row0 + 8
    const int wg_row_first = q0 + cw * 64;
    const uint32_t sq_wg = sq + cw * (64 * 128);   // this half's rows inside each Q column block
    const float c = scale_log2;

    float sacc[64];
    float oacc[D / 2];
    uint32_t p[8][4];
#pragma unroll
    for (int i = 0; i < 64; ++i) sacc[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < D / 2; ++i) oacc[i] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY;  // running maxima (raw scores) of rows row0, row0 + 8
    float l0 = 0.0f, l1 = 0.0f;            // this thread's part of the running sums

    mbar_wait(smem_addr(&q_full), 0);

    // Tile 0: S only.
    int stage = 0;
    uint32_t phase = 0;
    {
      mbar_wait(smem_addr(&k_full[0]), 0);
      fence_regs(sacc);
      wgmma_fence();
      issue_qk<D>(sacc, sq_wg, sk);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(sacc);
      if (ltid == 0) mbar_arrive(smem_addr(&k_empty[0]));
      const bool need_mask = kBK > seq || (causal && kBK - 1 > wg_row_first);
      float a0i, a1i;  // alpha of tile 0 is 0 (m was -inf, l and O are 0)
      if (need_mask) {
        softmax_tile<true>(sacc, 0, seq, causal, row0, t4, c, m0, m1, a0i, a1i, l0, l1);
      } else {
        softmax_tile<false>(sacc, 0, seq, causal, row0, t4, c, m0, m1, a0i, a1i, l0, l1);
      }
      make_p(p, sacc);
    }
    int pstage = 0;       // stage of the tile whose P is in p (its V is needed next)
    uint32_t pphase = 0;
    float a0 = 0.0f, a1 = 0.0f;  // rescale of O for the tile in p, applied before its P V
    // Iteration t: issue S_t = Q K_t^T; rescale O by alpha_{t-1} and issue O += P_{t-1} V_{t-1};
    // softmax of S_t while that runs; then p = P_t. Invariant at the top of iteration t: O holds
    // the P V sums of tiles < t - 1 relative to the running max of tile t - 2.
    for (int t = 1; t < n_tiles; ++t) {
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1u;
      }
      const int kv0 = t * kBK;
      mbar_wait(smem_addr(&k_full[stage]), phase);
      fence_regs(sacc);
      wgmma_fence();
      issue_qk<D>(sacc, sq_wg, sk + stage * kTileBytes);  // S of tile t
      wgmma_commit();
      // O *= alpha_{t-1} while the S GEMM runs (no P V in flight now), then O += P_{t-1} V_{t-1}.
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        oacc[4 * j] *= a0;
        oacc[4 * j + 1] *= a0;
        oacc[4 * j + 2] *= a1;
        oacc[4 * j + 3] *= a1;
      }
      mbar_wait(smem_addr(&v_full[pstage]), pphase);
      fence_regs(oacc);
      fence_regs(p);
      wgmma_fence();
      issue_pv<D>(oacc, p, sv + pstage * kTileBytes);
      wgmma_commit();
      wgmma_wait<1>();  // S of tile t is done; P V may still run
      fence_regs(sacc);
      if (ltid == 0) mbar_arrive(smem_addr(&k_empty[stage]));
      const bool need_mask = kv0 + kBK > seq || (causal && kv0 + kBK - 1 > wg_row_first);
      // The whole softmax sits in one of two branches (masked or not): the basic-block boundary
      // keeps ptxas from scheduling the wait below ahead of the exp2s (it does so within a block,
      // which serializes the softmax behind the P V GEMM).
      if (need_mask) {
        softmax_tile<true>(sacc, kv0, seq, causal, row0, t4, c, m0, m1, a0, a1, l0, l1);
      } else {
        softmax_tile<false>(sacc, kv0, seq, causal, row0, t4, c, m0, m1, a0, a1, l0, l1);
      }
      fence_regs(sacc);
      wgmma_wait<0>();  // P V of tile t - 1 is done: p may be rewritten, V stage released
      fence_regs(oacc);
      fence_regs(p);
      if (ltid == 0) mbar_arrive(smem_addr(&v_empty[pstage]));
      make_p(p, sacc);
      pstage = stage;
      pphase = phase;
    }
    // P V of the last tile.
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      oacc[4 * j] *= a0;
      oacc[4 * j + 1] *= a0;
      oacc[4 * j + 2] *= a1;
      oacc[4 * j + 3] *= a1;
    }
    mbar_wait(smem_addr(&v_full[pstage]), pphase);
    fence_regs(oacc);
    fence_regs(p);
    wgmma_fence();
    issue_pv<D>(oacc, p, sv + pstage * kTileBytes);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(oacc);
    fence_regs(p);
    // (No v_empty arrive: the producer issues nothing after the last tile.)

    // Epilogue: O / l in bf16, rows < seq only. o[4j + 2h + e] is row row0 + 8h, column 8j+2t4+e.
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
    __nv_bfloat16* o0 = o + (static_cast<int64_t>(bh) * seq + row0) * D + 2 * t4;
    __nv_bfloat16* o1 = o0 + 8 * D;
    const bool ok0 = row0 < seq, ok1 = row0 + 8 < seq;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      if (ok0) {
        *reinterpret_cast<__nv_bfloat162*>(o0 + 8 * j) =
            __floats2bfloat162_rn(oacc[4 * j] * inv0, oacc[4 * j + 1] * inv0);
      }
      if (ok1) {
        *reinterpret_cast<__nv_bfloat162*>(o1 + 8 * j) =
            __floats2bfloat162_rn(oacc[4 * j + 2] * inv1, oacc[4 * j + 3] * inv1);
      }
    }
  }
#else
  // Built without sm_90a features (no wgmma, no setmaxnreg): this image must never run.
  (void)tm_q; (void)tm_k; (void)tm_v; (void)o; (void)seq; (void)bh_count; (void)q_tiles;
  (void)causal; (void)scale_log2;
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
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult qr = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                         &qr) == cudaSuccess &&
        qr == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<EncodeTiledFn>(ptr);
    }
  }
  return fn;
}

// [bh][seq][D] bf16 as a 3-D tensor map (D fastest) with boxes of 64 columns x 128 rows x 1 head,
// 128-byte swizzle in shared memory; rows >= seq of a head are zero-filled (never the next head).
bool make_map(CUtensorMap* map, EncodeTiledFn enc, const void* base, int64_t d, int64_t seq,
              int64_t bh) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(seq),
                              static_cast<cuuint64_t>(bh)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(d * 2), static_cast<cuuint64_t>(seq * d * 2)};
  const cuuint32_t box[3] = {64, 128, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box,
             elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int D>
cudaError_t launch(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                   __nv_bfloat16* o, int64_t bh, int64_t seq, int causal, cudaStream_t stream) {
  static int configured_device = -1;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (configured_device != device) {
    err = cudaFuncSetAttribute(fa3_fwd<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               Cfg<D>::kSmem);
    if (err != cudaSuccess) return err;
    configured_device = device;
  }
  const EncodeTiledFn enc = encode_fn();
  if (enc == nullptr) return cudaErrorNotSupported;
  CUtensorMap mq, mk, mv;
  if (!make_map(&mq, enc, q, D, seq, bh) || !make_map(&mk, enc, k, D, seq, bh) ||
      !make_map(&mv, enc, v, D, seq, bh)) {
    return cudaErrorInvalidValue;
  }
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  const int64_t q_tiles = (seq + kBQ - 1) / kBQ;
  fa3_fwd<D><<<static_cast<unsigned>(q_tiles * bh), kThreads, Cfg<D>::kSmem, stream>>>(
      mq, mk, mv, o, static_cast<int>(seq), static_cast<int>(bh), static_cast<int>(q_tiles), causal,
      scale_log2);
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_flash_attention_fwd(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                       const __nv_bfloat16* v, __nv_bfloat16* o, int64_t batch,
                                       int64_t heads, int64_t seq, int64_t head_dim, int causal,
                                       cudaStream_t stream) {
  if (head_dim != 64 && head_dim != 128) return static_cast<int>(cudaErrorInvalidValue);
  if (batch <= 0 || heads <= 0 || seq <= 0) return 0;
  const int64_t bh = batch * heads;
  if (seq > 0x7fffffff || bh > 0x7fffffff || (seq + kBQ - 1) / kBQ * bh > 0x7fffffff) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int c = causal ? 1 : 0;
  const cudaError_t err = head_dim == 64 ? launch<64>(q, k, v, o, bh, seq, c, stream)
                                         : launch<128>(q, k, v, o, bh, seq, c, stream);
  return static_cast<int>(err);
}
