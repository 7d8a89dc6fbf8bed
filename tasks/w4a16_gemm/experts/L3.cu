// w4a16_gemm L3 expert: the L2 dataflow (packed W streamed once through a deep pipeline, x shared by
// many W rows, split-K with fp32 partials, token chunks of 64 for prefill) with Hopper's copy engine,
// register dequantization by bit tricks and the tensor cores:
// - a block owns a 128-row panel of W, one K slice and one chunk of up to 64 tokens; a producer warp
//   streams 128 x 256 code tiles of W (128 rows x 128 bytes) and the matching MB x 256 x tiles (MB = M
//   rounded up to 8, 16, 32 or 64) with 2-D TMA copies (UTMALDG, 128-byte swizzle, zero fill past N,
//   M and K) into a ring of full/empty mbarriers; no consumer thread issues a global load of W;
// - 8 consumer warps each own 16 W rows and compute y^T = W x^T with mma.sync m16n8k16 bf16 -> fp32
//   (HMMA): W rows are the MMA's M dimension, the tokens its N dimension (8 per MMA);
// - dequantization in registers: a lane reads one 32-bit word (8 codes) of a row per 32 k; per pair
//   of codes one shift and one LOP3 put two nibbles into the mantissas of bf16 128 (0x4300 | q is
//   128 + q), one packed bf16 FMA removes the bias exactly (q - 8), one packed bf16 multiply applies
//   the scale with the task's single rounding; no int-to-float conversion;
// - the MMA's k order is permuted (both operands alike, so the sum is unchanged) so that the pairs
//   the bit trick yields, codes (0, 4), (1, 5), (2, 6), (3, 7) of a word, are fragment registers as
//   they are; the x fragment is a 16-byte shared load of the same 8 consecutive k rearranged by
//   PRMT; which 8 k a lane takes in a step is chosen so that its x loads are free of bank conflicts;
// - scales: each lane loads its two rows' scales for the next stage while computing this one;
// - split-K as in L2 when the panels alone cannot fill two waves of blocks, and for decode (MB <= 32)
//   at least until each block's slice fits its ring (no slot is refilled: see run()); a second
//   kernel sums the partials and rounds to bf16.
#include <cstdint>
#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes from the runtime's entry point
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kConsumers = 8;                    // consumer warps, 16 W rows each
constexpr int kPanel = 16 * kConsumers;          // W rows per block
constexpr int kBK = 256;                         // k per stage: 128 bytes of a packed row, two groups
constexpr int kThreads = 32 * (kConsumers + 1);  // + one producer warp
constexpr uint32_t kWBytes = kPanel * kBK / 2;   // 16 KiB
constexpr int kTokens = 64;                      // tokens per grid-z chunk

