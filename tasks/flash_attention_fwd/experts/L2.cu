// flash_attention_fwd expert, layer 2 (dataflow): one 256-thread block per (64-query tile, batch*head),
// heaviest causal tiles first. Q is converted once to fp32 in shared memory; bf16 K/V tiles of 64 keys
// stream through a 2-stage cp.async ring (zero-filled past the sequence end) while the previous tile is
// computed; each thread owns a 4x4 block of scores and a 4 x (D/16) block of O in registers; causal key
// tiles above the diagonal are skipped. Still SIMT fp32 FMA (no tensor cores).
#include <cmath>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kBQ = 64;        // query rows per block
constexpr int kBK = 64;        // keys per tile
constexpr int kThreads = 256;  // 16 x 16: ty = row group, tx = key / column group

template <int D>
struct Cfg {
  static constexpr int QS = D + 4;      // floats per fp32 Q row (rows ty and ty+1 in different banks)
  static constexpr int KS = D + 8;      // bf16 per K/V row: 16-byte aligned rows, 8 consecutive rows
                                        // start in 8 different bank groups
  static constexpr int PS = kBK + 16;   // floats per P row: the two half-warps write disjoint banks
  static constexpr int kQBytes = kBQ * QS * 4;
  static constexpr int kTileBytes = kBK * KS * 2;  // one K or V tile
  static constexpr int kPBytes = kBQ * PS * 4;
  static constexpr int kSmem = kQBytes + 4 * kTileBytes + kPBytes;
};

__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? 16 : 0;  // 0: nothing is read, the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Issues the copies of the K and V tile starting at key j0: kBK rows x D/8 chunks of 16 bytes each.
template <int D>
__device__ __forceinline__ void issue_kv(__nv_bfloat16* sk, __nv_bfloat16* sv,
                                         const __nv_bfloat16* kh, const __nv_bfloat16* vh,
                                         int64_t j0, int64_t S) {
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int u = 0; u < kBK * kChunks / kThreads; ++u) {
    const int c = threadIdx.x + kThreads * u;
    const int r = c / kChunks, ch = c % kChunks;
    const bool ok = j0 + r < S;
    const int64_t off = ok ? (j0 + r) * D + ch * 8 : 0;
    cp_async_16(sk + r * Cfg<D>::KS + ch * 8, kh + off, ok);
    cp_async_16(sv + r * Cfg<D>::KS + ch * 8, vh + off, ok);
  }
  cp_async_commit();
}

