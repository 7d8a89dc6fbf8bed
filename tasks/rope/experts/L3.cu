// rope expert, layer 3 (low level): layer 2's dataflow (the token's cos/sin read once per thread and
// reused across its heads, several heads' loads in flight) with 128-bit accesses and a warp per
// token: the W = head_dim / 16 lanes of a head group each own 8 consecutive i, i.e. one 16-byte
// vector of x1, one of x2, two of cos and two of sin (8 floats each), and write one 16-byte vector
// to each half of the output row. A warp covers 32 / W heads per step (4 for head_dim 128, 8 for
// 64), every lane busy, in rounds of 4 steps (128 bytes of x per lane), software-pipelined: the
// next round's loads are issued before this round's math and stores (2 blocks of 256 threads per
// SM at 110 registers). Shapes with head_dim not a multiple of 16 (or over 512) or misaligned
// pointers take layer 2's kernels.
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


// (x1 c - x2 s, x2 c + x1 s) on one packed word of x1 and one of x2 (elements e and e + 1).
__device__ __forceinline__ void rotate_word(uint32_t a, uint32_t b, float c0, float c1, float s0, float s1,
                                            uint32_t& o1, uint32_t& o2) {
  const float x10 = lo_of(a), x11 = hi_of(a), x20 = lo_of(b), x21 = hi_of(b);
  o1 = pack2(x10 * c0 - x20 * s0, x11 * c1 - x21 * s1);
  o2 = pack2(x20 * c0 + x10 * s0, x21 * c1 + x11 * s1);
}

// Warp per token. The W = head_dim / 16 lanes of a head group each own 8 consecutive i (one
// 16-byte vector of x1 and one of x2, two of cos and two of sin); a warp covers H = 32 / W heads
// per step (4 for head_dim 128, 8 for 64) and walks the token's q heads, then its k heads, 4 steps
// per round with every load of a round issued together (128 bytes of x per lane), and (RP_PIPE)
// the next round's loads issued before this round's math, so two rounds are in flight. The lane's
// 8 cos and 8 sin values are read once per token and serve all its heads. A block is 8 warps,
// i.e. 8 tokens; 110 registers, no spills: 2 blocks of 256 threads per SM. Variants for
// bench/ (vector_add/bench/sweep): RP_STEPS steps per round, RP_PIPE 0 (one round in flight),
// RP_MINB (blocks per SM for the register budget), RP_PERSIST (a resident grid, warps striding
// over tokens); measured on the H200 (2026-12-02) the defaults were the fastest on the large shapes.
#ifndef RP_STEPS
#define RP_STEPS 4  // tasks/vector_add/bench/sweep/build.sh builds variants with -DRP_STEPS=..., -DRP_PIPE=..., -DRP_MINB=..., -DRP_PERSIST=...
#endif
#ifndef RP_PIPE
#define RP_PIPE 1
#endif
#ifndef RP_MINB
#define RP_MINB 2
#endif
#ifndef RP_PERSIST
#define RP_PERSIST 0
#endif
constexpr int kStepsInFlight = RP_STEPS;
constexpr int kWarpsPerBlock = kThreads / 32;