template <int MB>
struct Cfg {
  static constexpr uint32_t kXBox = MB * 128;                 // one 64 (k) x MB box: a multiple of 1024
  static constexpr uint32_t kXBytes = 4 * kXBox;              // 256 k of MB tokens
  static constexpr uint32_t kStageBytes = kWBytes + kXBytes;
  // Two blocks per SM up to MB = 32 (about 100 KiB each), one at MB = 64.
  static constexpr int kStages = MB == 8 ? 5 : MB == 16 ? 4 : MB == 32 ? 3 : 4;
  static constexpr int kSmem = kStages * kStageBytes + 1024;  // + slack to align to 1 KiB
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
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
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// 32-bit word w (0..3) of 16-byte chunk c of row r of a tile of 128-byte rows written by TMA with
// 128-byte swizzle (tile base 1024-byte aligned): chunk c of row r sits at chunk c ^ (r % 8).
__device__ __forceinline__ uint32_t lds_word(uint32_t tile, int r, int c, int w) {
  uint32_t v;
  const uint32_t addr = tile + r * 128 + ((c ^ (r & 7)) << 4) + w * 4;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ void lds_chunk(uint32_t tile, int r, int c, uint32_t (&v)[4]) {
  const uint32_t addr = tile + r * 128 + ((c ^ (r & 7)) << 4);
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ uint32_t lop3_or(uint32_t a, uint32_t mask, uint32_t magic) {
  uint32_t d;  // (a & mask) | magic
  asm volatile("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "r"(mask), "r"(magic));
  return d;
}

__device__ __forceinline__ uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm volatile("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;  // a * b + (-0.0): one rounding of the exact product
  asm volatile("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}

// The 8 codes of word q (k = 8t .. 8t + 7, low nibble first) as 4 bf16 pairs of weights
// bf16((q - 8) * s), s2 the scale in both halves: d[0] = (k0, k4), d[1] = (k1, k5), d[2] = (k2, k6),
// d[3] = (k3, k7), lower k in the low half. A nibble ORed into the low mantissa bits of bf16 128
// (0x4300: exponent 2^7, 7 mantissa bits of weight 1) is the bf16 value 128 + q, exactly.
__device__ __forceinline__ void dequant8(uint32_t q, uint32_t s2, uint32_t (&d)[4]) {
  constexpr uint32_t kMask = 0x000f000fu, kMagic = 0x43004300u;  // bf16 128 in both halves
  constexpr uint32_t kOne = 0x3f803f80u, kMinus136 = 0xc308c308u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t biased = lop3_or(q >> (4 * i), kMask, kMagic);  // 128 + q_i, 128 + q_(i+4)
    d[i] = bf16x2_mul(bf16x2_fma(biased, kOne, kMinus136), s2);     // q - 8 exactly, then one rounding
  }
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm volatile("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Scales of rows n (this lane's two W rows) for groups g and g + 1, as bf16 bit patterns; 0 past N or
// past the last group (those weights meet zero-filled x, and their codes are TMA's zero fill).
__device__ __forceinline__ void load_scales(const unsigned short* scales, int64_t groups, int N, int n_a, int n_b,
                                            int64_t g, uint32_t (&s)[4]) {
  s[0] = n_a < N && g < groups ? __ldg(scales + n_a * groups + g) : 0;
  s[1] = n_a < N && g + 1 < groups ? __ldg(scales + n_a * groups + g + 1) : 0;
  s[2] = n_b < N && g < groups ? __ldg(scales + n_b * groups + g) : 0;
  s[3] = n_b < N && g + 1 < groups ? __ldg(scales + n_b * groups + g + 1) : 0;
}

template <int MB>
__global__ void __launch_bounds__(kThreads) w4a16_l3(const __grid_constant__ CUtensorMap map_w,
                                                     const __grid_constant__ CUtensorMap map_x,
                                                     const unsigned short* __restrict__ scales,
                                                     __nv_bfloat16* __restrict__ y, float* __restrict__ part, int M,
                                                     int N, int K, int slice) {
  constexpr int kStages = Cfg<MB>::kStages;
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ __align__(8) uint64_t empty[kStages];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n0 = blockIdx.x * kPanel;
  const int m0 = blockIdx.z * kTokens;
  const int kbeg = blockIdx.y * slice;
  const int len = kbeg + slice < K ? slice : K - kbeg;
  const int stages = (len + kBK - 1) / kBK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&full[s])) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(&empty[s])), "r"(kConsumers) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (warp == kConsumers) {  // producer
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_w)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_x)) : "memory");
      for (int i = 0; i < stages; ++i) {
        const int s = i % kStages;
        if (i >= kStages) mbar_wait(smem_addr(&empty[s]), ((i / kStages) - 1) & 1);
        const uint32_t bar = smem_addr(&full[s]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(Cfg<MB>::kStageBytes)
                     : "memory");
        const uint32_t dst = base + s * Cfg<MB>::kStageBytes;
        const int k = kbeg + i * kBK;
        tma_load_2d(dst, &map_w, bar, k / 2, n0);  // 128 bytes (256 codes) x 128 rows
#pragma unroll
        for (int b = 0; b < 4; ++b) tma_load_2d(dst + kWBytes + b * Cfg<MB>::kXBox, &map_x, bar, k + 64 * b, m0);
      }
    }
    return;
  }

  // Consumer warp: W rows n0 + 16 warp + g and + 8 (g = lane / 4); all MB tokens of the chunk.
  const int g = lane >> 2, t = lane & 3;
  const int r0 = warp * 16 + g;
  const int64_t groups = K / 128;
  float acc[MB / 8][4];
