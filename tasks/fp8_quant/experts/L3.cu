// fp8_quant expert, layer 3 (low level): rows moved as 128-bit vectors (8 bf16 per load, 8 codes
// per 64-bit store), the largest magnitude taken on packed bf16 pairs (bit-mask absolute value and
// a paired max), a row group sized to the row (LPR lanes of about 2 vectors each: 16 lanes and 16
// rows per block for a 128-column KV-cache head, the whole 256-thread block for 4096 columns and
// up), a persistent grid whose blocks walk the rows with a grid stride, and the next row's loads
// issued before the current row's reduction, barrier and stores (software pipelined, so DRAM never
// waits on the barrier). Rows that do not start on an 8-element boundary (cols not a multiple of
// 8) peel up to 7 head and 7 tail elements as scalars: x element e and q byte e share their offset
// modulo 8, so one peel aligns both (x 16-byte, q 8-byte).
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

// A row group of LPR lanes (16 .. 256, a power of two) owns a row; each lane holds V chunks of 8
// elements (chunk k = t + j LPR of the row's aligned part). A block works on 256 / LPR rows at a
// time and walks the rows with a grid stride; every group of the block goes through the same trip
// count (inactive rows included), so the barriers of groups wider than a warp stay uniform.
template <int V, int LPR>
__global__ void __launch_bounds__(kThreads)
fp8_quant_vec8(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ q,
               float* __restrict__ scale, int64_t rows, int cols) {
  constexpr int kRowsPerIter = kThreads / LPR;
  constexpr int kWarpsPerRow = LPR > 32 ? LPR / 32 : 1;
  constexpr int kShuffleWidth = LPR < 32 ? LPR : 32;
  __shared__ float red[2][kWarps];  // double-buffered warp maxima: one barrier per row
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int t = tid % LPR;     // lane within the row group
  const int slot = tid / LPR;  // row group within the block
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRowsPerIter;
  int parity = 0;

  int64_t base = static_cast<int64_t>(blockIdx.x) * kRowsPerIter;
  uint4 v[V];
  float e = 0.0f;
  if (base + slot < rows) load_row<V, LPR>(x, base + slot, cols, t, v, e);
  for (; base < rows; base += stride) {
    const int64_t row = base + slot;
    const bool active = row < rows;
    // Issue the next row's loads first: they fly during this row's reduction and stores.
    uint4 nv[V];
    float ne = 0.0f;
    if (row + stride < rows) load_row<V, LPR>(x, row + stride, cols, t, nv, ne);

    __nv_bfloat162 pm = __floats2bfloat162_rn(0.0f, 0.0f);
    if (active) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        pm = absmax2(pm, v[j].x);
        pm = absmax2(pm, v[j].y);
        pm = absmax2(pm, v[j].z);
        pm = absmax2(pm, v[j].w);
      }
    }
    float m = active ? fmaxf(fabsf(e), fmaxf(__low2float(pm), __high2float(pm))) : 0.0f;
#pragma unroll
    for (int offset = kShuffleWidth / 2; offset > 0; offset /= 2)
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if (kWarpsPerRow > 1) {
      if (lane == 0) red[parity][tid >> 5] = m;
      __syncthreads();
      m = red[parity][slot * kWarpsPerRow];
#pragma unroll
      for (int g = 1; g < kWarpsPerRow; ++g) m = fmaxf(m, red[parity][slot * kWarpsPerRow + g]);
      parity ^= 1;
    }

    if (active) {
      const float a = fmaxf(m, 1e-12f);
      const float inv = 448.0f / a;
      if (t == 0) scale[row] = a / 448.0f;
      const int64_t start = row * cols;
      const RowSplit s = split_row(start, cols);
      uint2* qv = reinterpret_cast<uint2*>(q + start + s.head);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int k = t + j * LPR;
        if (k < s.nvec) qv[k] = make_uint2(e4m3x4(v[j].x, v[j].y, inv), e4m3x4(v[j].z, v[j].w, inv));
      }
      const int ec = scalar_col(s, t);
      if (ec >= 0) q[start + ec] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(e * inv, __NV_SATFINITE, __NV_E4M3));
    }

#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = nv[j];
    e = ne;
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

template <int V, int LPR>
cudaError_t launch_vec8(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t rows, int cols,
                        cudaStream_t stream) {
  static int cached_device = -1;  // one cache per instantiation: occupancy depends on V
  static int64_t cached_blocks = 0;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != cached_device) {
    int sms = 0, per_sm = 0;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fp8_quant_vec8<V, LPR>, kThreads, 0);
    if (err != cudaSuccess) return err;
    cached_blocks = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
    cached_device = device;
  }
  constexpr int kRowsPerIter = kThreads / LPR;
  const int64_t needed = (rows + kRowsPerIter - 1) / kRowsPerIter;
  const unsigned blocks = static_cast<unsigned>(needed < cached_blocks ? needed : cached_blocks);
  fp8_quant_vec8<V, LPR><<<blocks, kThreads, 0, stream>>>(x, q, scale, rows, cols);
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
  // Row group sized to the row: about 2 chunks (32 bytes of x) per lane, 16 lanes at least (the
  // peeled head and tail elements need lanes 0 .. 14).
  if (!aligned || chunks > 4096) {
    fp8_quant_two_pass<<<static_cast<unsigned>(rows), kPairThreads, 0, stream>>>(x, q, scale, c);
    err = cudaGetLastError();
  } else if (chunks <= 16) err = launch_vec8<1, 16>(x, q, scale, rows, c, stream);
  else if (chunks <= 32) err = launch_vec8<2, 16>(x, q, scale, rows, c, stream);
  else if (chunks <= 64) err = launch_vec8<2, 32>(x, q, scale, rows, c, stream);
  else if (chunks <= 128) err = launch_vec8<2, 64>(x, q, scale, rows, c, stream);
  else if (chunks <= 256) err = launch_vec8<2, 128>(x, q, scale, rows, c, stream);
  else if (chunks <= 512) err = launch_vec8<2, 256>(x, q, scale, rows, c, stream);
  else if (chunks <= 768) err = launch_vec8<3, 256>(x, q, scale, rows, c, stream);
  else if (chunks <= 1024) err = launch_vec8<4, 256>(x, q, scale, rows, c, stream);
  else if (chunks <= 1536) err = launch_vec8<6, 256>(x, q, scale, rows, c, stream);
  else if (chunks <= 2048) err = launch_vec8<8, 256>(x, q, scale, rows, c, stream);
  else if (chunks <= 3072) err = launch_vec8<12, 256>(x, q, scale, rows, c, stream);
  else err = launch_vec8<16, 256>(x, q, scale, rows, c, stream);
  return static_cast<int>(err);
}
