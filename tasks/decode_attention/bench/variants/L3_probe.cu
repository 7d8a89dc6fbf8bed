// decode_attention L3: balanced splits over the flat page list, TMA page loads into per-warp
// mbarrier rings fed by a producer warp, tensor-core scores and P.V (mma.sync m16n8k16), combine.
//
// Work: the Hkv * nnz (kv head, page) items in flat order (kv head major, then the page list, so a
// sequence's pages are consecutive) are cut into W equal streams, W = 4 consumer warps x 2 blocks
// x SMs: every consumer warp gets the same number of pages whatever the lengths. A stream crosses
// sequence boundaries; each (sequence, kv head) segment it touches gets one partial (max, sum, 128
// unnormalised accumulators per query head) in slot (stream + kv_head * B + sequence), which is
// unique because both terms grow along the flat order. The combine kernel finds a (sequence, kv
// head)'s streams from the same arithmetic and merges its partials.
// Block: warp 0 produces (lane c serves consumer c: waits for a free stage, TMA-loads the page's K
// and V, 4 boxes of 16 rows x 64 dims, 128-byte swizzled, onto the stage's mbarrier; page ids are
// read 4 items ahead), warps 1..4 consume. A consumer keeps Q (G heads padded to 16 rows) as mma A fragments, and per page: S =
// Q K^T (16 mma, K through ldmatrix), masks the tail, online softmax in base 2 on the accumulator
// registers (the O rescale is skipped when no row maximum moved), P.V with P split into bf16 hi +
// lo parts (32 mma, V through ldmatrix.trans), so P keeps ~16 bits like an fp32 design.
#include <cmath>
#include <cstdint>
#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes from the runtime's entry point
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kD = 128;
constexpr int kPage = 16;
// Tuning knobs (bench/build_carry.sh builds variants with -D): consumer warps per block, ring
// stages per consumer, blocks per SM. Shared memory: consumers x stages x 8 KiB per block.
#ifndef D2K_CONSUMERS
#define D2K_CONSUMERS 4
#endif
#ifndef D2K_STAGES
#define D2K_STAGES 3
#endif
#ifndef D2K_BLOCKS_PER_SM
#define D2K_BLOCKS_PER_SM 2
#endif
constexpr int kConsumers = D2K_CONSUMERS;
constexpr int kThreads = 32 * (1 + kConsumers);
constexpr int kStages = D2K_STAGES;
constexpr int kBlocksPerSm = D2K_BLOCKS_PER_SM;
constexpr int kTileBytes = kPage * kD * 2;        // 4 KiB: one (page, kv head) of K or of V
constexpr int kStageBytes = 2 * kTileBytes;       // K then V
constexpr int kSmemBytes = kConsumers * kStages * kStageBytes + 1024;  // + alignment slack
constexpr int kMaxG = 16;

// The stream of flat item f: the largest s with s * F / W <= f.
__device__ __forceinline__ int64_t stream_of(int64_t f, int64_t F, int64_t W) { return ((f + 1) * W - 1) / F; }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
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
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
#ifdef PROBE_EVICT
__device__ __forceinline__ void tma_load_2d_hint(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                                 uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}
#endif
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// D += A (16x16 bf16, row) * B (16x8 bf16, col), fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}
constexpr int kPtrCap = 3072;  // page_ptr entries staged in shared memory (12 KiB)

// The sequence holding page-list position pf: the largest b >= lo with page_ptr[b] <= pf (given
// page_ptr[lo] <= pf; page_ptr[B] = nnz > pf), so empty sequences are skipped. The warp tests 32
// candidates per round: lo + 1..32 first (the next sequence is the usual answer: one round), and
// strides grow by 32 when all hold, then shrink back (a few rounds from lo = 0 at a stream's start).
__device__ __forceinline__ int find_sequence(const int* __restrict__ page_ptr, int B, int lo, int64_t pf, int lane) {
  int64_t st = 1;
  bool grow = true;
  while (true) {
    const int64_t idx = lo + (lane + 1) * st;
    const bool le = idx <= B && page_ptr[idx] <= pf;
    const unsigned m = __ballot_sync(0xffffffffu, le);  // a prefix of the lanes: page_ptr is sorted
    if (m == 0xffffffffu && grow) {
      lo += static_cast<int>(32 * st);
      st *= 32;
      continue;
    }
    grow = false;
    lo += static_cast<int>(__popc(m) * st);
    if (st == 1) return lo;
    st /= 32;
  }
}

