// gemm_skinny L3 expert: the L2 dataflow (W streamed once through a deep pipeline, x shared by many
// W rows, fp32 partial sums) with Hopper's copy engine, the tensor cores and a stream-K schedule:
// - the work is cut into units of one 128-row panel of W by 64 k (16 KiB of W); the grid is
//   persistent (as many blocks as fit on the GPU at once) and block b takes the contiguous run of
//   units [b U / G, (b + 1) U / G) in panel-major order, so every block streams the same number of
//   weight bytes (no partial last wave, whatever N, K and M) and a block's ring never drains
//   between the panels it walks through;
// - a producer warp streams each unit's 128 x 64 W tile and the matching MB x 64 x tile (MB = M
//   rounded up to 8, 16, 32 or 64) with 2-D TMA copies (UTMALDG, 128-byte swizzle, zero fill past
//   N, M and K) into a 4-stage ring of full/empty mbarriers;
// - 4 consumer warps each own 32 W rows (two m16 tiles) and all MB tokens (at MB = 64, 8 warps of
//   32 rows x 32 tokens) and compute y^T = W x^T with mma.sync m16n8k16 bf16 -> fp32 (HMMA): W rows
//   are the MMA's M dimension, tokens its N dimension, so one x fragment feeds two MMAs; fragments
//   come from the swizzled tiles through ldmatrix (LDSM, conflict-free), all of a k step's
//   fragments loaded before its MMAs; a stage is released only after its ldmatrix results have
//   arrived (the release's address depends on them);
// - at the end of a panel (or of its run) a block writes y directly when it computed the whole
//   panel, else adds its fp32 partial sums into a workspace (RED.ADD); a small second kernel rounds
//   the shared panels' sums to bf16 into y and zeroes them for the next call. (Finishing each panel
//   in the kernel instead, by the last block to add its share, is kept behind kFinishInKernel: on
//   the H200 it was slower, 83.2 against 85.5 % of copy bandwidth at M = 16 and 64.7 against 68.4 %
//   at M = 64, its extra registers costing more than the second launch.)
#include <cstdint>
#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes from the runtime's entry point
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kRowGroups = 4;                  // consumer warps along the panel, 32 W rows each
constexpr int kPanel = 32 * kRowGroups;        // W rows per unit
constexpr int kBK = 64;                        // k per unit: 64 bf16 = one 128-byte swizzle row
constexpr uint32_t kWBytes = kPanel * kBK * 2;  // 16 KiB
// true: shared panels are finished inside the kernel by the last block to add its share (a counter
// per panel); false (measured faster on the H200, 2026-12-02 19:54Z): by a second kernel.
constexpr bool kFinishInKernel = false;

