// rope expert, layer 2 (dataflow): the cos/sin row of a token serves all its heads, so read it once
// per thread and keep it in registers. One block of 256 threads per token; the W = head_dim / 4
// threads of a head slot each own two adjacent i (one packed bf16 pair of x1 and one of x2, 32-bit
// loads, and one float pair of cos and of sin, 64-bit loads); the block's 256 / W head slots walk
// the token's heads (q heads first, then k heads), four heads per step with all their loads
// issued before the math. Shapes with an odd head_dim / 2, misaligned pointers or head_dim over
// 1024 take layer 1's kernel.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kHeadsInFlight = 4;

__device__ __forceinline__ float lo_of(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_of(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ uint32_t pack2(float a, float b) {
  const __nv_bfloat162 o = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&o);
}

__global__ void __launch_bounds__(kThreads)
rope_pairs(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
           const int* __restrict__ positions, const float* __restrict__ cos_cache,
           const float* __restrict__ sin_cache, __nv_bfloat16* __restrict__ q_out,
           __nv_bfloat16* __restrict__ k_out, int q_heads, int kv_heads, int head_dim) {
  const int h = head_dim / 2;
  const int W = h / 2;                 // threads per head: words of x1 (and of x2)
  const int slots = kThreads / W;      // heads handled side by side
  const int tid = static_cast<int>(threadIdx.x);
  const int slot = tid / W;
  const int w = tid - slot * W;
  if (slot >= slots) return;  // the last threads when W does not divide 256 (no barriers here)
  const int64_t t = blockIdx.x;
  const int heads = q_heads + kv_heads;

  const int64_t p = positions[t];
  const float2 c = reinterpret_cast<const float2*>(cos_cache + p * h)[w];  // i = 2w, 2w + 1
  const float2 s = reinterpret_cast<const float2*>(sin_cache + p * h)[w];

  for (int head0 = slot; head0 < heads; head0 += slots * kHeadsInFlight) {
    uint32_t a[kHeadsInFlight], b[kHeadsInFlight];
#pragma unroll
    for (int u = 0; u < kHeadsInFlight; ++u) {
      const int head = head0 + u * slots;
      a[u] = b[u] = 0u;
      if (head < heads) {
        const bool is_q = head < q_heads;
        const int64_t row = is_q ? t * q_heads + head : t * kv_heads + (head - q_heads);
        const uint32_t* x = reinterpret_cast<const uint32_t*>((is_q ? q : k) + row * head_dim);
        a[u] = x[w];      // x1: elements 2w, 2w + 1
        b[u] = x[w + W];  // x2: elements h + 2w, h + 2w + 1
      }
    }
#pragma unroll
    for (int u = 0; u < kHeadsInFlight; ++u) {
      const int head = head0 + u * slots;
      if (head < heads) {
        const bool is_q = head < q_heads;
        const int64_t row = is_q ? t * q_heads + head : t * kv_heads + (head - q_heads);
        uint32_t* y = reinterpret_cast<uint32_t*>((is_q ? q_out : k_out) + row * head_dim);
        const float x10 = lo_of(a[u]), x11 = hi_of(a[u]), x20 = lo_of(b[u]), x21 = hi_of(b[u]);
        y[w] = pack2(x10 * c.x - x20 * s.x, x11 * c.y - x21 * s.y);
        y[w + W] = pack2(x20 * c.x + x10 * s.x, x21 * c.y + x11 * s.y);
      }
    }
  }
}

// Layer 1's kernel: any even head_dim, any alignment.
__global__ void __launch_bounds__(kThreads)
rope_block_per_token(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                     const int* __restrict__ positions, const float* __restrict__ cos_cache,
                     const float* __restrict__ sin_cache, __nv_bfloat16* __restrict__ q_out,
                     __nv_bfloat16* __restrict__ k_out, int q_heads, int kv_heads, int head_dim) {
  const int64_t t = blockIdx.x;
  const int h = head_dim / 2;
  const int pairs = (q_heads + kv_heads) * h;
  const int64_t p = positions[t];
  const float* cr = cos_cache + p * h;
  const float* sr = sin_cache + p * h;
  for (int j = static_cast<int>(threadIdx.x); j < pairs; j += kThreads) {
    const int head = j / h;
    const int i = j - head * h;
    const bool is_q = head < q_heads;
    const int64_t row = is_q ? t * q_heads + head : t * kv_heads + (head - q_heads);
    const __nv_bfloat16* x = (is_q ? q : k) + row * head_dim;
    __nv_bfloat16* y = (is_q ? q_out : k_out) + row * head_dim;
    const float c = cr[i], s = sr[i];
    const float x1 = __bfloat162float(x[i]), x2 = __bfloat162float(x[i + h]);
    y[i] = __float2bfloat16(x1 * c - x2 * s);
    y[i + h] = __float2bfloat16(x2 * c + x1 * s);
  }
}

}  // namespace

extern "C" int d2k_rope(const __nv_bfloat16* q, const __nv_bfloat16* k, const int* positions,
                        const float* cos_cache, const float* sin_cache, __nv_bfloat16* q_out,
                        __nv_bfloat16* k_out, int64_t tokens, int64_t q_heads, int64_t kv_heads,
                        int64_t head_dim, cudaStream_t stream) {
  if (tokens <= 0) return 0;
  if (tokens > 0x7fffffff || (q_heads + kv_heads) * (head_dim / 2) > 0x7fffffff)
    return static_cast<int>(cudaErrorInvalidValue);
  const int qh = static_cast<int>(q_heads), kvh = static_cast<int>(kv_heads), hd = static_cast<int>(head_dim);
  const uintptr_t words = reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) |
                          reinterpret_cast<uintptr_t>(q_out) | reinterpret_cast<uintptr_t>(k_out);
  const uintptr_t pairs = reinterpret_cast<uintptr_t>(cos_cache) | reinterpret_cast<uintptr_t>(sin_cache);
  if (hd >= 4 && hd % 4 == 0 && hd <= 1024 && (words & 3) == 0 && (pairs & 7) == 0)
    rope_pairs<<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(q, k, positions, cos_cache, sin_cache,
                                                                      q_out, k_out, qh, kvh, hd);
  else
    rope_block_per_token<<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(
        q, k, positions, cos_cache, sin_cache, q_out, k_out, qh, kvh, hd);
  return static_cast<int>(cudaGetLastError());
}
