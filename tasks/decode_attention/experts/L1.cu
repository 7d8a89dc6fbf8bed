// decode_attention L1: split-K over pages (flash-decoding) with a combine kernel.
//
// A sequence of n pages is cut into S = min(32, ceil(n / 16)) chunks of about n / S pages. A block
// of 4 warps owns one (chunk, sequence, kv head); warp w computes query heads w, w + 4, ... of the
// kv head's group over the chunk, one head after another. Within a warp the 32 lanes hold 4
// dimensions each of q (pre-scaled by log2(e) / sqrt(128)); a token's score is 4 FMAs per lane and
// a butterfly sum; 4 tokens per step keep 8 loads in flight; an online softmax in base 2 rescales
// the running sum and the lane's 4 accumulators. Each warp writes its chunk's (max, sum) and 128
// unnormalised accumulators to scratch; the combine kernel (a warp per (sequence, head), lane c
// reading chunk c) rescales the chunks to the common maximum, adds them and rounds once to bf16.
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

__device__ __forceinline__ int split_count(int n) {
  return n <= 0 ? 0 : min(kMaxSplit, (n + kMinChunkPages - 1) / kMinChunkPages);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ void load4(const __nv_bfloat16* p, float (&f)[4]) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  f[0] = __uint_as_float(u.x << 16);
  f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16);
  f[3] = __uint_as_float(u.y & 0xffff0000u);
}

__global__ void __launch_bounds__(kWarps * 32)
split_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
             const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ page_ptr,
             const int* __restrict__ page_idx, const int* __restrict__ last_len, float2* __restrict__ part_ml,
             float* __restrict__ part_acc, int Hq, int Hkv, float qscale) {
  const int c = blockIdx.x, b = blockIdx.y, j = blockIdx.z;
  const int first = page_ptr[b];
  const int n = page_ptr[b + 1] - first;
  const int S = split_count(n);
  if (c >= S) return;
  const int cp = (n + S - 1) / S;
  const int p0 = c * cp, p1 = min(n, p0 + cp);
  const int L = kPage * (n - 1) + last_len[b];
  const int t0 = p0 * kPage, t1 = min(L, p1 * kPage);
  const int G = Hq / Hkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int g = warp; g < G; g += kWarps) {
    const int h = j * G + g;
    float qv[4];
    load4(q + (static_cast<int64_t>(b) * Hq + h) * kD + lane * 4, qv);
#pragma unroll
    for (int i = 0; i < 4; ++i) qv[i] *= qscale;
    float m = -INFINITY, l = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int t = t0; t < t1; t += 4) {
      float kf[4][4], vf[4][4], s[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int tt = min(t + u, t1 - 1);
        const int64_t page = page_idx[first + tt / kPage];
        const int64_t off = ((page * Hkv + j) * kPage + tt % kPage) * kD + lane * 4;
        load4(k_cache + off, kf[u]);
        load4(v_cache + off, vf[u]);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        float d = qv[0] * kf[u][0];
        d = fmaf(qv[1], kf[u][1], d);
        d = fmaf(qv[2], kf[u][2], d);
        d = fmaf(qv[3], kf[u][3], d);
        s[u] = t + u < t1 ? warp_sum(d) : -INFINITY;
      }
      const float m_new = fmaxf(m, fmaxf(fmaxf(s[0], s[1]), fmaxf(s[2], s[3])));
      const float corr = exp2f(m - m_new);
      l *= corr;
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] *= corr;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float p = exp2f(s[u] - m_new);
        l += p;
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i] = fmaf(p, vf[u][i], acc[i]);
      }
      m = m_new;
    }
    const int64_t slot = (static_cast<int64_t>(b) * kMaxSplit + c) * Hq + h;
    if (lane == 0) part_ml[slot] = make_float2(m, l);
    *reinterpret_cast<float4*>(part_acc + slot * kD + lane * 4) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  }
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
  __nv_bfloat16* o = out + (static_cast<int64_t>(b) * Hq + h) * kD + lane * 4;
  o[0] = __float2bfloat16(acc[0] * inv);
  o[1] = __float2bfloat16(acc[1] * inv);
  o[2] = __float2bfloat16(acc[2] * inv);
  o[3] = __float2bfloat16(acc[3] * inv);
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

}  // namespace

extern "C" int d2k_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                    const __nv_bfloat16* v_cache, const int* page_ptr, const int* page_idx,
                                    const int* last_len, __nv_bfloat16* out, int64_t B, int64_t Hq, int64_t Hkv,
                                    int64_t num_pages, cudaStream_t stream) {
  (void)num_pages;
  if (B < 1 || Hkv < 1 || Hq % Hkv != 0 || B > 65535 || Hkv > 65535) return static_cast<int>(cudaErrorInvalidValue);
  static Scratch scratch;
  const size_t slots = static_cast<size_t>(B) * kMaxSplit * static_cast<size_t>(Hq);
  const size_t ml_bytes = (slots * sizeof(float2) + 255) / 256 * 256;
  cudaError_t err = ensure_scratch(scratch, ml_bytes + slots * kD * sizeof(float));
  if (err != cudaSuccess) return static_cast<int>(err);
  float2* part_ml = static_cast<float2*>(scratch.ptr);
  float* part_acc = reinterpret_cast<float*>(static_cast<char*>(scratch.ptr) + ml_bytes);
  const float qscale = 1.4426950408889634f / sqrtf(static_cast<float>(kD));
  const dim3 grid(kMaxSplit, static_cast<unsigned>(B), static_cast<unsigned>(Hkv));
  split_kernel<<<grid, kWarps * 32, 0, stream>>>(
      q, k_cache, v_cache, page_ptr, page_idx, last_len, part_ml, part_acc, static_cast<int>(Hq),
      static_cast<int>(Hkv), qscale);
  const int64_t warps = B * Hq;
  const unsigned combine_blocks = static_cast<unsigned>((warps * 32 + 255) / 256);
  combine_kernel<<<combine_blocks, 256, 0, stream>>>(
      page_ptr, part_ml, part_acc, out, static_cast<int>(B), static_cast<int>(Hq));
  return static_cast<int>(cudaGetLastError());
}
