// gemm_skinny L3 expert: the L2 dataflow (W streamed once through a deep pipeline, x shared by many
// W rows, split-K with fp32 partials) with Hopper's copy engine and the tensor cores:
// - a block owns a 64-row panel of W and one K slice; a producer warp streams 64 x 64 W tiles and
//   the matching MB x 64 x tiles (MB = M rounded up to 8, 16, 32 or 64) with 2-D TMA copies
//   (UTMALDG, 128-byte swizzle, zero fill past N, M and K) into a 6-stage shared-memory ring of
//   full/empty mbarriers: 48 KiB of W in flight per block, no thread issues a W load;
// - 4 consumer warps each own 16 W rows and compute y^T = W x^T with mma.sync m16n8k16 bf16 -> fp32
//   (HMMA in SASS): W rows are the MMA's M dimension, the tokens its N dimension (8 per MMA), so
//   M = 64 costs 8 MMAs per 16 x 16 W fragment and the FMA units are no longer the limit; fragments
//   come from the swizzled tiles with conflict-free 32-bit shared loads;
// - split-K as in L2 when the panels alone cannot fill two waves of blocks; a second kernel sums
//   the partials and rounds to bf16.
#include <cstdint>
#include <cuda.h>  // CUtensorMap and its enums only: the encoder comes from the runtime's entry point
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kConsumers = 4;                      // consumer warps, 16 W rows each
constexpr int kPanel = 16 * kConsumers;            // W rows per block
constexpr int kBK = 64;                            // k per stage: 64 bf16 = one 128-byte swizzle row
constexpr int kStages = 6;
constexpr int kThreads = 32 * (kConsumers + 1);    // + one producer warp
constexpr uint32_t kWBytes = kPanel * kBK * 2;     // 8 KiB

template <int MB>
struct Cfg {
  static constexpr uint32_t kXBytes = MB * kBK * 2;           // a multiple of 1024
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

// Two bf16 at (row r, even column k) of a tile of 128-byte rows written by TMA with 128-byte
// swizzle (tile base 1024-byte aligned): the 16-byte chunk k / 8 of row r sits at chunk (k / 8) ^ (r % 8).
__device__ __forceinline__ uint32_t lds_pair(uint32_t tile, int r, int k) {
  uint32_t v;
  const uint32_t addr = tile + r * 128 + ((((k >> 3) ^ (r & 7))) << 4) + (k & 7) * 2;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int MB>
__global__ void __launch_bounds__(kThreads) gemm_skinny_l3(const __grid_constant__ CUtensorMap map_w,
                                                           const __grid_constant__ CUtensorMap map_x,
                                                           __nv_bfloat16* __restrict__ y, float* __restrict__ part,
                                                           int M, int N, int K, int slice) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ __align__(8) uint64_t empty[kStages];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n0 = blockIdx.x * kPanel;
  const int kbeg = blockIdx.y * slice;
  const int len = kbeg + slice < K ? slice : K - kbeg;
  const int chunks = (len + kBK - 1) / kBK;
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
      for (int i = 0; i < chunks; ++i) {
        const int s = i % kStages;
        if (i >= kStages) mbar_wait(smem_addr(&empty[s]), ((i / kStages) - 1) & 1);
        const uint32_t bar = smem_addr(&full[s]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(Cfg<MB>::kStageBytes)
                     : "memory");
        const uint32_t dst = base + s * Cfg<MB>::kStageBytes;
        tma_load_2d(dst, &map_w, bar, kbeg + i * kBK, n0);
        tma_load_2d(dst + kWBytes, &map_x, bar, kbeg + i * kBK, 0);
      }
    }
    return;
  }

  // Consumer warp: W rows n0 + 16 warp + (0..15); all MB token columns.
  const int g = lane >> 2, t = lane & 3;
  float acc[MB / 8][4];
#pragma unroll
  for (int j = 0; j < MB / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  const int r0 = warp * 16 + g;
  for (int i = 0; i < chunks; ++i) {
    const int s = i % kStages;
    mbar_wait(smem_addr(&full[s]), (i / kStages) & 1);
    const uint32_t wt = base + s * Cfg<MB>::kStageBytes, xt = wt + kWBytes;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      const uint32_t a0 = lds_pair(wt, r0, kk + 2 * t), a1 = lds_pair(wt, r0 + 8, kk + 2 * t);
      const uint32_t a2 = lds_pair(wt, r0, kk + 8 + 2 * t), a3 = lds_pair(wt, r0 + 8, kk + 8 + 2 * t);
#pragma unroll
      for (int j = 0; j < MB / 8; ++j) {
        const uint32_t b0 = lds_pair(xt, j * 8 + g, kk + 2 * t), b1 = lds_pair(xt, j * 8 + g, kk + 8 + 2 * t);
        mma_bf16(acc[j], a0, a1, a2, a3, b0, b1);
      }
    }
    __syncwarp();
    if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(&empty[s])) : "memory");
  }
  // acc[j][e]: W row r0 (+8 for e >= 2), token j * 8 + 2t + (e & 1).
#pragma unroll
  for (int j = 0; j < MB / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int n = n0 + r0 + (e >= 2 ? 8 : 0);
      const int m = j * 8 + 2 * t + (e & 1);
      if (m < M && n < N) {
        if (gridDim.y == 1) y[static_cast<int64_t>(m) * N + n] = __float2bfloat16(acc[j][e]);
        else part[(static_cast<int64_t>(blockIdx.y) * M + m) * N + n] = acc[j][e];
      }
    }
}

__global__ void gemm_skinny_l3_reduce(const float* __restrict__ part, __nv_bfloat16* __restrict__ y, int64_t count,
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
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemm_skinny_l3<MB>, kThreads, Cfg<MB>::kSmem);
  if (err != cudaSuccess) return err;
  if (per_sm < 1) per_sm = 1;
  // Split K until the blocks fill two waves, each slice at least 4 stages (256 k) long.
  const int64_t panels = (N + kPanel - 1) / kPanel;
  const int64_t total_chunks = (K + kBK - 1) / kBK;
  int64_t slices = (2LL * per_sm * sms + panels - 1) / panels;
  const int64_t most = total_chunks / 4 > 1 ? total_chunks / 4 : 1;
  if (slices > most) slices = most;
  if (slices > 65535) slices = 65535;
  const int64_t slice_chunks = (total_chunks + slices - 1) / slices;
  slices = (total_chunks + slice_chunks - 1) / slice_chunks;
  static Scratch scratch;
  float* part = nullptr;
  if (slices > 1) {
    err = ensure_scratch(scratch, static_cast<size_t>(slices) * M * N * sizeof(float));
    if (err != cudaSuccess) return err;
    part = scratch.ptr;
  }
  const dim3 grid(static_cast<unsigned>(panels), static_cast<unsigned>(slices));
  gemm_skinny_l3<MB><<<grid, kThreads, Cfg<MB>::kSmem, stream>>>(map_w, map_x, y, part, M, N, K,
                                                                 static_cast<int>(slice_chunks * kBK));
  if (slices > 1) {
    const int64_t count = static_cast<int64_t>(M) * N;
    gemm_skinny_l3_reduce<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(part, y, count,
                                                                                           static_cast<int>(slices));
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
