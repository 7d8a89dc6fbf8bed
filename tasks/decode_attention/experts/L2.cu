// decode_attention L2: the G query heads of a kv head share one read of its keys and values,
// staged through shared memory by cp.async; split-K over pages and a combine kernel as in L1.
//
// A block of 4 warps owns one (chunk, sequence, kv head). Each warp takes every 4th page of the
// chunk and runs its own 3-stage cp.async ring (K and V of one page per stage: 8 KiB), so warps
// never wait for each other until the end. q of the G heads (fp32, pre-scaled by log2(e)/sqrt(128))
// sits in shared memory. Scores: lane = (token, half of the dimensions); a lane reads its 64 key
// dimensions once (16-byte chunks, XOR-swizzled by token so that 16 lanes reading the same chunk
// index of 16 rows hit distinct banks) and multiplies them by every head's q; one shuffle joins the
// halves. Softmax: per head a page maximum (4 shuffles), p into shared memory. P.V: lane = 4 output
// dimensions; every value row is read once for all heads. At the end the 4 warps' (max, sum, acc)
// are merged in shared memory and the block writes one partial per head for the combine kernel.
#include <cmath>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kD = 128;
constexpr int kPage = 16;
constexpr int kMaxSplit = 32;
constexpr int kMinChunkPages = 16;
constexpr int kWarps = 4;
constexpr int kStages = 3;
constexpr int kPageBytes = kPage * kD * 2;               // 4 KiB: one (page, kv head) of K or of V
constexpr int kStageBytes = 2 * kPageBytes;               // K then V
constexpr int kWarpRing = kStages * kStageBytes;          // 24 KiB per warp
constexpr int kMaxG = 16;

__device__ __forceinline__ int split_count(int n) {
  return n <= 0 ? 0 : min(kMaxSplit, (n + kMinChunkPages - 1) / kMinChunkPages);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void bf16x8(const uint4 u, float (&f)[8]) {
  f[0] = __uint_as_float(u.x << 16);
  f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16);
  f[3] = __uint_as_float(u.y & 0xffff0000u);
  f[4] = __uint_as_float(u.z << 16);
  f[5] = __uint_as_float(u.z & 0xffff0000u);
  f[6] = __uint_as_float(u.w << 16);
  f[7] = __uint_as_float(u.w & 0xffff0000u);
}

// One page of K (swizzled: 16-byte chunk c of row t at chunk c ^ t) and of V (plain) into a stage.
__device__ __forceinline__ void load_page(unsigned char* stage, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                          int lane) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int e = lane + 32 * i, t = e / 16, c = e % 16;
    cp_async16(stage + (t * 16 + (c ^ t)) * 16, k + e * 8);
    cp_async16(stage + kPageBytes + e * 16, v + e * 8);
  }
}

