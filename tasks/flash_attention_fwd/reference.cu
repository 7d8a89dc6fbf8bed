// flash_attention_fwd reference (trusted; agents never see it): an exact two-pass softmax, no online
// rescaling. A block owns 16 query rows of one (batch, head); warp w owns rows w and w+8. Pass 1
// computes every score of its rows and keeps the row maximum; pass 2 recomputes the scores, forms
// p = exp(s - max) in double, sums p in double and accumulates p * v in double; O = acc / sum, rounded
// once to bf16 (nearest even). A score is an fp32 dot product of bf16 values (each product is exact in
// fp32; the 64/128-term sum is within ~1e-6 relative of exact), then scaled by 1/sqrt(d) in double.
// Keys past the causal diagonal (j > i) get p = 0 and are not even visited past the block's last row.
#include <cmath>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

constexpr int kRows = 16;     // query rows per block
constexpr int kKeys = 32;     // keys per shared-memory tile (lane = key in the score loop)
constexpr int kMaxD = 128;
constexpr int kThreads = 256;  // 8 warps

__global__ void __launch_bounds__(kThreads)
attention_reference(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                    __nv_bfloat16* o, int64_t S, int D, int causal, double scale) {
  __shared__ float qs[kRows][kMaxD];
  __shared__ float ks[kKeys][kMaxD + 1];  // +1: lane-indexed rows hit different banks
  __shared__ float vs[kKeys][kMaxD];
  __shared__ double ps[kRows][kKeys];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t bh = blockIdx.y;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const __nv_bfloat16* qh = q + bh * S * D;
  const __nv_bfloat16* kh = k + bh * S * D;
  const __nv_bfloat16* vh = v + bh * S * D;

  for (int e = tid; e < kRows * D; e += kThreads) {
    const int r = e / D, d = e % D;
    qs[r][d] = (i0 + r < S) ? __bfloat162float(qh[(i0 + r) * D + d]) : 0.0f;
  }
  const int rA = warp, rB = warp + 8;
  const int64_t iA = i0 + rA, iB = i0 + rB;
  // Keys beyond the last row of the block are masked for every row when causal.
  const int64_t kend = causal ? (S < i0 + kRows ? S : i0 + kRows) : S;
  const int nc = D / 32;  // output columns per lane: lane + 32 c

  double mA = -INFINITY, mB = -INFINITY;  // row maxima of the scaled scores (pass 1)
  double sumA = 0.0, sumB = 0.0;          // this lane's part of sum_j p_j (pass 2)
  double accA[4] = {0.0, 0.0, 0.0, 0.0}, accB[4] = {0.0, 0.0, 0.0, 0.0};

  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t j0 = 0; j0 < kend; j0 += kKeys) {
      __syncthreads();  // the previous tile (and qs, the first time) is no longer being read/written
      for (int e = tid; e < kKeys * D; e += kThreads) {
        const int jj = e / D, d = e % D;
        const int64_t j = j0 + jj;
        ks[jj][d] = (j < S) ? __bfloat162float(kh[j * D + d]) : 0.0f;
        if (pass == 1) vs[jj][d] = (j < S) ? __bfloat162float(vh[j * D + d]) : 0.0f;
      }
      __syncthreads();
      const int64_t j = j0 + lane;
      float dotA = 0.0f, dotB = 0.0f;
      for (int d = 0; d < D; ++d) {
        const float kd = ks[lane][d];
        dotA = fmaf(qs[rA][d], kd, dotA);
        dotB = fmaf(qs[rB][d], kd, dotB);
      }
      const bool okA = j < S && (!causal || j <= iA);
      const bool okB = j < S && (!causal || j <= iB);
      const double sA = static_cast<double>(dotA) * scale;
      const double sB = static_cast<double>(dotB) * scale;
      if (pass == 0) {
        if (okA) mA = fmax(mA, sA);
        if (okB) mB = fmax(mB, sB);
      } else {
        const double pA = okA ? exp(sA - mA) : 0.0;
        const double pB = okB ? exp(sB - mB) : 0.0;
        sumA += pA;
        sumB += pB;
        ps[rA][lane] = pA;  // rows rA and rB are written and read by this warp only
        ps[rB][lane] = pB;
        __syncwarp();
        for (int jj = 0; jj < kKeys; ++jj) {
          const double a = ps[rA][jj], b = ps[rB][jj];
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            if (c < nc) {
              const double vv = static_cast<double>(vs[jj][lane + 32 * c]);
              accA[c] += a * vv;
              accB[c] += b * vv;
            }
          }
        }
        __syncwarp();  // ps is rewritten only after every lane has read it
      }
    }
    if (pass == 0) {  // the row maximum over all lanes (key 0 is always allowed: finite)
      for (int off = 16; off > 0; off /= 2) {
        mA = fmax(mA, __shfl_xor_sync(0xffffffffu, mA, off));
        mB = fmax(mB, __shfl_xor_sync(0xffffffffu, mB, off));
      }
    }
  }
  for (int off = 16; off > 0; off /= 2) {
    sumA += __shfl_xor_sync(0xffffffffu, sumA, off);
    sumB += __shfl_xor_sync(0xffffffffu, sumB, off);
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    if (c < nc) {
      const int d = lane + 32 * c;
      if (iA < S) o[(bh * S + iA) * D + d] = __double2bfloat16(accA[c] / sumA);
      if (iB < S) o[(bh * S + iB) * D + d] = __double2bfloat16(accB[c] / sumB);
    }
  }
}

extern "C" int d2k_flash_attention_fwd(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                       const __nv_bfloat16* v, __nv_bfloat16* o, int64_t batch,
                                       int64_t heads, int64_t seq, int64_t head_dim, int causal,
                                       cudaStream_t stream) {
  if (head_dim != 64 && head_dim != 128) return static_cast<int>(cudaErrorInvalidValue);
  if (batch <= 0 || heads <= 0 || seq <= 0) return 0;
  const int64_t bh = batch * heads;
  const int64_t gx = (seq + kRows - 1) / kRows;
  if (bh > 65535 || gx > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  attention_reference<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(bh)), kThreads, 0,
                        stream>>>(q, k, v, o, seq, static_cast<int>(head_dim), causal ? 1 : 0, scale);
  return static_cast<int>(cudaGetLastError());
}
