// softmax expert, layer 2 (dataflow): the mapping follows the row length, and DRAM sees each
// element read once. Rows of up to 1024 columns: one warp per row, the row held in registers,
// max and sum reduced with butterfly shuffles. Longer rows: one 512-thread block per row, the row
// cached in shared memory while the online (max, sum) statistics are gathered, pairs merged by
// warp shuffles then across warps; the output is computed from the cached copy.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kRowWarps = 4;        // rows (warps) per block in the warp-per-row kernel
constexpr int kWarpMaxCols = 1024;  // longest row kept in one warp's registers
constexpr int kBlockThreads = 512;  // block-per-row kernel
constexpr int kBatch = 8;           // loads in flight per thread in the block kernel

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(kFull, v, off));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(kFull, v, off);
  return v;
}

// Merges the pair (m2, s2) into (m, s): s is a sum of exp(x - m). An empty pair is (-inf, 0).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  if (mm == -INFINITY) return;  // both empty
  s = s * expf(m - mm) + s2 * expf(m2 - mm);
  m = mm;
}
__device__ __forceinline__ void warp_merge(float& m, float& s) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float m2 = __shfl_xor_sync(kFull, m, off);
    const float s2 = __shfl_xor_sync(kFull, s, off);
    merge(m, s, m2, s2);
  }
}

// One warp per row; lane l holds columns l, l + 32, ..., l + 32 (K - 1) in registers.
template <typename T, int K>
__global__ void __launch_bounds__(kRowWarps * 32)
softmax_warp_row(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowWarps + (threadIdx.x >> 5);
  if (row >= rows) return;  // warp-uniform: the whole warp leaves together
  const T* __restrict__ xr = x + row * cols;
  T* __restrict__ yr = y + row * cols;

  float v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = lane + 32 * k;
    v[k] = c < cols ? to_float(xr[c]) : -INFINITY;
  }
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < K; ++k) m = fmaxf(m, v[k]);
  m = warp_max(m);  // finite: every row has an element
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    v[k] = expf(v[k] - m);  // exp(-inf) = 0 for the padding
    s += v[k];
  }
  const float inv_sum = 1.0f / warp_sum(s);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = lane + 32 * k;
    if (c < cols) yr[c] = from_float<T>(v[k] * inv_sum);
  }
}

// One block per row. With kCached the row is copied to shared memory (its own type) during the
// statistics pass and the output pass reads it from there; otherwise the row is read twice.
template <typename T, bool kCached>
__global__ void __launch_bounds__(kBlockThreads)
softmax_block_row(const T* __restrict__ x, T* __restrict__ y, int cols) {
  extern __shared__ uint4 smem_raw[];
  T* cache = reinterpret_cast<T*>(smem_raw);
  __shared__ float red_m[kBlockThreads / 32];
  __shared__ float red_s[kBlockThreads / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const T* __restrict__ xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  T* __restrict__ yr = y + static_cast<int64_t>(blockIdx.x) * cols;

  // Statistics: kBatch coalesced loads in flight per thread, then an online update per batch.
  float m = -INFINITY, s = 0.0f;
  for (int base = 0; base < cols; base += kBlockThreads * kBatch) {
    float v[kBatch];
    float bm = -INFINITY;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int c = base + u * kBlockThreads + tid;
      if (c < cols) {
        const T raw = xr[c];
        if (kCached) cache[c] = raw;
        v[u] = to_float(raw);
      } else {
        v[u] = -INFINITY;
      }
      bm = fmaxf(bm, v[u]);
    }
    if (bm == -INFINITY) continue;  // nothing for this thread in this batch
    if (bm > m) {
      s *= expf(m - bm);  // m = -inf at first: s = 0 * 0
      m = bm;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) s += expf(v[u] - m);  // padding: exp(-inf) = 0
  }

  // Merge the pairs: butterfly within each warp, then across the warps.
  warp_merge(m, s);
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = s;
  }
  __syncthreads();
  m = lane < kBlockThreads / 32 ? red_m[lane] : -INFINITY;
  s = lane < kBlockThreads / 32 ? red_s[lane] : 0.0f;
  warp_merge(m, s);
  const float inv_sum = 1.0f / s;

  // Output. A thread reads back only the cache entries it wrote itself (same columns).
#pragma unroll 4
  for (int c = tid; c < cols; c += kBlockThreads) {
    const float v = to_float(kCached ? cache[c] : xr[c]);
    yr[c] = from_float<T>(expf(v - m) * inv_sum);
  }
}

template <typename T, int K>
void launch_warp(const T* x, T* y, int64_t rows, int cols, cudaStream_t stream) {
  const int64_t blocks = (rows + kRowWarps - 1) / kRowWarps;
  softmax_warp_row<T, K><<<static_cast<unsigned>(blocks), kRowWarps * 32, 0, stream>>>(
      x, y, rows, cols);
}

// Largest dynamic shared memory a block may use (opt-in), cached.
int max_dynamic_smem() {
  static int cached = -1;
  if (cached < 0) {
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess) {
      return 48 * 1024;
    }
    cached = optin - 1024;  // room for the static reduction arrays
  }
  return cached;
}

template <typename T>
cudaError_t launch(const T* x, T* y, int64_t rows, int cols, cudaStream_t stream) {
  if (cols <= kWarpMaxCols) {
    if (cols <= 32) launch_warp<T, 1>(x, y, rows, cols, stream);
    else if (cols <= 64) launch_warp<T, 2>(x, y, rows, cols, stream);
    else if (cols <= 128) launch_warp<T, 4>(x, y, rows, cols, stream);
    else if (cols <= 256) launch_warp<T, 8>(x, y, rows, cols, stream);
    else if (cols <= 512) launch_warp<T, 16>(x, y, rows, cols, stream);
    else launch_warp<T, 32>(x, y, rows, cols, stream);
    return cudaGetLastError();
  }
  const unsigned blocks = static_cast<unsigned>(rows);  // rows < 2^31 / 1024 here
  const int64_t bytes = static_cast<int64_t>(cols) * sizeof(T);
  if (bytes <= max_dynamic_smem()) {
    static int configured = 0;  // one per T: dynamic shared memory limit raised once
    if (bytes > 48 * 1024 && bytes > configured) {
      const cudaError_t err = cudaFuncSetAttribute(
          softmax_block_row<T, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
          max_dynamic_smem());
      if (err != cudaSuccess) return err;
      configured = max_dynamic_smem();
    }
    softmax_block_row<T, true><<<blocks, kBlockThreads, static_cast<size_t>(bytes), stream>>>(
        x, y, cols);
  } else {
    softmax_block_row<T, false><<<blocks, kBlockThreads, 0, stream>>>(x, y, cols);
  }
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_softmax(const void* x, void* y, int64_t rows, int64_t cols, int elem_bytes,
                           cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (cols > 0x7fffffff || rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  cudaError_t err;
  if (elem_bytes == 4) {
    err = launch(static_cast<const float*>(x), static_cast<float*>(y), rows,
                 static_cast<int>(cols), stream);
  } else if (elem_bytes == 2) {
    err = launch(static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(y), rows,
                 static_cast<int>(cols), stream);
  } else {
    err = cudaErrorInvalidValue;
  }
  return static_cast<int>(err);
}