template <int D>
__global__ void __launch_bounds__(kThreads)
flash_fwd_l2(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
             const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ o, int64_t S,
             int64_t bh_count, int64_t q_tiles, int causal, float scale_log2) {
  using C = Cfg<D>;
  constexpr int NC = D / 16;  // output columns per thread: tx * NC .. tx * NC + NC - 1
  extern __shared__ __align__(16) unsigned char smem[];
  float* sq = reinterpret_cast<float*>(smem);
  __nv_bfloat16* sk0 = reinterpret_cast<__nv_bfloat16*>(smem + C::kQBytes);
  __nv_bfloat16* sv0 = reinterpret_cast<__nv_bfloat16*>(smem + C::kQBytes + 2 * C::kTileBytes);
  float* sp = reinterpret_cast<float*>(smem + C::kQBytes + 4 * C::kTileBytes);

  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  // Heaviest query tiles (the last ones when causal) are scheduled first.
  const int64_t bh = static_cast<int64_t>(blockIdx.x) % bh_count;
  const int64_t qt = q_tiles - 1 - static_cast<int64_t>(blockIdx.x) / bh_count;
  const int64_t q0 = qt * kBQ;
  const __nv_bfloat16* qh = q + bh * S * D;
  const __nv_bfloat16* kh = k + bh * S * D;
  const __nv_bfloat16* vh = v + bh * S * D;

  const int64_t all_tiles = (S + kBK - 1) / kBK;
  const int64_t nt = causal ? (q0 / kBK + 1 < all_tiles ? q0 / kBK + 1 : all_tiles) : all_tiles;

  issue_kv<D>(sk0, sv0, kh, vh, 0, S);
  // Q tile -> fp32 shared memory, once (zero rows past the sequence end).
#pragma unroll
  for (int u = 0; u < kBQ * (D / 8) / kThreads; ++u) {
    const int c = tid + kThreads * u;
    const int r = c / (D / 8), ch = c % (D / 8);
    uint4 w = make_uint4(0u, 0u, 0u, 0u);
    if (q0 + r < S) w = *reinterpret_cast<const uint4*>(qh + (q0 + r) * D + ch * 8);
    float4* dst = reinterpret_cast<float4*>(sq + r * C::QS + ch * 8);
    dst[0] = make_float4(lo_bf16(w.x), hi_bf16(w.x), lo_bf16(w.y), hi_bf16(w.y));
    dst[1] = make_float4(lo_bf16(w.z), hi_bf16(w.z), lo_bf16(w.w), hi_bf16(w.w));
  }

  float m[4], l[4], acc[4][NC];
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    m[a] = -INFINITY;
    l[a] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[a][c] = 0.0f;
  }
  cp_async_wait_all();
  __syncthreads();

  for (int64_t t = 0; t < nt; ++t) {
    const int buf = static_cast<int>(t & 1);
    if (t + 1 < nt) {  // the other buffer was last read before the barrier ending iteration t-1
      issue_kv<D>(sk0 + (buf ^ 1) * (C::kTileBytes / 2), sv0 + (buf ^ 1) * (C::kTileBytes / 2), kh,
                  vh, (t + 1) * kBK, S);
    }
    const __nv_bfloat16* sk = sk0 + buf * (C::kTileBytes / 2);
    const __nv_bfloat16* sv = sv0 + buf * (C::kTileBytes / 2);
    const int64_t j0 = t * kBK;

    // Scores: rows ty + 16 a, keys tx + 16 b; 8 d per step (one 16-byte K read per key).
    float s[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) s[a][b] = 0.0f;
#pragma unroll 4
    for (int dc = 0; dc < D / 8; ++dc) {
      float kf[4][8];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const uint4 w = *reinterpret_cast<const uint4*>(sk + (tx + 16 * b) * C::KS + dc * 8);
        kf[b][0] = lo_bf16(w.x); kf[b][1] = hi_bf16(w.x);
        kf[b][2] = lo_bf16(w.y); kf[b][3] = hi_bf16(w.y);
        kf[b][4] = lo_bf16(w.z); kf[b][5] = hi_bf16(w.z);
        kf[b][6] = lo_bf16(w.w); kf[b][7] = hi_bf16(w.w);
      }
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        const float4 x0 = *reinterpret_cast<const float4*>(sq + (ty + 16 * a) * C::QS + dc * 8);
        const float4 x1 = *reinterpret_cast<const float4*>(sq + (ty + 16 * a) * C::QS + dc * 8 + 4);
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          float r = s[a][b];
          r = fmaf(x0.x, kf[b][0], r); r = fmaf(x0.y, kf[b][1], r);
          r = fmaf(x0.z, kf[b][2], r); r = fmaf(x0.w, kf[b][3], r);
          r = fmaf(x1.x, kf[b][4], r); r = fmaf(x1.y, kf[b][5], r);
          r = fmaf(x1.z, kf[b][6], r); r = fmaf(x1.w, kf[b][7], r);
          s[a][b] = r;
        }
      }
    }

    // Online softmax. The 16 threads of a half-warp (same ty) share rows ty + 16 a.
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int64_t i = q0 + ty + 16 * a;
      float mx = -INFINITY;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int64_t j = j0 + tx + 16 * b;
        const bool ok = j < S && (!causal || j <= i);
        s[a][b] = ok ? s[a][b] * scale_log2 : -INFINITY;
        mx = fmaxf(mx, s[a][b]);
      }
