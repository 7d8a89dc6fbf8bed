// gemm_bf16 expert, layer 2 (dataflow): 128x128 C tile per 256-thread block (8x8 per thread); a
// 3-stage cp.async ring of bf16 A/B slices (zero-filled past the edges), each stage converted once
// into fp32 k-major buffers read as float4s (64 FMAs per 4 shared loads); blocks rasterized in bands
// of 8 tile rows for L2 reuse. Still SIMT fp32 FMA (no tensor cores).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 32;
constexpr int kStages = 3;
constexpr int kThreads = 256;
constexpr int kPitch = kBK + 8;  // bf16 per staged row: 80 bytes (16-byte aligned rows for
                                 // cp.async; 8 consecutive rows hit 8 different bank groups)
constexpr int kGroupM = 8;       // tile rows per rasterization band
constexpr int kStageElems = (kBM + kBN) * kPitch;  // bf16 per stage (A rows, then B rows)
constexpr int kSmemBytes = kStages * kStageElems * 2 + 2 * kBK * kBM * 4;  // ring + fp32 buffers

__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? 16 : 0;  // 0: nothing is read, the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Issues the copies of k-tile kt (if it exists) into `stage`: 128 rows x 4 chunks of 16 bytes for
// A and for B, two chunks of each per thread. K % 8 == 0: a chunk is all inside or all outside.
__device__ __forceinline__ void issue_stage(__nv_bfloat16* stage, const __nv_bfloat16* A,
                                            const __nv_bfloat16* B, int64_t M, int64_t N, int64_t K,
                                            int64_t m0, int64_t n0, int64_t kt, int64_t num_k) {
  if (kt < num_k) {
    const int64_t k0 = kt * kBK;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int chunk = threadIdx.x + kThreads * q;  // 0..511
      const int r = chunk / 4;
      const int c = (chunk % 4) * 8;
      const bool kin = k0 + c < K;
      const bool a_ok = kin && m0 + r < M;
      const bool b_ok = kin && n0 + r < N;
      cp_async_16(stage + r * kPitch + c, a_ok ? A + (m0 + r) * K + k0 + c : A, a_ok);
      cp_async_16(stage + (kBM + r) * kPitch + c, b_ok ? B + (n0 + r) * K + k0 + c : B, b_ok);
    }
  }
  cp_async_commit();  // always one group per k-tile (possibly empty): the wait counts stay exact
}

