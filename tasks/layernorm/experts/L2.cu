// layernorm expert, layer 2 (dataflow): the row is read from DRAM once and held in registers. One
// block of 256 threads per row; each thread loads its share of the row as packed bf16 pairs
// (32-bit loads, pair p = thread + 256 i), all loads issued before any is used. Both statistics
// come from the registers: the sum, reduced with warp shuffles and one barrier, gives the mean;
// the squared deviations from it, reduced the same way, give the variance. The output is computed
// from the registers and stored as pairs. A row starting on an odd element peels that element so
// the pairs stay 4-byte aligned; weights and bias are read per element from the cache (all rows
// share them).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxPairsPerThread = 32;  // rows of up to 2 * 256 * 32 + 1 = 16385 columns in registers
constexpr float kEps = 1e-5f;

__device__ __forceinline__ float lo_of(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_of(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Butterfly within the warp, then the 8 warp totals through shared memory (one barrier).
__device__ __forceinline__ float block_sum(float v, float* slots) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if ((threadIdx.x & 31) == 0) slots[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = slots[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) total += slots[w];
  return total;
}

template <int NP>
__global__ void __launch_bounds__(kThreads)
layernorm_row_in_registers(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                           const __nv_bfloat16* __restrict__ b, __nv_bfloat16* __restrict__ y,
                           int cols, float inv_cols) {
  __shared__ float sum_slots[kWarps], sq_slots[kWarps];  // one set per reduction: no second barrier
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row = blockIdx.x;
  const int64_t start = row * cols;
  const __nv_bfloat16* xr = x + start;
  __nv_bfloat16* yr = y + start;

  // h = 1 when the row starts on an odd element: column 0 is then a lone element (thread 0) and
  // pair p covers columns h + 2p, h + 2p + 1; a last unpaired column goes to thread 1.
  const int h = static_cast<int>(start & 1);
  const int npairs = (cols - h) / 2;
  const uint32_t* xp = reinterpret_cast<const uint32_t*>(xr + h);
  uint32_t v[NP];
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    const int p = tid + i * kThreads;
    v[i] = p < npairs ? xp[p] : 0u;
  }
  int extra = -1;
  if (tid == 0 && h == 1) extra = 0;
  if (tid == 1 && ((cols - h) & 1)) extra = cols - 1;
  const float e = extra >= 0 ? __bfloat162float(xr[extra]) : 0.0f;

  float s = e;
#pragma unroll
  for (int i = 0; i < NP; ++i) s += lo_of(v[i]) + hi_of(v[i]);
  const float mean = block_sum(s, sum_slots) * inv_cols;

  // Squared deviations; padding pairs (past the row) are zeros, not values: skip them.
  float q = 0.0f;
  if (extra >= 0) q = (e - mean) * (e - mean);
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    if (tid + i * kThreads < npairs) {
      const float d0 = lo_of(v[i]) - mean, d1 = hi_of(v[i]) - mean;
      q = fmaf(d0, d0, fmaf(d1, d1, q));
    }
  }
  const float rstd = rsqrtf(block_sum(q, sq_slots) * inv_cols + kEps);

  __nv_bfloat162* yp = reinterpret_cast<__nv_bfloat162*>(yr + h);
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    const int p = tid + i * kThreads;
    if (p < npairs) {
      const int c = h + 2 * p;
      const float o0 = fmaf((lo_of(v[i]) - mean) * rstd, __bfloat162float(w[c]), __bfloat162float(b[c]));
      const float o1 = fmaf((hi_of(v[i]) - mean) * rstd, __bfloat162float(w[c + 1]), __bfloat162float(b[c + 1]));
      yp[p] = __floats2bfloat162_rn(o0, o1);
    }
  }
  if (extra >= 0)
    yr[extra] = __float2bfloat16(fmaf((e - mean) * rstd, __bfloat162float(w[extra]), __bfloat162float(b[extra])));
}

// Rows longer than the register budget, or x / y not 4-byte aligned: block per row, three reads of
// the row (the second and third from the cache), warp-shuffle reductions.
__global__ void __launch_bounds__(kThreads)
layernorm_three_pass(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                     const __nv_bfloat16* __restrict__ b, __nv_bfloat16* __restrict__ y, int cols,
                     float inv_cols) {
  __shared__ float sum_slots[kWarps], sq_slots[kWarps];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * cols;
  __nv_bfloat16* yr = y + row * cols;
  float s = 0.0f;
  for (int c = tid; c < cols; c += kThreads) s += __bfloat162float(xr[c]);
  const float mean = block_sum(s, sum_slots) * inv_cols;
  float q = 0.0f;
  for (int c = tid; c < cols; c += kThreads) {
    const float d = __bfloat162float(xr[c]) - mean;
    q = fmaf(d, d, q);
  }
  const float rstd = rsqrtf(block_sum(q, sq_slots) * inv_cols + kEps);
  for (int c = tid; c < cols; c += kThreads)
    yr[c] = __float2bfloat16(fmaf((__bfloat162float(xr[c]) - mean) * rstd, __bfloat162float(w[c]), __bfloat162float(b[c])));
}

template <int NP>
void launch(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b, __nv_bfloat16* y,
            int64_t rows, int cols, float inv_cols, cudaStream_t stream) {
  layernorm_row_in_registers<NP><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, b, y, cols, inv_cols);
}

}  // namespace

extern "C" int d2k_layernorm(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
                             __nv_bfloat16* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff || cols > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const int c = static_cast<int>(cols);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const int64_t pairs_per_thread = (cols / 2 + kThreads - 1) / kThreads;
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 3) == 0;
  if (!aligned || pairs_per_thread > kMaxPairsPerThread)
    layernorm_three_pass<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, b, y, c, inv_cols);
  else if (pairs_per_thread <= 1) launch<1>(x, w, b, y, rows, c, inv_cols, stream);
  else if (pairs_per_thread <= 2) launch<2>(x, w, b, y, rows, c, inv_cols, stream);
  else if (pairs_per_thread <= 4) launch<4>(x, w, b, y, rows, c, inv_cols, stream);
  else if (pairs_per_thread <= 8) launch<8>(x, w, b, y, rows, c, inv_cols, stream);
  else if (pairs_per_thread <= 16) launch<16>(x, w, b, y, rows, c, inv_cols, stream);
  else launch<32>(x, w, b, y, rows, c, inv_cols, stream);
  return static_cast<int>(cudaGetLastError());
}
