// rmsnorm expert, layer 2 (dataflow): rows over warps. One warp per row, 8 rows per block. Each
// lane first loads its share of the row into registers as packed bf16 pairs (32-bit loads), so
// the whole row is in flight at once and DRAM sees it exactly once; the block stages the weights
// in shared memory while those loads fly; the sum of squares is reduced with warp shuffles (no
// block barrier per row); the row is then scaled from registers. A row that starts on an odd
// element (odd cols) peels that element so the pairs stay 4-byte aligned.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kWarps = 8;  // rows per block
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxPairs = 128;  // pairs per lane held in registers: cols <= 8192 (+1)
constexpr float kEps = 1e-6f;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// NP pairs per lane. With h = 1 when the row starts on an odd element (else 0), pair p covers
// columns h + 2p and h + 2p + 1; lane l holds pairs l, l + 32, l + 64, ... (a warp load reads 128
// contiguous bytes). Column 0 (when h = 1) goes to lane 0 and a last unpaired column to lane 1.
template <int NP>
__global__ void __launch_bounds__(kThreads)
rmsnorm_warp_per_row(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                     __nv_bfloat16* __restrict__ y, int64_t rows, int cols, float inv_cols) {
  extern __shared__ __nv_bfloat16 w_s[];  // cols weights
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const bool active = row < rows;
  const __nv_bfloat16* xr = x + (active ? row : 0) * cols;
  __nv_bfloat16* yr = y + (active ? row : 0) * cols;

  // 1. The whole row into registers, every load issued before any is used.
  const int h = (cols > 1) ? static_cast<int>((reinterpret_cast<uintptr_t>(xr) >> 1) & 1) : 0;
  const int npairs = (cols - h) / 2;
  int extra = -1;  // the one unpaired column this lane owns, if any
  if (lane == 0 && h == 1) extra = 0;
  if (lane == 1 && ((cols - h) & 1)) extra = cols - 1;
  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(xr + h);
  __nv_bfloat162 v[NP];
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    const int p = lane + 32 * i;
    v[i] = (active && p < npairs) ? xp[p] : __float2bfloat162_rn(0.0f);
  }
  const float e = (active && extra >= 0) ? __bfloat162float(xr[extra]) : 0.0f;

  // 2. Weights into shared memory (once per block, shared by its 8 rows) while the loads fly.
  for (int c = static_cast<int>(threadIdx.x); c < cols; c += kThreads) w_s[c] = w[c];
  __syncthreads();
  if (!active) return;

  // 3. Sum of squares: per lane (bf16 -> fp32 is a 16-bit shift of the packed word), then
  //    across the warp with shuffles.
  float sum = e * e;
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(&v[i]);
    const float lo = __uint_as_float(u << 16), hi = __uint_as_float(u & 0xffff0000u);
    sum = fmaf(lo, lo, sum);
    sum = fmaf(hi, hi, sum);
  }
  const float scale = rsqrtf(warp_sum(sum) * inv_cols + kEps);

  // 4. Scale from registers, weights from shared memory, store pairs.
  __nv_bfloat162* yp = reinterpret_cast<__nv_bfloat162*>(yr + h);
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    const int p = lane + 32 * i;
    if (p < npairs) {
      const float2 f = __bfloat1622float2(v[i]);
      const int c = h + 2 * p;
      yp[p] = __floats2bfloat162_rn(f.x * scale * __bfloat162float(w_s[c]),
                                    f.y * scale * __bfloat162float(w_s[c + 1]));
    }
  }
  if (extra >= 0) yr[extra] = __float2bfloat16(e * scale * __bfloat162float(w_s[extra]));
}

// Fallback for rows longer than the register budget, or x and y at different 4-byte offsets:
// warp per row, scalar accesses, the row read twice (the second read from the cache).
__global__ void __launch_bounds__(kThreads)
rmsnorm_warp_per_row_scalar(const __nv_bfloat16* __restrict__ x,
                            const __nv_bfloat16* __restrict__ w, __nv_bfloat16* __restrict__ y,
                            int64_t rows, int cols, float inv_cols) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= rows) return;
  const __nv_bfloat16* xr = x + row * cols;
  __nv_bfloat16* yr = y + row * cols;
  float sum = 0.0f;
  for (int c = lane; c < cols; c += 32) {
    const float f = __bfloat162float(xr[c]);
    sum = fmaf(f, f, sum);
  }
  const float scale = rsqrtf(warp_sum(sum) * inv_cols + kEps);
  for (int c = lane; c < cols; c += 32)
    yr[c] = __float2bfloat16(__bfloat162float(xr[c]) * scale * __bfloat162float(w[c]));
}

template <int NP>
void launch(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t rows,
            int cols, float inv_cols, unsigned blocks, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(cols) * sizeof(__nv_bfloat16);
  rmsnorm_warp_per_row<NP><<<blocks, kThreads, smem, stream>>>(x, w, y, rows, cols, inv_cols);
}

}  // namespace

extern "C" int d2k_rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                           int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (cols > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t blocks64 = (rows + kWarps - 1) / kWarps;
  if (blocks64 > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const unsigned blocks = static_cast<unsigned>(blocks64);
  const int c = static_cast<int>(cols);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const int pairs = (c / 2 + 31) / 32;  // pairs per lane (a row has at most cols / 2 pairs)
  const bool same_offset =
      ((reinterpret_cast<uintptr_t>(x) ^ reinterpret_cast<uintptr_t>(y)) & 3) == 0;
  if (!same_offset || pairs > kMaxPairs)
    rmsnorm_warp_per_row_scalar<<<blocks, kThreads, 0, stream>>>(x, w, y, rows, c, inv_cols);
  else if (pairs <= 1) launch<1>(x, w, y, rows, c, inv_cols, blocks, stream);
  else if (pairs <= 2) launch<2>(x, w, y, rows, c, inv_cols, blocks, stream);
  else if (pairs <= 4) launch<4>(x, w, y, rows, c, inv_cols, blocks, stream);
  else if (pairs <= 8) launch<8>(x, w, y, rows, c, inv_cols, blocks, stream);
  else if (pairs <= 16) launch<16>(x, w, y, rows, c, inv_cols, blocks, stream);
  else if (pairs <= 24) launch<24>(x, w, y, rows, c, inv_cols, blocks, stream);
  else if (pairs <= 32) launch<32>(x, w, y, rows, c, inv_cols, blocks, stream);
  else if (pairs <= 48) launch<48>(x, w, y, rows, c, inv_cols, blocks, stream);
  else if (pairs <= 64) launch<64>(x, w, y, rows, c, inv_cols, blocks, stream);
  else if (pairs <= 96) launch<96>(x, w, y, rows, c, inv_cols, blocks, stream);
  else launch<kMaxPairs>(x, w, y, rows, c, inv_cols, blocks, stream);
  return static_cast<int>(cudaGetLastError());
}