template <int MB>
struct Cfg {
  // At MB = 64 the tokens are split between two warps per row group (8 consumer warps of 32 rows
  // x 32 tokens): twice the warps to hide the MMAs' and ldmatrix's latencies.
  static constexpr int kTokGroups = MB == 64 ? 2 : 1;
  static constexpr int kConsumers = kRowGroups * kTokGroups;
  static constexpr int kThreads = 32 * (kConsumers + 1);  // + one producer warp
  static constexpr int kMaxRegs = MB == 64 && kTokGroups == 2 ? 112 : 255;  // MB = 64: two blocks of 288 threads per SM
  static constexpr int kStages = 4;
  static constexpr uint32_t kXBytes = MB * kBK * 2;  // a multiple of 1024
  static constexpr uint32_t kStageBytes = kWBytes + kXBytes;
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

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldsm_x2(uint32_t& r0, uint32_t& r1, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(addr));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Address of the 16-byte piece (row r, k chunk kc of 8 bf16) of a tile of 128-byte rows written by
// TMA with the 128-byte swizzle (tile base 1024-byte aligned): chunk kc of row r sits at kc ^ (r % 8).
__device__ __forceinline__ uint32_t swz(uint32_t tile, int r, int kc) {
  return tile + r * 128 + ((kc ^ (r & 7)) << 4);
}

// The block's run of units: [first_unit(b), first_unit(b + 1)).
__host__ __device__ __forceinline__ int64_t first_unit(int64_t b, int64_t units, int64_t blocks) {
  return b * units / blocks;
}
// The block whose run holds unit u (the largest b with first_unit(b) <= u).
__host__ __device__ __forceinline__ int64_t block_of(int64_t u, int64_t units, int64_t blocks) {
  return ((u + 1) * blocks - 1) / units;
}

template <int MB>
__global__ void __launch_bounds__(Cfg<MB>::kThreads) __maxnreg__(Cfg<MB>::kMaxRegs) gemm_skinny_l3(const __grid_constant__ CUtensorMap map_w,
                                                                    const __grid_constant__ CUtensorMap map_x,
                                                                    __nv_bfloat16* __restrict__ y,
                                                                    float* __restrict__ ws, int* __restrict__ count,
                                                                    int M, int N, int chunks, int units, uint32_t zero) {
  constexpr int kStages = Cfg<MB>::kStages, kConsumers = Cfg<MB>::kConsumers;
  constexpr int MW = MB / Cfg<MB>::kTokGroups;  // tokens per consumer warp
  constexpr int NJ = MW / 8;                    // MMAs (8 tokens each) per 16 x 16 W fragment
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ __align__(8) uint64_t empty[kStages];
  __shared__ int last_share;
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int u0 = static_cast<int>(first_unit(blockIdx.x, units, gridDim.x));
  const int u1 = static_cast<int>(first_unit(blockIdx.x + 1, units, gridDim.x));
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
      int p = u0 / chunks, c = u0 - p * chunks;
      for (int u = u0, i = 0; u < u1; ++u, ++i) {
        const int s = i % kStages;
        if (i >= kStages) mbar_wait(smem_addr(&empty[s]), ((i / kStages) - 1) & 1);
        const uint32_t bar = smem_addr(&full[s]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(Cfg<MB>::kStageBytes)
                     : "memory");
        const uint32_t dst = base + s * Cfg<MB>::kStageBytes;
        tma_load_2d(dst, &map_w, bar, c * kBK, p * kPanel);
        tma_load_2d(dst + kWBytes, &map_x, bar, c * kBK, 0);
        if (++c == chunks) {
          c = 0;
          ++p;
        }
      }
    }
    return;
  }

  // Consumer warp: W rows 32 rg + 16 mt + (0..15) of the panel; tokens m0 + (0..MW).
  const int rg = warp % kRowGroups, m0 = (warp / kRowGroups) * MW;
  const int g = lane >> 2, t = lane & 3;
  const int lr = lane & 7, lm = lane >> 3;  // ldmatrix: the row this lane addresses, in matrix lm
  float acc[2][NJ][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][j][e] = 0.0f;
  // A (W) fragment of tile mt, k step kk: matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
  const int arow = rg * 32 + (lm & 1) * 8 + lr, akc = lm >> 1;
  // B (x) fragments of tokens 16 jp + (0..15), k step kk: (tokens 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15).
  const int brow = m0 + (lm >> 1) * 8 + lr, bkc = lm & 1;
  int p = u0 / chunks, c = u0 - p * chunks;
  bool whole = c == 0;  // this block computes the current panel from its first chunk
  for (int u = u0, i = 0; u < u1; ++u, ++i) {
    const int s = i % kStages;
    mbar_wait(smem_addr(&full[s]), (i / kStages) & 1);
    const uint32_t wt = base + s * Cfg<MB>::kStageBytes, xt = wt + kWBytes;
    // The stage may be released only once every ldmatrix of it has delivered its registers: the
    // release (an mbarrier arrive) does not wait for loads in flight, and the producer's next copy
    // overwrites the stage. So the arrive's address depends on a register of every ldmatrix
    // (folded with xor, then masked by zero, a kernel argument the compiler cannot see through).
    uint32_t dep = 0;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t a[2][4], b[NJ][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) ldsm_x4(a[mt], swz(wt, arow + 16 * mt, 2 * kk + akc));
      dep ^= a[0][0] ^ a[1][0];
      if constexpr (NJ == 1) {
        ldsm_x2(b[0][0], b[0][1], swz(xt, m0 + lr, 2 * kk + bkc));
        dep ^= b[0][0];
      } else {
#pragma unroll
        for (int jp = 0; jp < NJ / 2; ++jp) {
          uint32_t r[4];
          ldsm_x4(r, swz(xt, 16 * jp + brow, 2 * kk + bkc));
          dep ^= r[0];
          b[2 * jp][0] = r[0];
          b[2 * jp][1] = r[1];
          b[2 * jp + 1][0] = r[2];
          b[2 * jp + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int j = 0; j < NJ; ++j) mma_bf16(acc[mt][j], a[mt], b[j][0], b[j][1]);
    }
    __syncwarp();
    if (lane == 0)
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(&empty[s]) + (dep & zero)) : "memory");
    const bool panel_end = c == chunks - 1;
    if (panel_end || u == u1 - 1) {
      const bool direct = whole && panel_end;  // no other block touches this panel
      // acc[mt][j][e]: W row 32 rg + 16 mt + g (+8 for e >= 2), token m0 + 8 j + 2t + (e & 1).
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int n = p * kPanel + rg * 32 + mt * 16 + g + (e >= 2 ? 8 : 0);
            const int m = m0 + j * 8 + 2 * t + (e & 1);
            if (m < M && n < N) {
              const int64_t at = static_cast<int64_t>(m) * N + n;
              if (direct) y[at] = __float2bfloat16(acc[mt][j][e]);
              else atomicAdd(ws + at, acc[mt][j][e]);
            }
            acc[mt][j][e] = 0.0f;
          }
      if (kFinishInKernel && !direct) {
        // This block's share of panel p is in the workspace. The last of the panel's blocks to add
        // its share rounds the sums into y and zeroes them and the counter for the next call.
        const int64_t first = static_cast<int64_t>(p) * chunks;
        const int shares = static_cast<int>(block_of(first + chunks - 1, units, gridDim.x) -
                                            block_of(first, units, gridDim.x)) + 1;
        asm volatile("bar.sync 1, %0;" ::"r"(kConsumers * 32) : "memory");  // every addition issued
        if (threadIdx.x == 0) {
          __threadfence();
          last_share = atomicAdd(count + p, 1) == shares - 1;
        }
        asm volatile("bar.sync 1, %0;" ::"r"(kConsumers * 32) : "memory");
        if (last_share) {
          __threadfence();
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int n = p * kPanel + rg * 32 + mt * 16 + g + (e >= 2 ? 8 : 0);
                const int m = m0 + j * 8 + 2 * t + (e & 1);
                if (m < M && n < N) {
                  const int64_t at = static_cast<int64_t>(m) * N + n;
                  y[at] = __float2bfloat16(__ldcg(ws + at));
                  ws[at] = 0.0f;
                }
              }
          if (threadIdx.x == 0) count[p] = 0;
        }
      }
    }
    if (++c == chunks) {
      c = 0;
      ++p;
      whole = true;
    }
  }
}