__global__ void __launch_bounds__(kThreads, RP_MINB)
rope_warp_vec8(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
               const int* __restrict__ positions, const float* __restrict__ cos_cache,
               const float* __restrict__ sin_cache, __nv_bfloat16* __restrict__ q_out,
               __nv_bfloat16* __restrict__ k_out, int64_t tokens, int q_heads, int kv_heads, int head_dim) {
  const int h = head_dim / 2;
  const int W = h / 8;             // lanes per head: 16-byte vectors of x1 (and of x2)
  const int H = 32 / W;            // heads per warp step
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int g = lane / W;          // head within the step
  const int w = lane - g * W;      // vector within the half row
  if (g >= H) return;              // lanes past H * W (no barriers here)
  const int heads = q_heads + kv_heads;
  const int steps = (heads + H - 1) / H;
#if RP_PERSIST
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); t < tokens; t += warps) {
#else
  {
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
    if (t >= tokens) return;  // whole warps past the end
#endif
    const int64_t p = positions[t];
    // Element offset of a head row of this token in q (q heads) or k (k heads): every tensor has
    // fewer than 2^31 elements, so 32 bits hold it (fewer registers than 64-bit row arithmetic).
    const uint32_t q_base = static_cast<uint32_t>(t * q_heads) * static_cast<uint32_t>(head_dim);
    const uint32_t k_base = static_cast<uint32_t>(t * kv_heads) * static_cast<uint32_t>(head_dim);
    auto row_offset = [&](int head) -> uint32_t {
      return head < q_heads ? q_base + static_cast<uint32_t>(head) * head_dim
                            : k_base + static_cast<uint32_t>(head - q_heads) * head_dim;
    };
    // Loads of the heads st * H + g, st in [s0, s0 + kStepsInFlight): all issued before any math.
    auto load_round = [&](uint4 (&a)[kStepsInFlight], uint4 (&b)[kStepsInFlight], int s0) {
#pragma unroll
      for (int u = 0; u < kStepsInFlight; ++u) {
        const int head = (s0 + u) * H + g;
        a[u] = b[u] = make_uint4(0u, 0u, 0u, 0u);
        if (head < heads) {
          const uint4* x = reinterpret_cast<const uint4*>(head < q_heads ? q + row_offset(head) : k + row_offset(head));
          a[u] = x[w];      // x1: elements 8w .. 8w + 7
          b[u] = x[w + W];  // x2: elements h + 8w .. h + 8w + 7
        }
      }
    };
    uint4 a[kStepsInFlight], b[kStepsInFlight];
    load_round(a, b, 0);
    // cos and sin of i = 8w .. 8w + 7 at this token's position: four 128-bit loads, kept for all heads.
    const float4* cp = reinterpret_cast<const float4*>(cos_cache + p * h) + 2 * w;
    const float4* sp = reinterpret_cast<const float4*>(sin_cache + p * h) + 2 * w;
    const float4 ca = cp[0], cb = cp[1], sa = sp[0], sb = sp[1];

    for (int s0 = 0; s0 < steps; s0 += kStepsInFlight) {
#if RP_PIPE
      // The next round's loads go out before this round's math and stores.
      uint4 na[kStepsInFlight], nb[kStepsInFlight];
      if (s0 + kStepsInFlight < steps) load_round(na, nb, s0 + kStepsInFlight);
#endif
#pragma unroll
      for (int u = 0; u < kStepsInFlight; ++u) {
        const int head = (s0 + u) * H + g;
        if (head < heads) {
          uint4* y = reinterpret_cast<uint4*>(head < q_heads ? q_out + row_offset(head) : k_out + row_offset(head));
          uint4 o1, o2;
          rotate_word(a[u].x, b[u].x, ca.x, ca.y, sa.x, sa.y, o1.x, o2.x);
          rotate_word(a[u].y, b[u].y, ca.z, ca.w, sa.z, sa.w, o1.y, o2.y);
          rotate_word(a[u].z, b[u].z, cb.x, cb.y, sb.x, sb.y, o1.z, o2.z);
          rotate_word(a[u].w, b[u].w, cb.z, cb.w, sb.z, sb.w, o1.w, o2.w);
          y[w] = o1;
          y[w + W] = o2;
        }
      }
#if RP_PIPE
#pragma unroll
      for (int u = 0; u < kStepsInFlight; ++u) {
        a[u] = na[u];
        b[u] = nb[u];
      }
#else
      if (s0 + kStepsInFlight < steps) load_round(a, b, s0 + kStepsInFlight);
#endif
    }
  }
}

int rope_grid(int64_t tokens) {
  const int64_t blocks = (tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
#if RP_PERSIST
  static const int resident = [] {
    int dev = 0, sms = 0, per = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      sms = 132;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, rope_warp_vec8, kThreads, 0) != cudaSuccess || per < 1) per = 1;
    return sms * per;
  }();
  return static_cast<int>(blocks < resident ? blocks : resident);
#else
  return static_cast<int>(blocks);
#endif
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
  const uintptr_t data = reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) |
                         reinterpret_cast<uintptr_t>(q_out) | reinterpret_cast<uintptr_t>(k_out);
  const uintptr_t tables = reinterpret_cast<uintptr_t>(cos_cache) | reinterpret_cast<uintptr_t>(sin_cache);
  const unsigned grid = static_cast<unsigned>(tokens);
  if (hd >= 16 && hd % 16 == 0 && hd <= 512 && ((data | tables) & 15) == 0)
    rope_warp_vec8<<<static_cast<unsigned>(rope_grid(tokens)), kThreads, 0, stream>>>(
        q, k, positions, cos_cache, sin_cache, q_out, k_out, tokens, qh, kvh, hd);
  else if (hd >= 4 && hd % 4 == 0 && hd <= 1024 && (data & 3) == 0 && (tables & 7) == 0)
    rope_pairs<<<grid, kThreads, 0, stream>>>(q, k, positions, cos_cache, sin_cache, q_out, k_out, qh, kvh, hd);
  else
    rope_block_per_token<<<grid, kThreads, 0, stream>>>(q, k, positions, cos_cache, sin_cache, q_out, k_out,
                                                        qh, kvh, hd);
  return static_cast<int>(cudaGetLastError());
}
