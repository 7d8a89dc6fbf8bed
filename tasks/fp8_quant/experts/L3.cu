// fp8_quant expert, layer 3 (low level): rows moved as 128-bit vectors (8 bf16 per load, 8 codes
// per 64-bit store), the largest magnitude taken on packed bf16 pairs (bit-mask absolute value and
// a paired max), and a row group sized to the row so that every lane carries about 64 bytes of x:
// LPR lanes per row holding V chunks each (128 lanes x 4 chunks for 4096 columns, 256 x 4 for
// 7168 and 8192) and, for short rows, R rows per group at once (16 lanes x 4 rows for a 128-column
// KV-cache head: 64 rows per 256-thread block instead of one row per block with 240 threads idle).
// Every load of a lane is issued before any is used; one block per batch of rows, no loop.
// Rows that do not start on an 8-element boundary (cols not a multiple of 8) peel up to 7 head and
// 7 tail elements as scalars: x element e and q byte e share their offset modulo 8, so one peel
// aligns both (x 16-byte, q 8-byte).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPairThreads = 256;

__device__ __forceinline__ float lo_of(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_of(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ uint32_t e4m3x2(float a, float b) {
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

// Four codes (bytes in element order) from two packed bf16 words.
__device__ __forceinline__ uint32_t e4m3x4(uint32_t w0, uint32_t w1, float inv) {
  return e4m3x2(lo_of(w0) * inv, hi_of(w0) * inv) | (e4m3x2(lo_of(w1) * inv, hi_of(w1) * inv) << 16);
}

// |a| and |b| of a bf16 pair, the larger of each half against m (packed bf16 max).
__device__ __forceinline__ __nv_bfloat162 absmax2(__nv_bfloat162 m, uint32_t w) {
  const uint32_t a = w & 0x7fff7fffu;
  return __hmax2(m, *reinterpret_cast<const __nv_bfloat162*>(&a));
}

// Where a row's aligned part lies: head scalars, nvec 8-element chunks, tail scalars.
struct RowSplit {
  int head, nvec, tail;
};

__device__ __forceinline__ RowSplit split_row(int64_t start, int cols) {
  RowSplit s;
  s.head = static_cast<int>((8 - (start & 7)) & 7);
  if (s.head > cols) s.head = cols;
  s.nvec = (cols - s.head) >> 3;
  s.tail = cols - s.head - 8 * s.nvec;
  return s;
}

// The scalar element thread tid owns in this row (head: threads 0..head-1, tail: 8..8+tail-1).
__device__ __forceinline__ int scalar_col(const RowSplit& s, int tid) {
  if (tid < s.head) return tid;
  if (tid >= 8 && tid < 8 + s.tail) return s.head + 8 * s.nvec + (tid - 8);
  return -1;
}

template <int V, int LPR>
__device__ __forceinline__ void load_row(const __nv_bfloat16* __restrict__ x, int64_t row, int cols,
                                         int t, uint4 (&v)[V], float& e) {
  const int64_t start = row * cols;
  const RowSplit s = split_row(start, cols);
  const uint4* xv = reinterpret_cast<const uint4*>(x + start + s.head);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int k = t + j * LPR;
    v[j] = k < s.nvec ? xv[k] : make_uint4(0u, 0u, 0u, 0u);
  }
  const int ec = scalar_col(s, t);
  e = ec >= 0 ? __bfloat162float(x[start + ec]) : 0.0f;
}

// A row group of LPR lanes (16 .. 256, a power of two) owns R rows at a time; each lane holds V
// chunks of 8 elements of each (chunk k = t + j LPR of the row's aligned part): R V chunks, about
// 64 bytes of x, all loaded before any is used. The block's G = 256 / LPR groups take rows
// block_base + r G + group (r < R), so a warp's loads and the scales of a block are contiguous.
// Groups wider than a warp (R = 1) combine their warps' maxima through shared memory with one
// barrier; a block lives for one batch of rows (no loop: a finished block frees its place for the
// next one, whose loads start while this one's stores drain).
template <int V, int LPR, int R>
__global__ void __launch_bounds__(kThreads)
fp8_quant_vec8(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ q,
               float* __restrict__ scale, int64_t rows, int cols) {
  static_assert(LPR <= 32 || R == 1, "a group wider than a warp holds one row");
  constexpr int kGroups = kThreads / LPR;
  constexpr int kWarpsPerRow = LPR > 32 ? LPR / 32 : 1;
  constexpr int kShuffleWidth = LPR < 32 ? LPR : 32;
  __shared__ float red[kWarps];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int t = tid % LPR;     // lane within the row group
  const int slot = tid / LPR;  // row group within the block
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kGroups * R + slot;

  uint4 v[R][V];
  float e[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = base + static_cast<int64_t>(r) * kGroups;
    if (row < rows) {
      load_row<V, LPR>(x, row, cols, t, v[r], e[r]);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) v[r][j] = make_uint4(0u, 0u, 0u, 0u);
      e[r] = 0.0f;
    }
  }

  float m[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    __nv_bfloat162 pm = __floats2bfloat162_rn(0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      pm = absmax2(pm, v[r][j].x);
      pm = absmax2(pm, v[r][j].y);
      pm = absmax2(pm, v[r][j].z);
      pm = absmax2(pm, v[r][j].w);
    }
    m[r] = fmaxf(fabsf(e[r]), fmaxf(__low2float(pm), __high2float(pm)));
  }
#pragma unroll
  for (int offset = kShuffleWidth / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int r = 0; r < R; ++r) m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], offset));
  }
  if (kWarpsPerRow > 1) {
    if (lane == 0) red[tid >> 5] = m[0];
    __syncthreads();
    m[0] = red[slot * kWarpsPerRow];
#pragma unroll
    for (int g = 1; g < kWarpsPerRow; ++g) m[0] = fmaxf(m[0], red[slot * kWarpsPerRow + g]);
  }