#pragma unroll
      for (int off = 8; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m[a], mx);
      const float m_use = (m_new == -INFINITY) ? 0.0f : m_new;  // key 0 is always allowed: finite
      const float alpha = exp2f(m[a] - m_use);
      float psum = 0.0f;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float p = exp2f(s[a][b] - m_use);
        psum += p;
        sp[(ty + 16 * a) * C::PS + tx + 16 * b] = p;
      }
#pragma unroll
      for (int off = 8; off > 0; off /= 2) psum += __shfl_xor_sync(0xffffffffu, psum, off);
      l[a] = l[a] * alpha + psum;
      m[a] = m_new;
#pragma unroll
      for (int c = 0; c < NC; ++c) acc[a][c] *= alpha;
    }
    __syncwarp();  // P rows ty + 16 a are written and read by the same half-warp only

    // O += P V: rows ty + 16 a, columns tx * NC + c.
#pragma unroll 4
    for (int jj = 0; jj < kBK; ++jj) {
      float vf[NC];
      if constexpr (NC == 8) {
        const uint4 w = *reinterpret_cast<const uint4*>(sv + jj * C::KS + tx * 8);
        vf[0] = lo_bf16(w.x); vf[1] = hi_bf16(w.x); vf[2] = lo_bf16(w.y); vf[3] = hi_bf16(w.y);
        vf[4] = lo_bf16(w.z); vf[5] = hi_bf16(w.z); vf[6] = lo_bf16(w.w); vf[7] = hi_bf16(w.w);
      } else {
        const uint2 w = *reinterpret_cast<const uint2*>(sv + jj * C::KS + tx * 4);
        vf[0] = lo_bf16(w.x); vf[1] = hi_bf16(w.x); vf[2] = lo_bf16(w.y); vf[3] = hi_bf16(w.y);
      }
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        const float p = sp[(ty + 16 * a) * C::PS + jj];
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[a][c] = fmaf(p, vf[c], acc[a][c]);
      }
    }
    cp_async_wait_all();  // tile t + 1 has landed (this thread's copies)
    __syncthreads();      // ... everyone's, and tile t / P are no longer read
  }

#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int64_t i = q0 + ty + 16 * a;
    if (i < S) {
      const float inv = 1.0f / l[a];
      __nv_bfloat16* dst = o + (bh * S + i) * D + tx * NC;
      if constexpr (NC == 8) {
        uint4 w;
        __nv_bfloat162 h0 = __floats2bfloat162_rn(acc[a][0] * inv, acc[a][1] * inv);
        __nv_bfloat162 h1 = __floats2bfloat162_rn(acc[a][2] * inv, acc[a][3] * inv);
        __nv_bfloat162 h2 = __floats2bfloat162_rn(acc[a][4] * inv, acc[a][5] * inv);
        __nv_bfloat162 h3 = __floats2bfloat162_rn(acc[a][6] * inv, acc[a][7] * inv);
        w.x = *reinterpret_cast<uint32_t*>(&h0);
        w.y = *reinterpret_cast<uint32_t*>(&h1);
        w.z = *reinterpret_cast<uint32_t*>(&h2);
        w.w = *reinterpret_cast<uint32_t*>(&h3);
        *reinterpret_cast<uint4*>(dst) = w;
      } else {
        uint2 w;
        __nv_bfloat162 h0 = __floats2bfloat162_rn(acc[a][0] * inv, acc[a][1] * inv);
        __nv_bfloat162 h1 = __floats2bfloat162_rn(acc[a][2] * inv, acc[a][3] * inv);
        w.x = *reinterpret_cast<uint32_t*>(&h0);
        w.y = *reinterpret_cast<uint32_t*>(&h1);
        *reinterpret_cast<uint2*>(dst) = w;
      }
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
    err = cudaFuncSetAttribute(flash_fwd_l2<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               Cfg<D>::kSmem);
    if (err != cudaSuccess) return err;
    configured_device = device;
  }
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  const int64_t q_tiles = (S + kBQ - 1) / kBQ;
  flash_fwd_l2<D><<<static_cast<unsigned>(q_tiles * bh), kThreads, Cfg<D>::kSmem, stream>>>(
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
