// flash_attention_fwd expert, layer 1 (algorithm): FlashAttention's online softmax. One 128-thread
// block per (batch*head, 32-query tile) walks all keys in tiles of 32 held in shared memory (fp32); the
// score matrix is never written: a running row max m, sum l and output accumulator O are rescaled by
// exp(m_old - m_new) per tile. Simple SIMT fp32 math, plain loads, masked (not skipped) causal tiles.
#include <cmath>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kBQ = 32;        // query rows per block (4 warps x 8 rows)
constexpr int kBK = 32;        // keys per tile (lane = key in the score phase)
constexpr int kThreads = 128;
constexpr int kRowsPerWarp = 8;

template <int D>
constexpr int smem_bytes() {
  return (kBQ * D + kBK * (D + 1) + kBK * D + kBQ * kBK) * 4;
}

template <int D>
__global__ void __launch_bounds__(kThreads)
flash_fwd_l1(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
             const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ o, int64_t S,
             int causal, float scale_log2) {
  constexpr int NC = D / 32;  // output columns per lane: lane + 32 c
  extern __shared__ float smem[];
  float* qs = smem;                   // [kBQ][D]
  float* ks = qs + kBQ * D;           // [kBK][D + 1]: padded, lane-indexed rows hit distinct banks
  float* vs = ks + kBK * (D + 1);     // [kBK][D]
  float* ps = vs + kBK * D;           // [kBQ][kBK]: probabilities of the current tile

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kBQ;
  const int64_t bh = blockIdx.y;
  const __nv_bfloat16* qh = q + bh * S * D;
  const __nv_bfloat16* kh = k + bh * S * D;
  const __nv_bfloat16* vh = v + bh * S * D;

  for (int e = tid; e < kBQ * D; e += kThreads) {
    const int r = e / D, d = e % D;
    qs[e] = (q0 + r < S) ? __bfloat162float(qh[(q0 + r) * D + d]) : 0.0f;
  }

  const int rw = warp * kRowsPerWarp;  // this warp's first row in the tile
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][NC];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = 0.0f;
  }

  for (int64_t j0 = 0; j0 < S; j0 += kBK) {
    __syncthreads();  // the previous tile is consumed (and Q is stored, the first time)
    for (int e = tid; e < kBK * D; e += kThreads) {
      const int jj = e / D, d = e % D;
      const bool in = j0 + jj < S;
      ks[jj * (D + 1) + d] = in ? __bfloat162float(kh[(j0 + jj) * D + d]) : 0.0f;
      vs[e] = in ? __bfloat162float(vh[(j0 + jj) * D + d]) : 0.0f;
    }
    __syncthreads();

    // Scores of this warp's 8 rows against key j0 + lane, in the log2 domain.
    float s[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) s[r] = 0.0f;
#pragma unroll 16
    for (int d = 0; d < D; ++d) {
      const float kd = ks[lane * (D + 1) + d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) s[r] = fmaf(qs[(rw + r) * D + d], kd, s[r]);
    }
    const int64_t j = j0 + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t i = q0 + rw + r;
      const bool ok = j < S && (!causal || j <= i);
      s[r] = ok ? s[r] * scale_log2 : -INFINITY;
      float mx = s[r];
      for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m[r], mx);
      // Key 0 is allowed for every row, so m_new is finite from the first tile on; guard anyway.
      const float m_use = (m_new == -INFINITY) ? 0.0f : m_new;
      const float alpha = exp2f(m[r] - m_use);  // 0 on the first tile (m = -inf)
      const float p = exp2f(s[r] - m_use);      // 0 for masked keys
      float psum = p;
      for (int off = 16; off > 0; off /= 2) psum += __shfl_xor_sync(0xffffffffu, psum, off);
      l[r] = l[r] * alpha + psum;
      m[r] = m_new;
      ps[(rw + r) * kBK + lane] = p;
#pragma unroll
      for (int c = 0; c < NC; ++c) acc[r][c] *= alpha;
    }
    __syncwarp();  // this warp's rows of ps are written by and read by this warp only

    // O += P V: lane owns columns lane + 32 c of the warp's 8 rows.
    for (int jj = 0; jj < kBK; ++jj) {
      float vv[NC];
#pragma unroll
      for (int c = 0; c < NC; ++c) vv[c] = vs[jj * D + lane + 32 * c];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float p = ps[(rw + r) * kBK + jj];
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[r][c] = fmaf(p, vv[c], acc[r][c]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = q0 + rw + r;
    if (i < S) {
      const float inv = 1.0f / l[r];
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        o[(bh * S + i) * D + lane + 32 * c] = __float2bfloat16_rn(acc[r][c] * inv);
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
    err = cudaFuncSetAttribute(flash_fwd_l1<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               smem_bytes<D>());
    if (err != cudaSuccess) return err;
    configured_device = device;
  }
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  const dim3 grid(static_cast<unsigned>((S + kBQ - 1) / kBQ), static_cast<unsigned>(bh));
  flash_fwd_l1<D><<<grid, kThreads, smem_bytes<D>(), stream>>>(q, k, v, o, S, causal, scale_log2);
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
  if (bh > 65535 || (seq + kBQ - 1) / kBQ > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const int c = causal ? 1 : 0;
  const cudaError_t err = head_dim == 64 ? launch<64>(q, k, v, o, bh, seq, c, stream)
                                         : launch<128>(q, k, v, o, bh, seq, c, stream);
  return static_cast<int>(err);
}
