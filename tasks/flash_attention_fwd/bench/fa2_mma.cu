// flash_attention_fwd, the task's first layer-3 expert (until 2026-12-01), kept in bench/ as the
// mma.sync reference: FlashAttention-2 style tensor-core kernel. A 128-
// thread block (4 warps x 16 query rows) owns a 64-query tile; Q is loaded once into mma fragments
// (ldmatrix), K/V tiles of 64 keys stream through a 2-stage cp.async ring in XOR-swizzled shared memory;
// S = Q K^T and O += P V run on mma.sync m16n8k16 bf16 (HMMA) with fp32 accumulators in registers, P is
// reused from the S accumulators (rounded to bf16), softmax in the log2 domain with exp2 (MUFU.EX2).
#include <cmath>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kBQ = 64;        // query rows per block: 4 warps x 16
constexpr int kBK = 64;        // keys per tile
constexpr int kThreads = 128;

template <int D>
struct Cfg {
  static constexpr int kChunks = D / 8;             // 16-byte chunks per row
  static constexpr int kTileBytes = kBK * D * 2;    // one Q, K or V tile (64 rows)
  static constexpr int kSmem = 5 * kTileBytes;      // Q + 2 x K + 2 x V
};

// Byte offset of 16-byte chunk `ch` of row `r` in a swizzled tile: the chunk index is XORed with
// r % 8, so the 8 rows read by one ldmatrix 8x8 matrix land in 8 different bank groups.
template <int D>
__device__ __forceinline__ uint32_t swz(int r, int ch) {
  return static_cast<uint32_t>(r * (D * 2) + ((ch ^ (r & 7)) << 4));
}

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;  // 0: nothing is read, the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                        uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                          uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

