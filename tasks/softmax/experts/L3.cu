// softmax expert, layer 3 (low level): L2's dataflow (warp per short row in registers, block per
// long row cached in shared memory, one DRAM read) with 128-bit accesses (4 floats or 8 bf16 per
// load/store; global and shared), a scalar head and tail per row so that odd row lengths (rows
// that start unaligned) still use vectors, exp2 (MUFU.EX2) with log2(e) folded into one fma,
// packed bf16 max, 8 rows per block for short rows, and 256/512-thread blocks (by row length)
// with 4 vectors in flight per thread for long rows.
#include <cstdint>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kRowWarps = 8;        // rows (warps) per block in the warp-per-row kernel
constexpr int kWarpMaxCols = 1024;  // longest row kept in one warp's registers (32 floats/lane)
constexpr int kBatch = 4;           // 16-byte packs in flight per thread in the block kernel

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// 16-byte global load and store. The store is written out explicitly: left to itself the
// compiler split some uint4 stores into four 32-bit stores, which turns every 32-byte sector into
// two partial writes and doubles the L2 write traffic (seen on the H200).
__device__ __forceinline__ uint4 load16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }
__device__ __forceinline__ void store16(void* p, const uint4& u) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(u.x), "r"(u.y), "r"(u.z),
               "r"(u.w)
               : "memory");
}

// W consecutive elements moved by one memory instruction: 16 bytes, or one element (W = 1, the
// fallback when x and y are not congruent modulo 16 bytes).
template <typename T, int W> struct Pack;

template <typename T> struct Pack<T, 1> {
  T e;
  __device__ __forceinline__ void load(const T* p) { e = *p; }
  __device__ __forceinline__ void store(T* p) const { *p = e; }
  __device__ __forceinline__ void unpack(float (&f)[1]) const { f[0] = to_float(e); }
  __device__ __forceinline__ void pack(const float (&f)[1]) { e = from_float<T>(f[0]); }
  __device__ __forceinline__ float max_value() const { return to_float(e); }
};

template <> struct Pack<float, 4> {
  uint4 u;
  __device__ __forceinline__ void load(const float* p) { u = load16(p); }
  __device__ __forceinline__ void store(float* p) const { store16(p, u); }
  __device__ __forceinline__ void unpack(float (&f)[4]) const {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
  }
  __device__ __forceinline__ void pack(const float (&f)[4]) {
    u = make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                   __float_as_uint(f[3]));
  }
  __device__ __forceinline__ float max_value() const {
    return fmaxf(fmaxf(__uint_as_float(u.x), __uint_as_float(u.y)),
                 fmaxf(__uint_as_float(u.z), __uint_as_float(u.w)));
  }
};

__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ unsigned bf16_pair(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  unsigned w;
  memcpy(&w, &h, sizeof(w));
  return w;
}

__device__ __forceinline__ __nv_bfloat162 as_bf162(unsigned w) {
  __nv_bfloat162 h;
  memcpy(&h, &w, sizeof(w));
  return h;
}

template <> struct Pack<__nv_bfloat16, 8> {
  uint4 u;
  __device__ __forceinline__ void load(const __nv_bfloat16* p) { u = load16(p); }
  __device__ __forceinline__ void store(__nv_bfloat16* p) const { store16(p, u); }
  __device__ __forceinline__ void unpack(float (&f)[8]) const {
    f[0] = bf16_lo(u.x); f[1] = bf16_hi(u.x);
    f[2] = bf16_lo(u.y); f[3] = bf16_hi(u.y);
    f[4] = bf16_lo(u.z); f[5] = bf16_hi(u.z);
    f[6] = bf16_lo(u.w); f[7] = bf16_hi(u.w);
  }
  __device__ __forceinline__ void pack(const float (&f)[8]) {
    u = make_uint4(bf16_pair(f[0], f[1]), bf16_pair(f[2], f[3]), bf16_pair(f[4], f[5]),
                   bf16_pair(f[6], f[7]));
  }
  // Maximum of the 8 values on packed pairs (three bf16x2 max instructions, exact).
  __device__ __forceinline__ float max_value() const {
    const __nv_bfloat162 m = __hmax2(__hmax2(as_bf162(u.x), as_bf162(u.y)),
                                     __hmax2(as_bf162(u.z), as_bf162(u.w)));
    return fmaxf(__low2float(m), __high2float(m));
  }
};