#pragma unroll
  for (int j = 0; j < MB / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  // 32-bit, not 16: with 16-bit values ptxas packed the next stage's scales into half registers
  // at the top of the stage, which made every stage wait for those loads (no overlap at all).
  uint32_t sc[4], sn[4];
  load_scales(scales, groups, N, n0 + r0, n0 + r0 + 8, kbeg / 128, sc);
  for (int i = 0; i < stages; ++i) {
    const int s = i % kStages;
    load_scales(scales, groups, N, n0 + r0, n0 + r0 + 8, (kbeg + (i + 1) * kBK) / 128, sn);  // next stage's
    mbar_wait(smem_addr(&full[s]), (i / kStages) & 1);
    const uint32_t wt = base + s * Cfg<MB>::kStageBytes, xt = wt + kWBytes;
#pragma unroll
    for (int c = 0; c < 8; ++c) {  // 32 k per step (8 per lane), two MMAs per token group
      const int h = c >> 2;        // group within the stage (steps 0-3: k < 128)
      const uint32_t sa = (sc[h] << 16) | sc[h];
      const uint32_t sb = (sc[2 + h] << 16) | sc[2 + h];
      // This lane's 8 k of step c: k = 64 (c / 2) + 8 ((c % 2) + 2t) + (0..7) of the stage, i.e. x box
      // c / 2, 16-byte chunk (c % 2) + 2t of its rows (the 8 lanes of a quarter-warp then hit 8
      // different bank groups through the swizzle), and packed W bytes 32 (c / 2) + 4 (c % 2) + 8t:
      // word 2 (t % 2) + c % 2 of 16-byte chunk 2 (c / 2) + t / 2 of the row.
      const int wchunk = 2 * (c >> 1) + (t >> 1), wword = 2 * (t & 1) + (c & 1);
      uint32_t wa[4], wb[4];
      dequant8(lds_word(wt, r0, wchunk, wword), sa, wa);
      dequant8(lds_word(wt, r0 + 8, wchunk, wword), sb, wb);
      const uint32_t xbox = xt + (c >> 1) * Cfg<MB>::kXBox;
#pragma unroll
      for (int j = 0; j < MB / 8; ++j) {
        uint32_t xv[4];  // x[token j*8 + g][k .. k+8): pairs (0,1), (2,3), (4,5), (6,7)
        lds_chunk(xbox, j * 8 + g, (c & 1) + 2 * t, xv);
        // MMA 0 uses codes 0, 4 (slots 2t, 2t+1) and 1, 5 (slots 2t+8, 2t+9); MMA 1 codes 2, 6 and 3, 7.
        mma_bf16(acc[j], wa[0], wb[0], wa[1], wb[1], prmt(xv[0], xv[2], 0x5410u), prmt(xv[0], xv[2], 0x7632u));
        mma_bf16(acc[j], wa[2], wb[2], wa[3], wb[3], prmt(xv[1], xv[3], 0x5410u), prmt(xv[1], xv[3], 0x7632u));
      }
    }
    __syncwarp();
    if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(&empty[s])) : "memory");
#pragma unroll
    for (int e = 0; e < 4; ++e) sc[e] = sn[e];
  }
  // acc[j][e]: W row r0 (+8 for e >= 2), token m0 + j * 8 + 2t + (e & 1).
#pragma unroll
  for (int j = 0; j < MB / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int n = n0 + r0 + (e >= 2 ? 8 : 0);
      const int m = m0 + j * 8 + 2 * t + (e & 1);
      if (m < M && n < N) {
        if (gridDim.y == 1) y[static_cast<int64_t>(m) * N + n] = __float2bfloat16(acc[j][e]);
        else part[(static_cast<int64_t>(blockIdx.y) * M + m) * N + n] = acc[j][e];
      }
    }
}

__global__ void w4a16_l3_reduce(const float* __restrict__ part, __nv_bfloat16* __restrict__ y, int64_t count,
                                int slices) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  float s = 0.0f;
  for (int p = 0; p < slices; ++p) s += part[p * count + i];
  y[i] = __float2bfloat16(s);
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_fn() {
  static EncodeTiledFn fn = nullptr;
  if (fn == nullptr) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiledFn>(p);
  }
  return fn;
}