// c += a (16x16 bf16, row) * b (16x8 bf16, col), fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x on the MUFU unit (ex2.approx.ftz: about 2 ulp, 2^-inf = +0), without exp2f's denormal fix-up.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lower column
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Copies 64 rows starting at row0 of a [S][D] bf16 matrix into a swizzled tile (rows >= S zeroed).
template <int D>
__device__ __forceinline__ void issue_tile(uint32_t dst, const __nv_bfloat16* src, int64_t row0,
                                           int64_t S) {
  constexpr int kChunks = Cfg<D>::kChunks;
#pragma unroll
  for (int u = 0; u < kBK * kChunks / kThreads; ++u) {
    const int c = threadIdx.x + kThreads * u;
    const int r = c / kChunks, ch = c % kChunks;
    const bool ok = row0 + r < S;
    cp_async_16(dst + swz<D>(r, ch), src + (ok ? (row0 + r) * D + ch * 8 : 0), ok);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads, 2)
flash_fwd_l3(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
             const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ o, int64_t S,
             int64_t bh_count, int64_t q_tiles, int causal, float scale_log2) {
  constexpr int KSTEPS = D / 16;  // k-steps of Q K^T
  constexpr int DT = D / 8;       // n-tiles (8 columns) of O
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sq = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t sk0 = sq + Cfg<D>::kTileBytes;        // K stages 0, 1
  const uint32_t sv0 = sq + 3 * Cfg<D>::kTileBytes;    // V stages 0, 1

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, tig = lane % 4;  // mma fragment coordinates
  // Heaviest query tiles (the last ones when causal) are scheduled first.
  const int64_t bh = static_cast<int64_t>(blockIdx.x) % bh_count;
  const int64_t qt = q_tiles - 1 - static_cast<int64_t>(blockIdx.x) / bh_count;
  const int64_t q0 = qt * kBQ;
  const __nv_bfloat16* qh = q + bh * S * D;
  const __nv_bfloat16* kh = k + bh * S * D;
  const __nv_bfloat16* vh = v + bh * S * D;

  const int64_t all_tiles = (S + kBK - 1) / kBK;
  const int64_t nt = causal ? (q0 / kBK + 1 < all_tiles ? q0 / kBK + 1 : all_tiles) : all_tiles;

  issue_tile<D>(sq, qh, q0, S);
  issue_tile<D>(sk0, kh, 0, S);
  issue_tile<D>(sv0, vh, 0, S);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  // Q fragments of this warp's 16 rows for every k-step, kept in registers for the whole loop.
  uint32_t qf[KSTEPS][4];
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) {
    const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    ldsm_x4(sq + swz<D>(r, 2 * kk + (lane >> 4)), qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
  }

  float oacc[DT][4];
#pragma unroll
  for (int n = 0; n < DT; ++n) oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY;  // running max (raw scores) of rows g and g + 8
  float l0 = 0.0f, l1 = 0.0f;            // this thread's part of the running sums

  const int64_t row0 = q0 + warp * 16 + g;  // this thread's rows: row0 and row0 + 8

  for (int64_t t = 0; t < nt; ++t) {
    const int buf = static_cast<int>(t & 1);
    if (t + 1 < nt) {  // the other stage was last read before the barrier ending iteration t-1
      issue_tile<D>(sk0 + (buf ^ 1) * Cfg<D>::kTileBytes, kh, (t + 1) * kBK, S);
      issue_tile<D>(sv0 + (buf ^ 1) * Cfg<D>::kTileBytes, vh, (t + 1) * kBK, S);
      cp_async_commit();
    }
    const uint32_t sk = sk0 + buf * Cfg<D>::kTileBytes;
    const uint32_t sv = sv0 + buf * Cfg<D>::kTileBytes;
    const int64_t j0 = t * kBK;

    // S = Q K^T for 16 rows x 64 keys: 8 n-tiles of 8 keys.
    float sacc[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) sacc[n][0] = sacc[n][1] = sacc[n][2] = sacc[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b0, b1, b2, b3;
        const int r = 16 * np + (lane & 7) + (lane >> 4) * 8;
        ldsm_x4(sk + swz<D>(r, 2 * kk + ((lane >> 3) & 1)), b0, b1, b2, b3);
        mma_bf16(sacc[2 * np], qf[kk], b0, b1);
        mma_bf16(sacc[2 * np + 1], qf[kk], b2, b3);
      }
    }

    // Mask keys past the end and, on the diagonal tile, keys after the row (causal).
    if (j0 + kBK > S || (causal && j0 + kBK - 1 > q0)) {
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t j = j0 + 8 * n + 2 * tig + (e & 1);
          const int64_t i = row0 + 8 * (e >> 1);
          if (j >= S || (causal && j > i)) sacc[n][e] = -INFINITY;
        }
      }
    }

    // Online softmax: a row's 64 scores are spread over the 4 threads of a quad.
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      mx0 = fmaxf(mx0, fmaxf(sacc[n][0], sacc[n][1]));
      mx1 = fmaxf(mx1, fmaxf(sacc[n][2], sacc[n][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    // Key 0 is allowed for every row, so the maxima are finite from the first tile on; guard anyway.
    const float ms0 = (mx0 == -INFINITY ? 0.0f : mx0) * scale_log2;
    const float ms1 = (mx1 == -INFINITY ? 0.0f : mx1) * scale_log2;
    const float alpha0 = fast_exp2(m0 * scale_log2 - ms0);  // 0 on the first tile (m = -inf)
    const float alpha1 = fast_exp2(m1 * scale_log2 - ms1);
    m0 = mx0;
    m1 = mx1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      sacc[n][0] = fast_exp2(fmaf(sacc[n][0], scale_log2, -ms0));
      sacc[n][1] = fast_exp2(fmaf(sacc[n][1], scale_log2, -ms0));
      sacc[n][2] = fast_exp2(fmaf(sacc[n][2], scale_log2, -ms1));
      sacc[n][3] = fast_exp2(fmaf(sacc[n][3], scale_log2, -ms1));
      sum0 += sacc[n][0] + sacc[n][1];
      sum1 += sacc[n][2] + sacc[n][3];
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
#pragma unroll
    for (int n = 0; n < DT; ++n) {
      oacc[n][0] *= alpha0;
      oacc[n][1] *= alpha0;
      oacc[n][2] *= alpha1;
      oacc[n][3] *= alpha1;
    }

    // O += P V: the S accumulators of n-tiles 2kk, 2kk+1 are the A fragment of key step kk.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t pa[4];
      pa[0] = pack_bf16(sacc[2 * kk][0], sacc[2 * kk][1]);
      pa[1] = pack_bf16(sacc[2 * kk][2], sacc[2 * kk][3]);
      pa[2] = pack_bf16(sacc[2 * kk + 1][0], sacc[2 * kk + 1][1]);
      pa[3] = pack_bf16(sacc[2 * kk + 1][2], sacc[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b0, b1, b2, b3;
        const int r = 16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldsm_x4_t(sv + swz<D>(r, 2 * dp + (lane >> 4)), b0, b1, b2, b3);
        mma_bf16(oacc[2 * dp], pa, b0, b1);
        mma_bf16(oacc[2 * dp + 1], pa, b2, b3);
      }
    }
    cp_async_wait_all();  // tile t + 1 has landed (this thread's copies)
    __syncthreads();      // ... everyone's, and stage buf is no longer read
  }

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
  __nv_bfloat16* o0 = o + (bh * S + row0) * D + 2 * tig;
  __nv_bfloat16* o1 = o0 + 8 * D;
#pragma unroll
  for (int n = 0; n < DT; ++n) {
    if (row0 < S) {
      *reinterpret_cast<__nv_bfloat162*>(o0 + 8 * n) =
          __floats2bfloat162_rn(oacc[n][0] * inv0, oacc[n][1] * inv0);
    }
    if (row0 + 8 < S) {
      *reinterpret_cast<__nv_bfloat162*>(o1 + 8 * n) =
          __floats2bfloat162_rn(oacc[n][2] * inv1, oacc[n][3] * inv1);
    }
  }
}

template <int D>
cudaError_t launch(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                   __nv_bfloat16* o, int64_t bh, int64_t S, int causal, cudaStream_t stream) {
  static int configured_device = -1;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (configured_device != device) {
    err = cudaFuncSetAttribute(flash_fwd_l3<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               Cfg<D>::kSmem);
    if (err != cudaSuccess) return err;
    configured_device = device;
  }
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  const int64_t q_tiles = (S + kBQ - 1) / kBQ;
  flash_fwd_l3<D><<<static_cast<unsigned>(q_tiles * bh), kThreads, Cfg<D>::kSmem, stream>>>(
      q, k, v, o, S, bh, q_tiles, causal, scale_log2);
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
  if ((seq + kBQ - 1) / kBQ * bh > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const int c = causal ? 1 : 0;
  const cudaError_t err = head_dim == 64 ? launch<64>(q, k, v, o, bh, seq, c, stream)
                                         : launch<128>(q, k, v, o, bh, seq, c, stream);
  return static_cast<int>(err);
}