// A row split for W-wide access: `head` scalars up to the first 16-byte boundary, `nvec` packs,
// then `tail` scalars (head, tail < W). x and y rows share the split (host checks congruence).
template <typename T, int W>
struct RowSplit {
  int head, nvec, tail;
  __device__ __forceinline__ RowSplit(const T* row, int cols) {
    if (W == 1) {
      head = 0;
    } else {
      const unsigned mis = static_cast<unsigned>(reinterpret_cast<uintptr_t>(row) & 15u);
      head = static_cast<int>(((16u - mis) & 15u) / sizeof(T));
      if (head > cols) head = cols;
    }
    nvec = (cols - head) / W;
    tail = cols - head - nvec * W;
  }
};

// 2^x by the hardware approximation (MUFU.EX2, relative error ~2^-22, results below 2^-126
// flushed to zero): exp2f would add a range fix-up of three instructions around it.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// exp(v - m) as 2^(v * log2e - m * log2e): one fma and one MUFU.EX2.
__device__ __forceinline__ float exp_shifted(float v, float m_log2e) {
  return fast_exp2(fmaf(v, kLog2e, -m_log2e));
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

// Merges (m2, s2) into (m, s), s a sum of exp(x - m). An empty pair is (-inf, 0).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  if (mm == -INFINITY) return;  // both empty
  s = s * fast_exp2((m - mm) * kLog2e) + s2 * fast_exp2((m2 - mm) * kLog2e);
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

// One warp per row, the row in registers as fp32: lane l holds packs l, l + 32, ... (VPL of
// them) and at most one head and one tail scalar.
template <typename T, int W, int VPL>
__global__ void __launch_bounds__(kRowWarps * 32)
softmax_warp_row(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowWarps + (threadIdx.x >> 5);
  if (row >= rows) return;  // warp-uniform: the whole warp leaves together
  const T* __restrict__ xr = x + row * cols;
  T* __restrict__ yr = y + row * cols;
  const RowSplit<T, W> sp(xr, cols);
  const T* __restrict__ xv = xr + sp.head;
  T* __restrict__ yv = yr + sp.head;

  float f[VPL][W];
#pragma unroll
  for (int k = 0; k < VPL; ++k) {
    const int v = lane + 32 * k;
    if (v < sp.nvec) {
      Pack<T, W> p;
      p.load(xv + static_cast<int64_t>(v) * W);
      p.unpack(f[k]);
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) f[k][j] = -INFINITY;
    }
  }
  float h = lane < sp.head ? to_float(xr[lane]) : -INFINITY;
  float t = lane < sp.tail ? to_float(xv[sp.nvec * W + lane]) : -INFINITY;

  float m = fmaxf(h, t);
#pragma unroll
  for (int k = 0; k < VPL; ++k)
#pragma unroll
    for (int j = 0; j < W; ++j) m = fmaxf(m, f[k][j]);
  m = warp_max(m);  // finite: every row has an element
  const float m_log2e = m * kLog2e;

  h = exp_shifted(h, m_log2e);  // -inf (absent) gives 0
  t = exp_shifted(t, m_log2e);
  float s = h + t;
#pragma unroll
  for (int k = 0; k < VPL; ++k)
#pragma unroll
    for (int j = 0; j < W; ++j) {
      f[k][j] = exp_shifted(f[k][j], m_log2e);
      s += f[k][j];
    }
  const float inv_sum = 1.0f / warp_sum(s);

#pragma unroll
  for (int k = 0; k < VPL; ++k) {
    const int v = lane + 32 * k;
    if (v < sp.nvec) {
#pragma unroll
      for (int j = 0; j < W; ++j) f[k][j] *= inv_sum;
      Pack<T, W> p;
      p.pack(f[k]);
      p.store(yv + static_cast<int64_t>(v) * W);
    }
  }
  if (lane < sp.head) yr[lane] = from_float<T>(h * inv_sum);
  if (lane < sp.tail) yv[sp.nvec * W + lane] = from_float<T>(t * inv_sum);
}

// Per-thread (max, sum) over the packs v = tid, tid + THREADS, ... < nvec, kBatch packs at a
// time (online: the sum is rescaled when a batch raises the max). get(v) fetches pack v; put(v, p)
// sees every pack once (used to fill the shared-memory cache when the packs come from registers).
template <typename T, int W, int THREADS, typename Get, typename Put>
__device__ __forceinline__ void thread_stats(int nvec, float& m, float& s, Get get, Put put) {
  const int tid = threadIdx.x;
  for (int base = 0; base < nvec; base += THREADS * kBatch) {
    Pack<T, W> p[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int v = base + u * THREADS + tid;
      if (v < nvec) p[u] = get(v);
    }
    float bm = -INFINITY;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int v = base + u * THREADS + tid;
      if (v < nvec) {
        put(v, p[u]);
        bm = fmaxf(bm, p[u].max_value());
      }
    }
    if (bm == -INFINITY) continue;  // nothing for this thread in this batch
    if (bm > m) {
      s *= fast_exp2((m - bm) * kLog2e);  // m = -inf at first: s = 0 * 0
      m = bm;
    }
    const float m_log2e = m * kLog2e;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int v = base + u * THREADS + tid;
      if (v < nvec) {
        float f[W];
        p[u].unpack(f);  // unpacked again rather than held: fewer live registers
#pragma unroll
        for (int j = 0; j < W; ++j) s += exp_shifted(f[j], m_log2e);
      }
    }
  }
}