template <int GMAX>
__global__ void __launch_bounds__(kWarps * 32)
split_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
             const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ page_ptr,
             const int* __restrict__ page_idx, const int* __restrict__ last_len, float2* __restrict__ part_ml,
             float* __restrict__ part_acc, int Hq, int Hkv, float qscale) {
  extern __shared__ uint4 smem_raw[];  // 16-byte aligned: enough for the 16-byte copies
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem_raw);
  float* qs = reinterpret_cast<float*>(smem + kWarps * kWarpRing);  // [GMAX][128]
  float* ps = qs + GMAX * kD;                                         // [warp][GMAX][16]
  const int c = blockIdx.x, b = blockIdx.y, j = blockIdx.z;
  const int first = page_ptr[b];
  const int n = page_ptr[b + 1] - first;
  const int S = split_count(n);
  if (c >= S) return;
  const int cp = (n + S - 1) / S;
  const int p0 = c * cp, p1 = min(n, p0 + cp);
  const int last = last_len[b];
  const int G = Hq / Hkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int e = threadIdx.x; e < G * kD; e += kWarps * 32)
    qs[e] = __bfloat162float(q[(static_cast<int64_t>(b) * Hq + j * G) * kD + e]) * qscale;
  __syncthreads();

  unsigned char* ring = smem + warp * kWarpRing;
  float* pw = ps + warp * GMAX * kPage;
  const int npages = p1 > p0 + warp ? (p1 - p0 - warp + kWarps - 1) / kWarps : 0;
  auto issue = [&](int i) {
    if (i < npages) {
      const int64_t page = page_idx[first + p0 + warp + i * kWarps];
      const int64_t off = (page * Hkv + j) * kPage * kD;
      load_page(ring + (i % kStages) * kStageBytes, k_cache + off, v_cache + off, lane);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(i);

  float m[GMAX], l[GMAX], acc[GMAX][4];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
    acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.0f;
  }
  const int t = lane % 16, half = lane / 16;
  for (int i = 0; i < npages; ++i) {
    cp_async_wait<kStages - 2>();
    __syncwarp();
    issue(i + kStages - 1);
    const unsigned char* ks = ring + (i % kStages) * kStageBytes;
    const unsigned char* vs = ks + kPageBytes;
    const int pg = p0 + warp + i * kWarps;
    const int cnt = pg == n - 1 ? last : kPage;

    float s[GMAX];
#pragma unroll
    for (int g = 0; g < GMAX; ++g) s[g] = 0.0f;
#pragma unroll
    for (int cc = 0; cc < 8; ++cc) {
      const int chunk = half * 8 + cc;
      float kf[8];
      bf16x8(*reinterpret_cast<const uint4*>(ks + (t * 16 + (chunk ^ t)) * 16), kf);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        if (g < G) {
          const float4 qa = *reinterpret_cast<const float4*>(qs + g * kD + chunk * 8);
          const float4 qb = *reinterpret_cast<const float4*>(qs + g * kD + chunk * 8 + 4);
          s[g] = fmaf(qa.x, kf[0], s[g]);
          s[g] = fmaf(qa.y, kf[1], s[g]);
          s[g] = fmaf(qa.z, kf[2], s[g]);
          s[g] = fmaf(qa.w, kf[3], s[g]);
          s[g] = fmaf(qb.x, kf[4], s[g]);
          s[g] = fmaf(qb.y, kf[5], s[g]);
          s[g] = fmaf(qb.z, kf[6], s[g]);
          s[g] = fmaf(qb.w, kf[7], s[g]);
        }
      }
    }
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      if (g < G) {
        float sc = s[g] + __shfl_xor_sync(0xffffffffu, s[g], 16);
        if (t >= cnt) sc = -INFINITY;
        float pm = sc;
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) pm = fmaxf(pm, __shfl_xor_sync(0xffffffffu, pm, o));
        const float m_new = fmaxf(m[g], pm);
        const float corr = exp2f(m[g] - m_new);
        const float p = exp2f(sc - m_new);
        m[g] = m_new;
        l[g] = l[g] * corr + p;  // the lane's own token (both halves hold it; half 0 is summed at the end)
        acc[g][0] *= corr;
        acc[g][1] *= corr;
        acc[g][2] *= corr;
        acc[g][3] *= corr;
        if (half == 0) pw[g * kPage + t] = p;
      }
    }
    __syncwarp();
    for (int tt = 0; tt < cnt; ++tt) {
      const uint2 u = *reinterpret_cast<const uint2*>(vs + tt * kD * 2 + lane * 8);
      const float v0 = __uint_as_float(u.x << 16), v1 = __uint_as_float(u.x & 0xffff0000u);
      const float v2 = __uint_as_float(u.y << 16), v3 = __uint_as_float(u.y & 0xffff0000u);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        if (g < G) {
          const float p = pw[g * kPage + tt];
          acc[g][0] = fmaf(p, v0, acc[g][0]);
          acc[g][1] = fmaf(p, v1, acc[g][1]);
          acc[g][2] = fmaf(p, v2, acc[g][2]);
          acc[g][3] = fmaf(p, v3, acc[g][3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Merge the warps: every warp's (m, l) per head and its accumulators, through shared memory.
  __syncthreads();
  float* macc = reinterpret_cast<float*>(smem);              // [warp][GMAX][128]
  float* mml = macc + kWarps * GMAX * kD;                     // [warp][GMAX][2]
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    if (g < G) {
      float lw = half == 0 ? l[g] : 0.0f;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) lw += __shfl_xor_sync(0xffffffffu, lw, o);
      *reinterpret_cast<float4*>(macc + (warp * GMAX + g) * kD + lane * 4) =
          make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
      if (lane == 0) {
        mml[(warp * GMAX + g) * 2] = m[g];
        mml[(warp * GMAX + g) * 2 + 1] = lw;
      }
    }
  }
  __syncthreads();
  const int d = threadIdx.x;  // 128 threads = 128 dimensions
  for (int g = 0; g < G; ++g) {
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, mml[(w * GMAX + g) * 2]);
    float Ls = 0.0f, a = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float lw = mml[(w * GMAX + g) * 2 + 1];
      const float wt = lw > 0.0f ? exp2f(mml[(w * GMAX + g) * 2] - M) : 0.0f;
      Ls += wt * lw;
      a += wt * macc[(w * GMAX + g) * kD + d];
    }
    const int64_t slot = (static_cast<int64_t>(b) * kMaxSplit + c) * Hq + j * G + g;
    if (d == 0) part_ml[slot] = make_float2(M, Ls);
    part_acc[slot * kD + d] = a;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void combine_kernel(const int* __restrict__ page_ptr, const float2* __restrict__ part_ml,
                               const float* __restrict__ part_acc, __nv_bfloat16* __restrict__ out, int B, int Hq) {
  const int w = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (w >= B * Hq) return;
  const int b = w / Hq, h = w % Hq;
  const int S = split_count(page_ptr[b + 1] - page_ptr[b]);
  const int64_t base = static_cast<int64_t>(b) * kMaxSplit * Hq + h;
  const float2 ml = lane < S ? part_ml[base + static_cast<int64_t>(lane) * Hq] : make_float2(-INFINITY, 0.0f);
  float M = ml.x;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  const float wgt = ml.y > 0.0f ? exp2f(ml.x - M) : 0.0f;
  const float total = warp_sum(wgt * ml.y);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int c = 0; c < S; ++c) {
    const float wc = __shfl_sync(0xffffffffu, wgt, c);
    const float4 a = *reinterpret_cast<const float4*>(part_acc + (base + static_cast<int64_t>(c) * Hq) * kD + lane * 4);
    acc[0] = fmaf(wc, a.x, acc[0]);
    acc[1] = fmaf(wc, a.y, acc[1]);
    acc[2] = fmaf(wc, a.z, acc[2]);
    acc[3] = fmaf(wc, a.w, acc[3]);
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(out + (static_cast<int64_t>(b) * Hq + h) * kD + lane * 4);
  o[0] = __floats2bfloat162_rn(acc[0] * inv, acc[1] * inv);
  o[1] = __floats2bfloat162_rn(acc[2] * inv, acc[3] * inv);
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

template <int GMAX>
cudaError_t launch(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                   const int* page_ptr, const int* page_idx, const int* last_len, float2* part_ml, float* part_acc,
                   int64_t B, int64_t Hq, int64_t Hkv, cudaStream_t stream) {
  const size_t ring = static_cast<size_t>(kWarps) * kWarpRing + GMAX * kD * 4 + kWarps * GMAX * kPage * 4;
  const size_t merge = static_cast<size_t>(kWarps) * GMAX * (kD + 2) * 4;
  const size_t smem = ring > merge ? ring : merge;
  cudaError_t err = cudaFuncSetAttribute(split_kernel<GMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const float qscale = 1.4426950408889634f / sqrtf(static_cast<float>(kD));
  const dim3 grid(kMaxSplit, static_cast<unsigned>(B), static_cast<unsigned>(Hkv));
  split_kernel<GMAX><<<grid, kWarps * 32, smem, stream>>>(q, k_cache, v_cache, page_ptr, page_idx, last_len, part_ml, part_acc,
                                 static_cast<int>(Hq), static_cast<int>(Hkv), qscale);
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                    const __nv_bfloat16* v_cache, const int* page_ptr, const int* page_idx,
                                    const int* last_len, __nv_bfloat16* out, int64_t B, int64_t Hq, int64_t Hkv,
                                    int64_t num_pages, cudaStream_t stream) {
  (void)num_pages;
  if (B < 1 || Hkv < 1 || Hq % Hkv != 0 || Hq / Hkv > kMaxG || B > 65535 || Hkv > 65535)
    return static_cast<int>(cudaErrorInvalidValue);
  static Scratch scratch;
  const size_t slots = static_cast<size_t>(B) * kMaxSplit * static_cast<size_t>(Hq);
  const size_t ml_bytes = (slots * sizeof(float2) + 255) / 256 * 256;
  cudaError_t err = ensure_scratch(scratch, ml_bytes + slots * kD * sizeof(float));
  if (err != cudaSuccess) return static_cast<int>(err);
  float2* part_ml = static_cast<float2*>(scratch.ptr);
  float* part_acc = reinterpret_cast<float*>(static_cast<char*>(scratch.ptr) + ml_bytes);
  const int64_t G = Hq / Hkv;
  err = G <= 4   ? launch<4>(q, k_cache, v_cache, page_ptr, page_idx, last_len, part_ml, part_acc, B, Hq, Hkv, stream)
        : G <= 8 ? launch<8>(q, k_cache, v_cache, page_ptr, page_idx, last_len, part_ml, part_acc, B, Hq, Hkv, stream)
                 : launch<16>(q, k_cache, v_cache, page_ptr, page_idx, last_len, part_ml, part_acc, B, Hq, Hkv, stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int64_t warps = B * Hq;
  const unsigned combine_blocks = static_cast<unsigned>((warps * 32 + 255) / 256);
  combine_kernel<<<combine_blocks, 256, 0, stream>>>(
      page_ptr, part_ml, part_acc, out, static_cast<int>(B), static_cast<int>(Hq));
  return static_cast<int>(cudaGetLastError());
}