#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = base + static_cast<int64_t>(r) * kGroups;
    if (row < rows) {
      const float a = fmaxf(m[r], 1e-12f);
      const float inv = 448.0f / a;
      if (t == 0) scale[row] = a / 448.0f;
      const int64_t start = row * cols;
      const RowSplit s = split_row(start, cols);
      uint2* qv = reinterpret_cast<uint2*>(q + start + s.head);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int k = t + j * LPR;
        if (k < s.nvec) qv[k] = make_uint2(e4m3x4(v[r][j].x, v[r][j].y, inv), e4m3x4(v[r][j].z, v[r][j].w, inv));
      }
      const int ec = scalar_col(s, t);
      if (ec >= 0) q[start + ec] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(e[r] * inv, __NV_SATFINITE, __NV_E4M3));
    }
  }
}

// Pointers not aligned for the vector path (x not 16-byte or q not 8-byte aligned) or rows over
// 32768 columns: block per row, the row read twice (the second read from the cache).
__global__ void __launch_bounds__(kPairThreads)
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

template <int V, int LPR, int R>
cudaError_t launch_vec8(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t rows, int cols,
                        cudaStream_t stream) {
  constexpr int64_t kRowsPerBlock = static_cast<int64_t>(kThreads / LPR) * R;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  fp8_quant_vec8<V, LPR, R><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, q, scale, rows, cols);
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_fp8_quant(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t rows,
                             int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff || cols > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const int c = static_cast<int>(cols);
  const int64_t chunks = cols / 8;  // no row has more aligned chunks than this
  const bool aligned = (reinterpret_cast<uintptr_t>(x) & 15) == 0 && (reinterpret_cast<uintptr_t>(q) & 7) == 0;
  cudaError_t err;
  // Row group sized to the row: about 4 chunks (64 bytes of x) per lane, several short rows per
  // group; 16 lanes at least (the peeled head and tail elements need lanes 0 .. 14).
  if (!aligned || chunks > 4096) {
    fp8_quant_two_pass<<<static_cast<unsigned>(rows), kPairThreads, 0, stream>>>(x, q, scale, c);
    err = cudaGetLastError();
  } else if (chunks <= 16) err = launch_vec8<1, 16, 4>(x, q, scale, rows, c, stream);
  else if (chunks <= 32) err = launch_vec8<2, 16, 2>(x, q, scale, rows, c, stream);
  else if (chunks <= 64) err = launch_vec8<4, 16, 1>(x, q, scale, rows, c, stream);
  else if (chunks <= 128) err = launch_vec8<4, 32, 1>(x, q, scale, rows, c, stream);
  else if (chunks <= 256) err = launch_vec8<4, 64, 1>(x, q, scale, rows, c, stream);
  else if (chunks <= 512) err = launch_vec8<4, 128, 1>(x, q, scale, rows, c, stream);
  else if (chunks <= 640) err = launch_vec8<5, 128, 1>(x, q, scale, rows, c, stream);
  else if (chunks <= 768) err = launch_vec8<3, 256, 1>(x, q, scale, rows, c, stream);
  else if (chunks <= 1024) err = launch_vec8<4, 256, 1>(x, q, scale, rows, c, stream);
  else if (chunks <= 1536) err = launch_vec8<6, 256, 1>(x, q, scale, rows, c, stream);
  else if (chunks <= 2048) err = launch_vec8<8, 256, 1>(x, q, scale, rows, c, stream);
  else if (chunks <= 3072) err = launch_vec8<12, 256, 1>(x, q, scale, rows, c, stream);
  else err = launch_vec8<16, 256, 1>(x, q, scale, rows, c, stream);
  return static_cast<int>(err);
}