__global__ void __launch_bounds__(kThreads, 2)
gemm_bf16_pipelined(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                    const __nv_bfloat16* __restrict__ bias, __nv_bfloat16* __restrict__ C,
                    int64_t M, int64_t N, int64_t K, int use_bias, int tiles_m, int tiles_n) {
  extern __shared__ __align__(16) uint8_t smem[];
  __nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(smem);
  float* a_f = reinterpret_cast<float*>(smem + kStages * kStageElems * 2);  // [kBK][kBM]
  float* b_f = a_f + kBK * kBM;                                              // [kBK][kBN]

  // Rasterization: bands of kGroupM tile rows, column-major inside a band.
  const int tile = blockIdx.x;
  const int band_tiles = kGroupM * tiles_n;
  const int band = tile / band_tiles;
  const int first_m = band * kGroupM;
  const int rows = min(tiles_m - first_m, kGroupM);
  const int in_band = tile - band * band_tiles;
  const int64_t m0 = static_cast<int64_t>(first_m + in_band % rows) * kBM;
  const int64_t n0 = static_cast<int64_t>(in_band / rows) * kBN;

  const int tx = threadIdx.x % 16;  // C columns tx*4 + {0..3} and 64 + tx*4 + {0..3}
  const int ty = threadIdx.x / 16;  // C rows    ty*4 + {0..3} and 64 + ty*4 + {0..3}
  const int64_t num_k = (K + kBK - 1) / kBK;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  for (int s = 0; s < kStages - 1; ++s)
    issue_stage(ring + s * kStageElems, A, B, M, N, K, m0, n0, s, num_k);

  // Conversion role: thread t converts row t % 128 of the staged A and B tiles, k half t / 128.
  const int cr = threadIdx.x % 128;
  const int ch = (threadIdx.x / 128) * 16;

  for (int64_t kt = 0; kt < num_k; ++kt) {
    cp_async_wait<kStages - 2>();  // this thread's copies of k-tile kt have landed
    __syncthreads();               // everyone's have; and k-tile kt-1 is fully consumed
    issue_stage(ring + ((kt + kStages - 1) % kStages) * kStageElems, A, B, M, N, K, m0, n0,
                kt + kStages - 1, num_k);

    const __nv_bfloat16* st = ring + (kt % kStages) * kStageElems;
#pragma unroll
    for (int op = 0; op < 2; ++op) {
      const __nv_bfloat16* src = st + (op * kBM + cr) * kPitch + ch;
      float* dst = op == 0 ? a_f : b_f;
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        const uint4 w = *reinterpret_cast<const uint4*>(src + 8 * v);
        const int k = ch + 8 * v;
        dst[(k + 0) * kBM + cr] = lo_bf16(w.x);
        dst[(k + 1) * kBM + cr] = hi_bf16(w.x);
        dst[(k + 2) * kBM + cr] = lo_bf16(w.y);
        dst[(k + 3) * kBM + cr] = hi_bf16(w.y);
        dst[(k + 4) * kBM + cr] = lo_bf16(w.z);
        dst[(k + 5) * kBM + cr] = hi_bf16(w.z);
        dst[(k + 6) * kBM + cr] = lo_bf16(w.w);
        dst[(k + 7) * kBM + cr] = hi_bf16(w.w);
      }
    }
    __syncthreads();  // fp32 k-major tiles ready

#pragma unroll 8
    for (int k = 0; k < kBK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(a_f + k * kBM + ty * 4);
      const float4 a1 = *reinterpret_cast<const float4*>(a_f + k * kBM + 64 + ty * 4);
      const float4 b0 = *reinterpret_cast<const float4*>(b_f + k * kBN + tx * 4);
      const float4 b1 = *reinterpret_cast<const float4*>(b_f + k * kBN + 64 + tx * 4);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }

  const bool vec_ok = (N % 4) == 0;  // then every 4-column group starts 8-byte aligned
#pragma unroll
  for (int jh = 0; jh < 2; ++jh) {
    const int64_t n = n0 + jh * 64 + tx * 4;
    float bv[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      bv[j] = (use_bias && n + j < N) ? __bfloat162float(bias[n + j]) : 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t m = m0 + (i / 4) * 64 + ty * 4 + (i % 4);
      if (m >= M) continue;
      const float* a = &acc[i][jh * 4];
      __nv_bfloat16* p = C + m * N + n;
      if (vec_ok && n + 3 < N) {
        __nv_bfloat162 lo = __floats2bfloat162_rn(a[0] + bv[0], a[1] + bv[1]);
        __nv_bfloat162 hi = __floats2bfloat162_rn(a[2] + bv[2], a[3] + bv[3]);
        uint2 packed;
        packed.x = *reinterpret_cast<uint32_t*>(&lo);
        packed.y = *reinterpret_cast<uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(p) = packed;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (n + j < N) p[j] = __float2bfloat16_rn(a[j] + bv[j]);
      }
    }
  }
}

cudaError_t prepare() {
  static int configured_device = -1;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != configured_device) {
    err = cudaFuncSetAttribute(gemm_bf16_pipelined, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kSmemBytes);
    if (err != cudaSuccess) return err;
    configured_device = device;
  }
  return cudaSuccess;
}

}  // namespace

extern "C" int d2k_gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B,
                             const __nv_bfloat16* bias, __nv_bfloat16* C, int64_t M, int64_t N,
                             int64_t K, int use_bias, cudaStream_t stream) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  if (K % 8 != 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t tiles_m = (M + kBM - 1) / kBM;
  const int64_t tiles_n = (N + kBN - 1) / kBN;
  if (tiles_m * tiles_n > 0x7fffffff || kGroupM * tiles_n > 0x7fffffff) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const cudaError_t err = prepare();
  if (err != cudaSuccess) return static_cast<int>(err);
  gemm_bf16_pipelined<<<static_cast<unsigned>(tiles_m * tiles_n), kThreads, kSmemBytes, stream>>>(
      A, B, bias, C, M, N, K, use_bias, static_cast<int>(tiles_m), static_cast<int>(tiles_n));
  return static_cast<int>(cudaGetLastError());
}