// y of the panels that several blocks shared: round the workspace's sums and zero it again.
__global__ void gemm_skinny_l3_finish(__nv_bfloat16* __restrict__ y, float* __restrict__ ws, int M, int N,
                                      int chunks, int units, int blocks) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(M) * N) return;
  const int n = static_cast<int>(i % N);
  const int64_t first = static_cast<int64_t>(n / kPanel) * chunks;
  if (block_of(first, units, blocks) == block_of(first + chunks - 1, units, blocks)) return;
  y[i] = __float2bfloat16(ws[i]);
  ws[i] = 0.0f;
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

// rows x k row-major bf16 (k contiguous) as a TMA map with boxes of 64 (k) x box_rows, 128-byte
// swizzle, zero fill outside the matrix.
bool make_map(CUtensorMap* map, EncodeTiledFn enc, const void* ptr, int64_t rows, int64_t k, uint32_t box_rows) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, strides, box, elem_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The fp32 workspace (M x N sums of split panels, then a counter per panel): zero when allocated,
// and whoever finishes a panel zeroes what it consumed, so it is zero again at the start of each call.
struct Workspace {
  float* ptr = nullptr;
  size_t bytes = 0;
};

cudaError_t ensure_workspace(Workspace& w, size_t bytes, cudaStream_t stream) {
  if (w.bytes >= bytes) return cudaSuccess;
  if (w.ptr != nullptr) cudaFree(w.ptr);
  w.ptr = nullptr;
  w.bytes = 0;
  cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&w.ptr), bytes);
  if (err == cudaSuccess) err = cudaMemsetAsync(w.ptr, 0, bytes, stream);
  if (err == cudaSuccess) w.bytes = bytes;
  return err;
}

