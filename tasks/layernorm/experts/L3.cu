// layernorm expert, layer 3 (low level): rows moved as 128-bit vectors (8 bf16 per load and
// store), weights and bias staged once per block in shared memory, a persistent grid whose blocks
// walk the rows with a grid stride, and the next row's loads issued before the current row's two
// reductions and stores (software pipelined: DRAM never waits on the barriers). The statistics are
// L2's: the mean from the registers, then the squared deviations from the registers, each reduced
// with warp shuffles and one barrier. This path needs every row 16-byte aligned (cols a multiple
// of 8, all pointers 16-byte aligned: every real model width) and cols <= 10240 (w and b fit the
// default 48 KB of shared memory); other shapes take layer 2's register-row kernel.
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

// Layer 2, for shapes the vector path does not take: rows longer than the register budget, or x / y not 4-byte aligned: block per row, three reads of
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


constexpr int kMaxVecCols = 10240;  // w and b in shared memory: 4 * cols bytes (40 KB) below the default 48 KB

// (x - mean) * rstd * w + b on one packed word of x, w and b; one packed conversion back.
__device__ __forceinline__ uint32_t norm2(uint32_t xw, uint32_t ww, uint32_t bw, float mean, float rstd) {
  const float o0 = fmaf((lo_of(xw) - mean) * rstd, lo_of(ww), lo_of(bw));
  const float o1 = fmaf((hi_of(xw) - mean) * rstd, hi_of(ww), hi_of(bw));
  const __nv_bfloat162 o = __floats2bfloat162_rn(o0, o1);
  return *reinterpret_cast<const uint32_t*>(&o);
}

__device__ __forceinline__ float sq_dev2(uint32_t xw, float mean, float acc) {
  const float d0 = lo_of(xw) - mean, d1 = hi_of(xw) - mean;
  return fmaf(d0, d0, fmaf(d1, d1, acc));
}

// V chunks of 8 columns per thread: thread t owns chunks t + 256 j of every row, the same columns
// in every row, so its weights and bias chunks are the same too.
template <int V>
__global__ void __launch_bounds__(kThreads)
layernorm_vec8(const uint4* __restrict__ x, const uint4* __restrict__ w, const uint4* __restrict__ b,
               uint4* __restrict__ y, int64_t rows, int nvec, float inv_cols) {
  extern __shared__ uint4 wb_s[];  // w chunks [0, nvec), b chunks [nvec, 2 nvec)
  // Two slot sets, one per reduction: a warp that runs ahead writes the other set, and it can only
  // reach the same set again after a barrier that the slow warps reach after reading it.
  __shared__ float sum_slots[kWarps], sq_slots[kWarps];
  const int tid = static_cast<int>(threadIdx.x);

  int64_t row = blockIdx.x;
  uint4 v[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int k = tid + j * kThreads;
    v[j] = (row < rows && k < nvec) ? x[row * nvec + k] : make_uint4(0u, 0u, 0u, 0u);
  }
  for (int k = tid; k < 2 * nvec; k += kThreads) wb_s[k] = k < nvec ? w[k] : b[k - nvec];
  __syncthreads();

  // The trip count is the same for every thread of the block, so the barriers are uniform.
  for (; row < rows; row += gridDim.x) {
    // Issue the next row's loads first: they fly during this row's reductions and stores.
    const int64_t next = row + gridDim.x;
    uint4 nv[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int k = tid + j * kThreads;
      nv[j] = (next < rows && k < nvec) ? x[next * nvec + k] : make_uint4(0u, 0u, 0u, 0u);
    }

    float s = 0.0f;  // padding chunks are zeros: they add nothing
#pragma unroll
    for (int j = 0; j < V; ++j)
      s += (lo_of(v[j].x) + hi_of(v[j].x)) + (lo_of(v[j].y) + hi_of(v[j].y)) +
           (lo_of(v[j].z) + hi_of(v[j].z)) + (lo_of(v[j].w) + hi_of(v[j].w));
    const float mean = block_sum(s, sum_slots) * inv_cols;

    float q = 0.0f;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (tid + j * kThreads < nvec) {  // padding chunks are not values: skip them
        q = sq_dev2(v[j].x, mean, q);
        q = sq_dev2(v[j].y, mean, q);
        q = sq_dev2(v[j].z, mean, q);
        q = sq_dev2(v[j].w, mean, q);
      }
    }
    const float rstd = rsqrtf(block_sum(q, sq_slots) * inv_cols + kEps);

#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int k = tid + j * kThreads;
      if (k < nvec) {
        const uint4 g = wb_s[k], o = wb_s[nvec + k];
        uint4 r;
        r.x = norm2(v[j].x, g.x, o.x, mean, rstd);
        r.y = norm2(v[j].y, g.y, o.y, mean, rstd);
        r.z = norm2(v[j].z, g.z, o.z, mean, rstd);
        r.w = norm2(v[j].w, g.w, o.w, mean, rstd);
        y[row * nvec + k] = r;
      }
    }
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = nv[j];
  }
}

template <int V>
cudaError_t launch_vec8(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
                        __nv_bfloat16* y, int64_t rows, int cols, float inv_cols, cudaStream_t stream) {
  struct Cache { int device = -1; size_t smem = 0; int64_t full = 0; };
  static Cache cache;  // one per instantiation: occupancy depends on V and the shared memory size
  const int nvec = cols / 8;
  const size_t smem = static_cast<size_t>(2 * nvec) * sizeof(uint4);
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (cache.device != device || cache.smem != smem) {
    int sms = 0, per_sm = 0;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, layernorm_vec8<V>, kThreads, smem);
    if (err != cudaSuccess) return err;
    cache.device = device;
    cache.smem = smem;
    cache.full = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
  }
  const unsigned blocks = static_cast<unsigned>(rows < cache.full ? rows : cache.full);
  layernorm_vec8<V><<<blocks, kThreads, smem, stream>>>(
      reinterpret_cast<const uint4*>(x), reinterpret_cast<const uint4*>(w), reinterpret_cast<const uint4*>(b),
      reinterpret_cast<uint4*>(y), rows, nvec, inv_cols);
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_layernorm(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
                             __nv_bfloat16* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (rows > 0x7fffffff || cols > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const int c = static_cast<int>(cols);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const uintptr_t any = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                        reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(b);
  if ((any & 15) == 0 && c % 8 == 0 && c <= kMaxVecCols) {
    const int v = (c / 8 + kThreads - 1) / kThreads;  // chunks per thread that cover a row
    cudaError_t err;
    if (v <= 1) err = launch_vec8<1>(x, w, b, y, rows, c, inv_cols, stream);
    else if (v <= 2) err = launch_vec8<2>(x, w, b, y, rows, c, inv_cols, stream);
    else if (v <= 3) err = launch_vec8<3>(x, w, b, y, rows, c, inv_cols, stream);
    else if (v <= 4) err = launch_vec8<4>(x, w, b, y, rows, c, inv_cols, stream);
    else err = launch_vec8<6>(x, w, b, y, rows, c, inv_cols, stream);
    return static_cast<int>(err);
  }
  // Layer 2's kernels for the other shapes.
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
