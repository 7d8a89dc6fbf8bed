// fp8_quant expert, layer 2 (dataflow): the row is read from DRAM once and held in registers. One
// block of 256 threads per row; each thread loads its share of the row as packed bf16 pairs
// (32-bit loads, pair p = thread + 256 i), all loads issued before any is used. The row's largest
// magnitude is reduced with warp shuffles (butterfly), then across the 8 warps through shared
// memory with a single barrier. The codes are written from the registers, two per 16-bit store
// (one packed conversion of two floats). A row starting on an odd element peels that element so
// the pairs stay 4-byte aligned in x and 2-byte aligned in q (x element e and q byte e have the
// same parity).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxPairsPerThread = 32;  // rows of up to 2 * 256 * 32 + 1 = 16385 columns in registers

__device__ __forceinline__ float lo_of(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_of(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ uint16_t e4m3x2(float a, float b) {
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

template <int NP>
__global__ void __launch_bounds__(kThreads)
fp8_quant_row_in_registers(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ q,
                           float* __restrict__ scale, int cols) {
  __shared__ float warp_max[kWarps];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int64_t row = blockIdx.x;
  const int64_t start = row * cols;
  const __nv_bfloat16* xr = x + start;
  uint8_t* qr = q + start;

  // 1. The whole row into registers. h = 1 when the row starts on an odd element: column 0 is
  // then a lone element (thread 0) and pair p covers columns h + 2p, h + 2p + 1; a last unpaired
  // column goes to thread 1.
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

  // 2. Largest magnitude: this thread, then the warp (butterfly), then the block (one barrier).
  float m = fabsf(e);
#pragma unroll
  for (int i = 0; i < NP; ++i) m = fmaxf(m, fmaxf(fabsf(lo_of(v[i])), fabsf(hi_of(v[i]))));
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if (lane == 0) warp_max[tid >> 5] = m;
  __syncthreads();
  m = warp_max[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, warp_max[w]);
  const float a = fmaxf(m, 1e-12f);
  const float inv = 448.0f / a;
  if (tid == 0) scale[row] = a / 448.0f;

  // 3. Codes from the registers, two per store.
  uint16_t* qp = reinterpret_cast<uint16_t*>(qr + h);
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    const int p = tid + i * kThreads;
    if (p < npairs) qp[p] = e4m3x2(lo_of(v[i]) * inv, hi_of(v[i]) * inv);
  }
  if (extra >= 0) qr[extra] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(e * inv, __NV_SATFINITE, __NV_E4M3));
}

// Rows longer than the register budget, or pointers that are not 4-byte (x) / 2-byte (q) aligned:
// block per row, the row read twice (second read from the cache), warp shuffles and one barrier.
__global__ void __launch_bounds__(kThreads)
fp8_quant_two_pass(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ q,
                   float* __restrict__ scale, int cols) {
  __shared__ float warp_max[kWarps];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * cols;
  uint8_t* qr = q + row * cols;
  float m = 0.0f;
  for (int c = tid; c < cols; c += kThreads) m = fmaxf(m, fabsf(__bfloat162float(xr[c])));
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if ((tid & 31) == 0) warp_max[tid >> 5] = m;
  __syncthreads();
  m = warp_max[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, warp_max[w]);
  const float a = fmaxf(m, 1e-12f);
  const float inv = 448.0f / a;
  if (tid == 0) scale[row] = a / 448.0f;
  for (int c = tid; c < cols; c += kThreads)
    qr[c] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__bfloat162float(xr[c]) * inv, __NV_SATFINITE, __NV_E4M3));
}

template <int NP>
void launch(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t rows, int cols, cudaStream_t stream) {
  fp8_quant_row_in_registers<NP><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, q, scale, cols);
}

}  // namespace

extern "C" int d2k_fp8_quant(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t rows,
                             int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff || cols > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const int c = static_cast<int>(cols);
  const int64_t pairs_per_thread = (cols / 2 + kThreads - 1) / kThreads;  // no row has more pairs than cols / 2
  const bool aligned = (reinterpret_cast<uintptr_t>(x) & 3) == 0 && (reinterpret_cast<uintptr_t>(q) & 1) == 0;
  if (!aligned || pairs_per_thread > kMaxPairsPerThread)
    fp8_quant_two_pass<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, q, scale, c);
  else if (pairs_per_thread <= 1) launch<1>(x, q, scale, rows, c, stream);
  else if (pairs_per_thread <= 2) launch<2>(x, q, scale, rows, c, stream);
  else if (pairs_per_thread <= 4) launch<4>(x, q, scale, rows, c, stream);
  else if (pairs_per_thread <= 8) launch<8>(x, q, scale, rows, c, stream);
  else if (pairs_per_thread <= 16) launch<16>(x, q, scale, rows, c, stream);
  else launch<32>(x, q, scale, rows, c, stream);
  return static_cast<int>(cudaGetLastError());
}