// Merges the block's (max, sum) pairs: butterfly within each warp, one exchange through shared
// memory (red_m/red_s, THREADS/32 entries), butterfly again. Ends with one barrier.
template <int THREADS>
__device__ __forceinline__ void block_merge(float& m, float& s, float* red_m, float* red_s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_merge(m, s);
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = s;
  }
  __syncthreads();
  m = lane < THREADS / 32 ? red_m[lane] : -INFINITY;
  s = lane < THREADS / 32 ? red_s[lane] : 0.0f;
  warp_merge(m, s);
}

// (max, sum) of the head and tail scalars a thread holds (-inf when absent).
__device__ __forceinline__ void scalar_stats(float h, float t, float& m, float& s) {
  m = fmaxf(h, t);
  s = 0.0f;
  if (m != -INFINITY) {
    const float m_log2e = m * kLog2e;
    s = exp_shifted(h, m_log2e) + exp_shifted(t, m_log2e);
  }
}

// Output pass over the thread's packs (get(v) as above) and its head/tail scalars.
template <typename T, int W, int THREADS, typename Get>
__device__ __forceinline__ void write_row(const RowSplit<T, W>& sp, T* __restrict__ yr, float h,
                                          float t, float m, float s, Get get) {
  const int tid = threadIdx.x;
  T* __restrict__ yv = yr + sp.head;
  const float m_log2e = m * kLog2e;
  const float inv_sum = 1.0f / s;
#pragma unroll 4
  for (int v = tid; v < sp.nvec; v += THREADS) {
    Pack<T, W> p = get(v);
    float f[W];
    p.unpack(f);
#pragma unroll
    for (int j = 0; j < W; ++j) f[j] = exp_shifted(f[j], m_log2e) * inv_sum;
    p.pack(f);
    p.store(yv + static_cast<int64_t>(v) * W);
  }
  if (tid < sp.head) yr[tid] = from_float<T>(exp_shifted(h, m_log2e) * inv_sum);
  if (tid < sp.tail) yv[sp.nvec * W + tid] = from_float<T>(exp_shifted(t, m_log2e) * inv_sum);
}

// One block per row. Each thread loads kBatch packs at a time (all in flight before any is used),
// folds them into its online (max, sum) and, with kCached, parks them in shared memory in their
// own type; the output pass reads back only the packs the thread itself stored, so the one
// barrier of the reduction is the only one. Without kCached (rows beyond shared memory) the
// output pass reads the row again from global memory.
template <typename T, int W, int THREADS, bool kCached>
__global__ void __launch_bounds__(THREADS, 1536 / THREADS)
softmax_block_row(const T* __restrict__ x, T* __restrict__ y, int cols) {
  extern __shared__ uint4 smem_raw[];
  Pack<T, W>* const cache = reinterpret_cast<Pack<T, W>*>(smem_raw);
  __shared__ float red_m[THREADS / 32];
  __shared__ float red_s[THREADS / 32];
  const int tid = threadIdx.x;
  const T* __restrict__ xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  const RowSplit<T, W> sp(xr, cols);
  const T* __restrict__ xv = xr + sp.head;

  auto gload = [&](int v) {
    Pack<T, W> p;
    p.load(xv + static_cast<int64_t>(v) * W);
    return p;
  };
  auto put = [&](int v, const Pack<T, W>& p) {
    if (kCached) cache[v] = p;
  };
  const float h = tid < sp.head ? to_float(xr[tid]) : -INFINITY;
  const float t = tid < sp.tail ? to_float(xv[sp.nvec * W + tid]) : -INFINITY;
  float m, s;
  scalar_stats(h, t, m, s);
  thread_stats<T, W, THREADS>(sp.nvec, m, s, gload, put);
  block_merge<THREADS>(m, s, red_m, red_s);
  T* yr = y + static_cast<int64_t>(blockIdx.x) * cols;
  if (kCached) write_row<T, W, THREADS>(sp, yr, h, t, m, s, [&](int v) { return cache[v]; });
  else write_row<T, W, THREADS>(sp, yr, h, t, m, s, gload);
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

// Raises a kernel's dynamic shared memory limit to the maximum, once per kernel.
template <typename Kernel>
cudaError_t allow_smem(Kernel kernel, bool& done) {
  if (done) return cudaSuccess;
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_dynamic_smem());
  if (err == cudaSuccess) done = true;
  return err;
}

