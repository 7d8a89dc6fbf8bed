// fp8_quant expert, layer 3 (low level): rows moved as 128-bit vectors (8 bf16 per load, 8 codes
// per 64-bit store), the largest magnitude taken on packed bf16 pairs (bit-mask absolute value and
// a paired max), a persistent grid whose blocks walk the rows with a grid stride, and the next
// row's loads issued before the current row's reduction, barrier and stores (software pipelined,
// so DRAM never waits on the barrier). Rows that do not start on an 8-element boundary (cols not a
// multiple of 8) peel up to 7 head and 7 tail elements as scalars: x element e and q byte e share
// their offset modulo 8, so one peel aligns both (x 16-byte, q 8-byte).
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

template <int V>
__device__ __forceinline__ void load_row(const __nv_bfloat16* __restrict__ x, int64_t row, int cols,
                                         int tid, uint4 (&v)[V], float& e) {
  const int64_t start = row * cols;
  const RowSplit s = split_row(start, cols);
  const uint4* xv = reinterpret_cast<const uint4*>(x + start + s.head);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int k = tid + j * kThreads;
    v[j] = k < s.nvec ? xv[k] : make_uint4(0u, 0u, 0u, 0u);
  }
  const int ec = scalar_col(s, tid);
  e = ec >= 0 ? __bfloat162float(x[start + ec]) : 0.0f;
}

// V chunks of 8 elements per thread: rows of up to 2048 V columns (plus the peeled ones).
template <int V>
__global__ void __launch_bounds__(kThreads)
fp8_quant_vec8(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ q,
               float* __restrict__ scale, int64_t rows, int cols) {
  __shared__ float red[2][kWarps];  // double-buffered warp maxima: one barrier per row
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  int parity = 0;

  uint4 v[V];
  float e = 0.0f;
  int64_t row = blockIdx.x;
  if (row < rows) load_row<V>(x, row, cols, tid, v, e);
  // The trip count is the same for every thread of the block, so the barrier is uniform.
  for (; row < rows; row += gridDim.x) {
    // Issue the next row's loads first: they fly during this row's reduction and stores.
    uint4 nv[V];
    float ne = 0.0f;
    const int64_t next = row + gridDim.x;
    if (next < rows) load_row<V>(x, next, cols, tid, nv, ne);

    __nv_bfloat162 pm = __floats2bfloat162_rn(0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      pm = absmax2(pm, v[j].x);
      pm = absmax2(pm, v[j].y);
      pm = absmax2(pm, v[j].z);
      pm = absmax2(pm, v[j].w);
    }
    float m = fmaxf(fabsf(e), fmaxf(__low2float(pm), __high2float(pm)));
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if (lane == 0) red[parity][tid >> 5] = m;
    __syncthreads();
    m = red[parity][0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) m = fmaxf(m, red[parity][w]);
    parity ^= 1;
    const float a = fmaxf(m, 1e-12f);
    const float inv = 448.0f / a;
    if (tid == 0) scale[row] = a / 448.0f;

    const int64_t start = row * cols;
    const RowSplit s = split_row(start, cols);
    uint2* qv = reinterpret_cast<uint2*>(q + start + s.head);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int k = tid + j * kThreads;
      if (k < s.nvec) qv[k] = make_uint2(e4m3x4(v[j].x, v[j].y, inv), e4m3x4(v[j].z, v[j].w, inv));
    }
    const int ec = scalar_col(s, tid);
    if (ec >= 0) q[start + ec] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(e * inv, __NV_SATFINITE, __NV_E4M3));

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

template <int V>
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
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fp8_quant_vec8<V>, kThreads, 0);
    if (err != cudaSuccess) return err;
    cached_blocks = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
    cached_device = device;
  }
  const unsigned blocks = static_cast<unsigned>(rows < cached_blocks ? rows : cached_blocks);
  fp8_quant_vec8<V><<<blocks, kThreads, 0, stream>>>(x, q, scale, rows, cols);
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_fp8_quant(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t rows,
                             int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff || cols > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const int c = static_cast<int>(cols);
  const int64_t v = (cols + 8 * kThreads - 1) / (8 * kThreads);  // chunks per thread that cover a row
  const bool aligned = (reinterpret_cast<uintptr_t>(x) & 15) == 0 && (reinterpret_cast<uintptr_t>(q) & 7) == 0;
  cudaError_t err;
  if (!aligned || v > 16) {
    fp8_quant_two_pass<<<static_cast<unsigned>(rows), kPairThreads, 0, stream>>>(x, q, scale, c);
    err = cudaGetLastError();
  } else if (v <= 1) err = launch_vec8<1>(x, q, scale, rows, c, stream);
  else if (v <= 2) err = launch_vec8<2>(x, q, scale, rows, c, stream);
  else if (v <= 3) err = launch_vec8<3>(x, q, scale, rows, c, stream);
  else if (v <= 4) err = launch_vec8<4>(x, q, scale, rows, c, stream);
  else if (v <= 6) err = launch_vec8<6>(x, q, scale, rows, c, stream);
  else if (v <= 8) err = launch_vec8<8>(x, q, scale, rows, c, stream);
  else if (v <= 12) err = launch_vec8<12>(x, q, scale, rows, c, stream);
  else err = launch_vec8<16>(x, q, scale, rows, c, stream);
  return static_cast<int>(err);
}