// rows x cols row-major (cols contiguous, elem_bytes each) as a TMA map with boxes of 128 bytes x
// box_rows, 128-byte swizzle, zero fill outside the matrix.
bool make_map(CUtensorMap* map, EncodeTiledFn enc, CUtensorMapDataType type, int elem_bytes, const void* ptr,
              int64_t rows, int64_t cols, uint32_t box_rows) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * elem_bytes};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / elem_bytes), box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return enc(map, type, 2, const_cast<void*>(ptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
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

template <int MB>
cudaError_t run(cudaStream_t stream, const __nv_bfloat16* x, const uint8_t* Wq, const __nv_bfloat16* scales,
                __nv_bfloat16* y, int M, int N, int K, int sms) {
  const EncodeTiledFn enc = encode_fn();
  if (enc == nullptr) return cudaErrorNotSupported;
  CUtensorMap map_w, map_x;
  if (!make_map(&map_w, enc, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, Wq, N, K / 2, kPanel) ||
      !make_map(&map_x, enc, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, x, M, K, MB))
    return cudaErrorInvalidValue;
  cudaError_t err = cudaFuncSetAttribute(w4a16_l3<MB>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<MB>::kSmem);
  if (err != cudaSuccess) return err;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, w4a16_l3<MB>, kThreads, Cfg<MB>::kSmem);
  if (err != cudaSuccess) return err;
  if (per_sm < 1) per_sm = 1;
  // Split K until the blocks fill two waves, each slice at least 4 stages (1024 k) long.
  const int64_t panels = (N + kPanel - 1) / kPanel;
  const int64_t chunks = (M + kTokens - 1) / kTokens;
  const int64_t total_stages = (K + kBK - 1) / kBK;
  int64_t slices = (2LL * per_sm * sms + panels * chunks - 1) / (panels * chunks);
  const int64_t most = total_stages / 4 > 1 ? total_stages / 4 : 1;
  if (slices > most) slices = most;
  // Decode (MB <= 32, two blocks per SM): a slice never outgrows the ring, so each block issues all
  // its copies at once and no ring slot is refilled. On the H200 (2026-12-02) the MB = 8 and 16
  // kernels were wrong exactly where a block refilled its slots (slices of 32-42 stages against
  // rings of 4-5) and right wherever it did not; the cause is not pinned (tasks/w4a16_gemm/bench/
  // README.md). The partials this adds are at most M * 4 bytes per 128 * kStages bytes of Wq.
  if (MB <= 32) {
    const int64_t fit = (total_stages + Cfg<MB>::kStages - 1) / Cfg<MB>::kStages;
    if (slices < fit) slices = fit;
  }
  if (slices > 65535) slices = 65535;
  const int64_t slice_stages = (total_stages + slices - 1) / slices;
  slices = (total_stages + slice_stages - 1) / slice_stages;
  static Scratch scratch;
  float* part = nullptr;
  if (slices > 1) {
    err = ensure_scratch(scratch, static_cast<size_t>(slices) * M * N * sizeof(float));
    if (err != cudaSuccess) return err;
    part = scratch.ptr;
  }
  const dim3 grid(static_cast<unsigned>(panels), static_cast<unsigned>(slices), static_cast<unsigned>(chunks));
  w4a16_l3<MB><<<grid, kThreads, Cfg<MB>::kSmem, stream>>>(map_w, map_x, reinterpret_cast<const unsigned short*>(scales),
                                                           y, part, M, N, K, static_cast<int>(slice_stages * kBK));
  if (slices > 1) {
    const int64_t count = static_cast<int64_t>(M) * N;
    w4a16_l3_reduce<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(part, y, count,
                                                                                    static_cast<int>(slices));
  }
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_w4a16_gemm(const __nv_bfloat16* x, const uint8_t* Wq, const __nv_bfloat16* scales,
                              __nv_bfloat16* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  if (M <= 0 || M > 4096 || N <= 0 || K <= 0 || K % 128 != 0 || N > 0x7fffffff || K > 0x7fffffff)
    return static_cast<int>(cudaErrorInvalidValue);
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(Wq) % 16 != 0)
    return static_cast<int>(cudaErrorInvalidValue);  // TMA needs 16-byte aligned bases (cudaMalloc gives 256)
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  if (m <= 8) err = run<8>(stream, x, Wq, scales, y, m, n, k, sms);
  else if (m <= 16) err = run<16>(stream, x, Wq, scales, y, m, n, k, sms);
  else if (m <= 32) err = run<32>(stream, x, Wq, scales, y, m, n, k, sms);
  else err = run<64>(stream, x, Wq, scales, y, m, n, k, sms);
  return static_cast<int>(err);
}