// Shared-memory address of 16-byte chunk `chunk` (0..15) of row `row` (0..15) of a tile written by
// two TMA boxes of 64 dims (2 KiB each) with the 128-byte swizzle: chunk c of a 128-byte row r sits
// at c ^ (r % 8).
__device__ __forceinline__ uint32_t tile_addr(uint32_t tile, int row, int chunk) {
  return tile + (chunk >> 3) * 2048 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

#endif

__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
decode_kernel(const __grid_constant__ CUtensorMap tma_k, const __grid_constant__ CUtensorMap tma_v,
              const __nv_bfloat16* __restrict__ q, const int* __restrict__ page_ptr, const int* __restrict__ page_idx,
              const int* __restrict__ last_len, __nv_bfloat16* __restrict__ out, float2* __restrict__ part_ml,
              float* __restrict__ part_acc, int B, int Hq, int Hkv, float qscale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[kConsumers][kStages];
  __shared__ __align__(8) uint64_t empty_bar[kConsumers][kStages];
  const uint32_t ring0 = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int c = 0; c < kConsumers; ++c)
      for (int s = 0; s < kStages; ++s) {
        mbar_init(smem_addr(&full_bar[c][s]), 1);
        mbar_init(smem_addr(&empty_bar[c][s]), 1);
      }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
#ifdef PROBE_SPTR
  __shared__ int sptr[kPtrCap];
  const bool ptr_in_smem = B + 1 <= kPtrCap;
  if (ptr_in_smem)
    for (int i = threadIdx.x; i <= B; i += kThreads) sptr[i] = page_ptr[i];
  const int* pp = ptr_in_smem ? sptr : page_ptr;
#else
  const int* pp = page_ptr;
#endif
  __syncthreads();
#ifdef PROBE_PDL
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
#ifdef PROBE_EMPTY
  return;
#endif

  const int64_t nnz = pp[B];
  const int64_t F = static_cast<int64_t>(Hkv) * nnz;
  const int64_t W = static_cast<int64_t>(gridDim.x) * kConsumers;

  if (warp == 0) {  // producer: lane c feeds consumer c's ring (lanes wait independently)
    if (lane < kConsumers) {
      const int64_t stream = static_cast<int64_t>(blockIdx.x) * kConsumers + lane;
      const int64_t f0 = stream * F / W, f1 = (stream + 1) * F / W, n = f1 - f0;
      const uint32_t ring = ring0 + lane * kStages * kStageBytes;
      // The page ids of the next 4 items are loaded ahead (a register queue), so a page id's
      // latency is paid 4 items before its copy is issued.
      int64_t pf = n > 0 ? f0 % nnz : 0;  // page-list position of the next id to load, its kv head
      int fj = n > 0 ? static_cast<int>(f0 / nnz) : 0;
      int ids[4], heads[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        ids[i] = i < n ? page_idx[pf] : 0;
        heads[i] = fj;
        if (++pf == nnz) {
          pf = 0;
          ++fj;
        }
      }
      int s = 0;
      uint32_t phase = 0;
#ifdef PROBE_EVICT
      uint64_t policy;
      asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
      for (int64_t k = 0; k < n; ++k) {
        const int page = ids[0], j = heads[0];
#pragma unroll
        for (int i = 0; i < 3; ++i) {
          ids[i] = ids[i + 1];
          heads[i] = heads[i + 1];
        }
        ids[3] = k + 4 < n ? page_idx[pf] : 0;
        heads[3] = fj;
        if (++pf == nnz) {
          pf = 0;
          ++fj;
        }
        if (k >= kStages) mbar_wait(smem_addr(&empty_bar[lane][s]), phase ^ 1u);
        const uint32_t bar = smem_addr(&full_bar[lane][s]);
        mbar_arrive_expect_tx(bar, kStageBytes);
        const int row = (page * Hkv + j) * kPage;
        const uint32_t dst = ring + s * kStageBytes;
#ifdef PROBE_EVICT
        tma_load_2d_hint(dst, &tma_k, bar, 0, row, policy);
        tma_load_2d_hint(dst + 2048, &tma_k, bar, 64, row, policy);
        tma_load_2d_hint(dst + kTileBytes, &tma_v, bar, 0, row, policy);
        tma_load_2d_hint(dst + kTileBytes + 2048, &tma_v, bar, 64, row, policy);
#else
        tma_load_2d(dst, &tma_k, bar, 0, row);
        tma_load_2d(dst + 2048, &tma_k, bar, 64, row);
        tma_load_2d(dst + kTileBytes, &tma_v, bar, 0, row);
        tma_load_2d(dst + kTileBytes + 2048, &tma_v, bar, 64, row);
#endif
        if (++s == kStages) {
          s = 0;
          phase ^= 1u;
        }
      }
    }
    return;
  }

  // Consumer warp c.
  const int c = warp - 1;
  const int64_t stream = static_cast<int64_t>(blockIdx.x) * kConsumers + c;
  const int64_t f0 = stream * F / W, f1 = (stream + 1) * F / W;
  const uint32_t ring = ring0 + c * kStages * kStageBytes;
  const int G = Hq / Hkv;
  const int qr = lane / 4, qc = (lane % 4) * 2;  // fragment row (and row + 8) and column pair

  uint32_t qa[8][4];  // Q as A fragments, one per 16 dimensions
  float o[16][4];     // O accumulators: 16 n-tiles of 8 dimensions
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  int b = -1, j = -1, tail = kPage;
  int64_t seg_end = 0;  // page-list position where the segment's sequence ends
  bool seg_first = false, seg_last = false;  // this stream holds the segment's first / last page

  auto flush = [&]() {
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    if (seg_first && seg_last) {  // the whole segment is here: the output, no partial (combine skips it)
      __nv_bfloat16* ob = out + (static_cast<int64_t>(b) * Hq + static_cast<int64_t>(j) * G) * kD;
      const float i0 = 1.0f / l0, i1 = 1.0f / l1;
      if (qr < G) {
#pragma unroll
        for (int nt = 0; nt < 16; ++nt)
          *reinterpret_cast<__nv_bfloat162*>(ob + qr * kD + nt * 8 + qc) =
              __floats2bfloat162_rn(o[nt][0] * i0, o[nt][1] * i0);
      }
      if (qr + 8 < G) {
#pragma unroll
        for (int nt = 0; nt < 16; ++nt)
          *reinterpret_cast<__nv_bfloat162*>(ob + (qr + 8) * kD + nt * 8 + qc) =
              __floats2bfloat162_rn(o[nt][2] * i1, o[nt][3] * i1);
      }
      return;
    }
    const int64_t slot = stream + static_cast<int64_t>(j) * B + b;
    float2* ml = part_ml + slot * kMaxG;
    float* acc = part_acc + slot * kMaxG * kD;
    if (qr < G) {
      if (lane % 4 == 0) ml[qr] = make_float2(m0, l0);
#pragma unroll
      for (int nt = 0; nt < 16; ++nt)
        *reinterpret_cast<float2*>(acc + qr * kD + nt * 8 + qc) = make_float2(o[nt][0], o[nt][1]);
    }
    if (qr + 8 < G) {
      if (lane % 4 == 0) ml[qr + 8] = make_float2(m1, l1);
#pragma unroll
      for (int nt = 0; nt < 16; ++nt)
        *reinterpret_cast<float2*>(acc + (qr + 8) * kD + nt * 8 + qc) = make_float2(o[nt][2], o[nt][3]);
    }
  };

  int64_t pf = f0 < f1 ? f0 % nnz : 0;  // position in the page list, and the kv head
  int fj = f0 < f1 ? static_cast<int>(f0 / nnz) : 0;
  int s = 0;
  uint32_t phase = 0;
  for (int64_t k = 0; k < f1 - f0; ++k) {
#ifdef PROBE_NOSEG
    if (b < 0) {
#else
    if (fj != j || pf >= seg_end) {  // a new (sequence, kv head) segment
#endif
      if (b >= 0) flush();
      b = find_sequence(pp, B, fj == j ? b + 1 : 0, pf, lane);
      j = fj;
      tail = last_len[b];
      const int bounds = pp[b + (lane & 1)];  // lane 0: the sequence's start, lane 1: its end
      seg_first = __shfl_sync(0xffffffffu, bounds, 0) == pf;
      seg_end = __shfl_sync(0xffffffffu, bounds, 1);
      seg_last = false;
      if (b + 1 < B && lane < 2 * G)  // the next sequence's q rows into L2 for the next segment
#ifdef PROBE_SPTR
        prefetch_l1(q + ((static_cast<int64_t>(b) + 1) * Hq + static_cast<int64_t>(j) * G) * kD + lane * 64);
#else
        prefetch_l2(q + ((static_cast<int64_t>(b) + 1) * Hq + static_cast<int64_t>(j) * G) * kD + lane * 64);
#endif
      const __nv_bfloat16* qb = q + (static_cast<int64_t>(b) * Hq + static_cast<int64_t>(j) * G) * kD;
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
        const int col = ks * 16 + qc;
        qa[ks][0] = qr < G ? *reinterpret_cast<const uint32_t*>(qb + qr * kD + col) : 0u;
        qa[ks][1] = qr + 8 < G ? *reinterpret_cast<const uint32_t*>(qb + (qr + 8) * kD + col) : 0u;
        qa[ks][2] = qr < G ? *reinterpret_cast<const uint32_t*>(qb + qr * kD + col + 8) : 0u;
        qa[ks][3] = qr + 8 < G ? *reinterpret_cast<const uint32_t*>(qb + (qr + 8) * kD + col + 8) : 0u;
      }
#pragma unroll
      for (int nt = 0; nt < 16; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
      m0 = m1 = -INFINITY;
      l0 = l1 = 0.0f;
    }
    if (pf == seg_end - 1) seg_last = true;
    const int cnt = seg_last ? tail : kPage;
    mbar_wait(smem_addr(&full_bar[c][s]), phase);
    const uint32_t kt = ring + s * kStageBytes, vt = kt + kTileBytes;
#ifndef PROBE_NOCOMPUTE

    // S = Q K^T: n-tile 0 = tokens 0..7, n-tile 1 = tokens 8..15.
    float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const int mi = lane / 8, mr = lane % 8;
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      uint32_t kb[4];  // matrices: (tok 0-7, dims lo), (tok 0-7, dims hi), (tok 8-15, lo), (tok 8-15, hi)
      ldsm_x4(tile_addr(kt, (mi / 2) * 8 + mr, ks * 2 + (mi % 2)), kb);
      mma_bf16(sc[0], qa[ks], kb[0], kb[1]);
      mma_bf16(sc[1], qa[ks], kb[2], kb[3]);
    }
    // Online softmax (base 2). Lane holds rows qr (sc[.][0..1]) and qr + 8 (sc[.][2..3]).
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool ok = nt * 8 + qc + e < cnt;
        sc[nt][e] = ok ? sc[nt][e] * qscale : -INFINITY;
        sc[nt][2 + e] = ok ? sc[nt][2 + e] * qscale : -INFINITY;
        mx0 = fmaxf(mx0, sc[nt][e]);
        mx1 = fmaxf(mx1, sc[nt][2 + e]);
      }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    if (__any_sync(0xffffffffu, n0 != m0 || n1 != m1)) {
      const float c0 = exp2f(m0 - n0), c1 = exp2f(m1 - n1);
      l0 *= c0;
      l1 *= c1;
#pragma unroll
      for (int nt = 0; nt < 16; ++nt) {
        o[nt][0] *= c0;
        o[nt][1] *= c0;
        o[nt][2] *= c1;
        o[nt][3] *= c1;
      }
      m0 = n0;
      m1 = n1;
    }
    float p[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      p[nt][0] = exp2f(sc[nt][0] - m0);
      p[nt][1] = exp2f(sc[nt][1] - m0);
      p[nt][2] = exp2f(sc[nt][2] - m1);
      p[nt][3] = exp2f(sc[nt][3] - m1);
      l0 += p[nt][0] + p[nt][1];
      l1 += p[nt][2] + p[nt][3];
    }
    // P as A fragments (k = token), split into bf16 hi and lo = p - hi.
    uint32_t ph[4], pl[4];
    ph[0] = pack_bf16(p[0][0], p[0][1]);
    ph[1] = pack_bf16(p[0][2], p[0][3]);
    ph[2] = pack_bf16(p[1][0], p[1][1]);
    ph[3] = pack_bf16(p[1][2], p[1][3]);
    pl[0] = pack_bf16(p[0][0] - bf16_round(p[0][0]), p[0][1] - bf16_round(p[0][1]));
    pl[1] = pack_bf16(p[0][2] - bf16_round(p[0][2]), p[0][3] - bf16_round(p[0][3]));
    pl[2] = pack_bf16(p[1][0] - bf16_round(p[1][0]), p[1][1] - bf16_round(p[1][1]));
    pl[3] = pack_bf16(p[1][2] - bf16_round(p[1][2]), p[1][3] - bf16_round(p[1][3]));
    // O += P V. ldmatrix.trans matrices: (tok 0-7, dims n), (tok 8-15, dims n), (tok 0-7, n+8), (tok 8-15, n+8).
    // Slots past the sequence's end have p = 0, but 0 * NaN would still poison O: their values are zeroed.
#pragma unroll
    for (int np = 0; np < 8; ++np) {
      uint32_t vb[4];
      ldsm_x4_trans(tile_addr(vt, (mi % 2) * 8 + mr, np * 2 + (mi / 2)), vb);
      if (cnt < kPage) {  // tail page: zero the values of slots past the sequence's end
        // vb[i] holds, for this lane, tokens (i % 2) * 8 + qc + {0, 1} of dims column lane / 4.
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int t = (i % 2) * 8 + qc;
          if (t >= cnt) vb[i] = 0u;
          else if (t + 1 >= cnt) vb[i] &= 0x0000ffffu;
        }
      }
      mma_bf16(o[2 * np], ph, vb[0], vb[1]);
      mma_bf16(o[2 * np], pl, vb[0], vb[1]);
      mma_bf16(o[2 * np + 1], ph, vb[2], vb[3]);
      mma_bf16(o[2 * np + 1], pl, vb[2], vb[3]);
    }