template <int MB>
cudaError_t run(cudaStream_t stream, const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int M, int N,
                int K, int sms) {
  const EncodeTiledFn enc = encode_fn();
  if (enc == nullptr) return cudaErrorNotSupported;
  CUtensorMap map_w, map_x;
  if (!make_map(&map_w, enc, W, N, K, kPanel) || !make_map(&map_x, enc, x, M, K, MB)) return cudaErrorInvalidValue;
  cudaError_t err =
      cudaFuncSetAttribute(gemm_skinny_l3<MB>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg<MB>::kSmem);
  if (err != cudaSuccess) return err;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemm_skinny_l3<MB>, Cfg<MB>::kThreads, Cfg<MB>::kSmem);
  if (err != cudaSuccess) return err;
  if (per_sm < 1) per_sm = 1;
  const int64_t panels = (N + kPanel - 1) / kPanel;
  const int64_t chunks = (K + kBK - 1) / kBK;
  const int64_t units = panels * chunks;  // < 2^31: N K < 2^31
  const int64_t blocks = units < static_cast<int64_t>(per_sm) * sms ? units : static_cast<int64_t>(per_sm) * sms;
  bool split = false;  // does any panel span two blocks' runs?
  for (int64_t p = 0; p < panels && !split; ++p)
    split = block_of(p * chunks, units, blocks) != block_of(p * chunks + chunks - 1, units, blocks);
  static Workspace ws;
  if (split) {
    err = ensure_workspace(ws, (static_cast<size_t>(M) * N + panels) * sizeof(float), stream);
    if (err != cudaSuccess) return err;
  }
  gemm_skinny_l3<MB><<<static_cast<unsigned>(blocks), Cfg<MB>::kThreads, Cfg<MB>::kSmem, stream>>>(
      map_w, map_x, y, ws.ptr, ws.ptr == nullptr ? nullptr : reinterpret_cast<int*>(ws.ptr + static_cast<size_t>(M) * N),
      M, N, static_cast<int>(chunks), static_cast<int>(units), 0u);
  if (split && !kFinishInKernel) {
    const int64_t count = static_cast<int64_t>(M) * N;
    gemm_skinny_l3_finish<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(
        y, ws.ptr, M, N, static_cast<int>(chunks), static_cast<int>(units), static_cast<int>(blocks));
  }
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_gemm_skinny(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int64_t M,
                               int64_t N, int64_t K, cudaStream_t stream) {
  if (M <= 0 || M > 64 || N <= 0 || K <= 0 || K % 8 != 0 || N > 0x7fffffff || K > 0x7fffffff)
    return static_cast<int>(cudaErrorInvalidValue);
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(W) % 16 != 0)
    return static_cast<int>(cudaErrorInvalidValue);  // TMA needs 16-byte aligned bases (cudaMalloc gives 256)
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  if (m <= 8) err = run<8>(stream, x, W, y, m, n, k, sms);
  else if (m <= 16) err = run<16>(stream, x, W, y, m, n, k, sms);
  else if (m <= 32) err = run<32>(stream, x, W, y, m, n, k, sms);
  else err = run<64>(stream, x, W, y, m, n, k, sms);
  return static_cast<int>(err);
}