template <typename T, int W, int VPL>
void launch_warp(const T* x, T* y, int64_t rows, int cols, cudaStream_t stream) {
  const int64_t blocks = (rows + kRowWarps - 1) / kRowWarps;
  softmax_warp_row<T, W, VPL><<<static_cast<unsigned>(blocks), kRowWarps * 32, 0, stream>>>(
      x, y, rows, cols);
}

template <typename T, int W, int THREADS>
cudaError_t launch_block(const T* x, T* y, int64_t rows, int cols, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(rows);  // rows < 2^31 / 1024 here
  const int64_t bytes = static_cast<int64_t>(cols / W) * static_cast<int64_t>(sizeof(Pack<T, W>));
  if (bytes <= max_dynamic_smem()) {
    static bool allowed = false;  // one per kernel
    const cudaError_t err = allow_smem(softmax_block_row<T, W, THREADS, true>, allowed);
    if (err != cudaSuccess) return err;
    softmax_block_row<T, W, THREADS, true>
        <<<blocks, THREADS, static_cast<size_t>(bytes), stream>>>(x, y, cols);
  } else {
    softmax_block_row<T, W, THREADS, false><<<blocks, THREADS, 0, stream>>>(x, y, cols);
  }
  return cudaGetLastError();
}

template <typename T, int W>
cudaError_t launch(const T* x, T* y, int64_t rows, int cols, cudaStream_t stream) {
  constexpr int kMaxVpl = 32 / W;  // 32 fp32 values per lane at most
  const int nvec = cols / W;        // packs per row at most (the head only lowers it)
  if (cols <= kWarpMaxCols) {
    if (nvec <= 32) launch_warp<T, W, 1>(x, y, rows, cols, stream);
    else if (nvec <= 64) launch_warp<T, W, (2 <= kMaxVpl ? 2 : 1)>(x, y, rows, cols, stream);
    else if (nvec <= 128) launch_warp<T, W, (4 <= kMaxVpl ? 4 : 1)>(x, y, rows, cols, stream);
    else if (nvec <= 256) launch_warp<T, W, (8 <= kMaxVpl ? 8 : 1)>(x, y, rows, cols, stream);
    else if (nvec <= 512) launch_warp<T, W, (16 <= kMaxVpl ? 16 : 1)>(x, y, rows, cols, stream);
    else launch_warp<T, W, (32 <= kMaxVpl ? 32 : 1)>(x, y, rows, cols, stream);
    return cudaGetLastError();
  }
  // Long rows, one block per row: 256 threads (one batch of 4 packs each) up to 1024 packs, 512
  // threads beyond. Measured on the H200 for rows of about 100 KB (two cached rows per SM): 512
  // threads x 4 packs 3.38 TB/s, 768 x 4 3.35, 512 x 8 3.19.
  if (nvec <= 256 * kBatch) return launch_block<T, W, 256>(x, y, rows, cols, stream);
  return launch_block<T, W, 512>(x, y, rows, cols, stream);
}

template <typename T>
cudaError_t dispatch(const void* xp, void* yp, int64_t rows, int cols, cudaStream_t stream) {
  const T* x = static_cast<const T*>(xp);
  T* y = static_cast<T*>(yp);
  const uintptr_t ax = reinterpret_cast<uintptr_t>(x), ay = reinterpret_cast<uintptr_t>(y);
  // Vector access needs x and y element-aligned and congruent modulo 16 bytes, so that one
  // head length aligns both rows.
  if ((ax % sizeof(T)) == 0 && (ay % sizeof(T)) == 0 && ((ax - ay) & 15u) == 0) {
    return launch<T, 16 / sizeof(T)>(x, y, rows, cols, stream);
  }
  return launch<T, 1>(x, y, rows, cols, stream);
}

}  // namespace

extern "C" int d2k_softmax(const void* x, void* y, int64_t rows, int64_t cols, int elem_bytes,
                           cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (cols > 0x7fffffff || rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  cudaError_t err;
  if (elem_bytes == 4) {
    err = dispatch<float>(x, y, rows, static_cast<int>(cols), stream);
  } else if (elem_bytes == 2) {
    err = dispatch<__nv_bfloat16>(x, y, rows, static_cast<int>(cols), stream);
  } else {
    err = cudaErrorInvalidValue;
  }
  return static_cast<int>(err);
}