#else
    (void)kt; (void)vt; (void)cnt;
#endif
    __syncwarp();
    if (lane == 0) mbar_arrive(smem_addr(&empty_bar[c][s]));
    if (++s == kStages) {
      s = 0;
      phase ^= 1u;
    }
    if (++pf == nnz) {
      pf = 0;
      ++fj;
    }
  }
  if (b >= 0) flush();
#else
  (void)q; (void)page_ptr; (void)page_idx; (void)last_len; (void)out; (void)part_ml; (void)part_acc; (void)B; (void)Hq;
  (void)Hkv; (void)qscale;
  __trap();
#endif
}

// A warp per (sequence, query head): the streams that hold the (sequence, kv head)'s pages, from
// the same arithmetic as the main kernel, and their partials merged at the common maximum.
__global__ void combine_kernel(const int* __restrict__ page_ptr, const float2* __restrict__ part_ml,
                               const float* __restrict__ part_acc, __nv_bfloat16* __restrict__ out, int B, int Hq,
                               int Hkv, int64_t W) {
#ifdef PROBE_PDL
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int w = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (w >= B * Hq) return;
  const int b = w / Hq, h = w % Hq, G = Hq / Hkv, j = h / G, g = h % G;
  const int64_t nnz = page_ptr[B];
  const int64_t first = page_ptr[b], n = page_ptr[b + 1] - first;
  __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(out + (static_cast<int64_t>(b) * Hq + h) * kD + lane * 4);
  if (n == 0) {
    o[0] = o[1] = __floats2bfloat162_rn(0.0f, 0.0f);
    return;
  }
  const int64_t F = static_cast<int64_t>(Hkv) * nnz;
  const int64_t fs = static_cast<int64_t>(j) * nnz + first;
  const int64_t s0 = stream_of(fs, F, W), s1 = stream_of(fs + n - 1, F, W);
  if (s0 == s1) return;  // one stream held the whole segment and wrote the output itself
  const int64_t base = static_cast<int64_t>(j) * B + b;
  // Streams left empty between s0 and s1 wrote nothing: skip them. With F >= W every stream has an item.
  auto empty = [&](int64_t s) { return F < W && (s + 1) * F / W == s * F / W; };
  float M = -INFINITY;
  for (int64_t s = s0 + lane; s <= s1; s += 32)
    if (!empty(s)) M = fmaxf(M, part_ml[(s + base) * kMaxG + g].x);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
  float total = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 8
  for (int64_t s = s0; s <= s1; ++s) {  // independent loads: 8 partials in flight
    if (empty(s)) continue;
    const int64_t slot = s + base;
    const float2 ml = part_ml[slot * kMaxG + g];
    const float wt = exp2f(ml.x - M);
    total += wt * ml.y;
    const float4 a = *reinterpret_cast<const float4*>(part_acc + (slot * kMaxG + g) * kD + lane * 4);
    acc[0] = fmaf(wt, a.x, acc[0]);
    acc[1] = fmaf(wt, a.y, acc[1]);
    acc[2] = fmaf(wt, a.z, acc[2]);
    acc[3] = fmaf(wt, a.w, acc[3]);
  }
  const float inv = 1.0f / total;
  o[0] = __floats2bfloat162_rn(acc[0] * inv, acc[1] * inv);
  o[1] = __floats2bfloat162_rn(acc[2] * inv, acc[3] * inv);
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_fn() {
  static EncodeTiledFn fn = nullptr;
  if (fn == nullptr) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult qr = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &qr) ==
            cudaSuccess &&
        qr == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiledFn>(p);
  }
  return fn;
}

// The cache as a 2-D bf16 matrix of (num_pages * Hkv * 16) token rows x 128 dims, boxes of 64 dims x
// 16 rows (one page's half), 128-byte swizzled in shared memory.
bool make_cache_map(CUtensorMap* map, EncodeTiledFn enc, const void* base, int64_t rows) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(kD), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(kD) * 2};
  const cuuint32_t box[2] = {64, kPage};
  const cuuint32_t elem_strides[2] = {1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
};

cudaError_t ensure_scratch(Scratch& s, size_t bytes) {
  if (s.bytes >= bytes) return cudaSuccess;
  if (s.ptr != nullptr) cudaFree(s.ptr);
  s.ptr = nullptr;
  s.bytes = 0;
  const cudaError_t err = cudaMalloc(&s.ptr, bytes);
  if (err == cudaSuccess) s.bytes = bytes;
  return err;
}

struct DeviceInfo {
  int device = -1;
  int sms = 0;
};

}  // namespace

extern "C" int d2k_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                    const __nv_bfloat16* v_cache, const int* page_ptr, const int* page_idx,
                                    const int* last_len, __nv_bfloat16* out, int64_t B, int64_t Hq, int64_t Hkv,
                                    int64_t num_pages, cudaStream_t stream) {
  if (B < 1 || Hkv < 1 || Hq % Hkv != 0 || Hq / Hkv > kMaxG || B > 0x7fffffff / 4 || Hq > 65535)
    return static_cast<int>(cudaErrorInvalidValue);
  static DeviceInfo info;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (device != info.device) {
    err = cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return static_cast<int>(err);
    err = cudaFuncSetAttribute(decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err != cudaSuccess) return static_cast<int>(err);
    info.device = device;
  }
  const EncodeTiledFn enc = encode_fn();
  if (enc == nullptr) return static_cast<int>(cudaErrorNotSupported);
  const int64_t rows = num_pages * Hkv * kPage;
#ifdef PROBE_CACHEMAP
  static CUtensorMap tk, tv;
  static const void *ck = nullptr, *cv = nullptr;
  static int64_t crows = -1;
  if (ck != k_cache || cv != v_cache || crows != rows) {
    if (!make_cache_map(&tk, enc, k_cache, rows) || !make_cache_map(&tv, enc, v_cache, rows))
      return static_cast<int>(cudaErrorInvalidValue);
    ck = k_cache; cv = v_cache; crows = rows;
  }
#else
  CUtensorMap tk, tv;
  if (!make_cache_map(&tk, enc, k_cache, rows) || !make_cache_map(&tv, enc, v_cache, rows))
    return static_cast<int>(cudaErrorInvalidValue);
#endif

  const int blocks = info.sms * kBlocksPerSm;
  const int64_t W = static_cast<int64_t>(blocks) * kConsumers;
  static Scratch scratch;
  const size_t slots = static_cast<size_t>(W) + static_cast<size_t>(B) * static_cast<size_t>(Hkv);
  const size_t ml_bytes = (slots * kMaxG * sizeof(float2) + 255) / 256 * 256;
  err = ensure_scratch(scratch, ml_bytes + slots * kMaxG * kD * sizeof(float));
  if (err != cudaSuccess) return static_cast<int>(err);
  float2* part_ml = static_cast<float2*>(scratch.ptr);
  float* part_acc = reinterpret_cast<float*>(static_cast<char*>(scratch.ptr) + ml_bytes);
  const float qscale = 1.4426950408889634f / sqrtf(static_cast<float>(kD));
  decode_kernel<<<blocks, kThreads, kSmemBytes, stream>>>(tk, tv, q, page_ptr, page_idx, last_len, out, part_ml, part_acc,
                                                         static_cast<int>(B), static_cast<int>(Hq),
                                                         static_cast<int>(Hkv), qscale);
  err = cudaGetLastError();
  if (err != cudaSuccess) return static_cast<int>(err);
  const int64_t warps = B * Hq;
  const unsigned combine_blocks = static_cast<unsigned>((warps * 32 + 255) / 256);
#if defined(PROBE_NOCOMBINE)
  return 0;
#elif defined(PROBE_PDL)
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(combine_blocks);
  config.blockDim = dim3(256);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  err = cudaLaunchKernelEx(&config, combine_kernel, page_ptr, (const float2*)part_ml, (const float*)part_acc, out,
                           static_cast<int>(B), static_cast<int>(Hq), static_cast<int>(Hkv), W);
  return static_cast<int>(err);
#else
  combine_kernel<<<combine_blocks, 256, 0, stream>>>(
      page_ptr, part_ml, part_acc, out, static_cast<int>(B), static_cast<int>(Hq), static_cast<int>(Hkv), W);
  return static_cast<int>(cudaGetLastError());
#endif
}
