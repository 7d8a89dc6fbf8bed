// rmsnorm expert, layer 3 (low level): L2's register-held rows, moved as 128-bit vectors (8 bf16
// per load and store) with fp32 math on packed bf16x2 words. The row group (LPR lanes, V = 4
// vectors per lane) is tuned per row length: 4 lanes per 128-column row (8 rows per warp) up to
// the whole 256-thread block per 8192-column row. A persistent grid sized by occupancy stages the
// weights once per block. Rows that do not start on a 16-byte boundary peel up to 7 head and 7
// tail elements; their weight vectors are rebuilt from two aligned shared-memory vectors.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr float kEps = 1e-6f;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRedFloats = 2 * kWarps;  // double-buffered per-warp partial sums
constexpr int kMaxChunks = 2048;        // 16-byte chunks per row on the vector path

// Sum of squares of the two bf16 of a packed word (bf16 -> fp32 is a 16-bit shift).
__device__ __forceinline__ float sq2(uint32_t u, float acc) {
  const float lo = __uint_as_float(u << 16);
  const float hi = __uint_as_float(u & 0xffff0000u);
  return fmaf(hi, hi, fmaf(lo, lo, acc));
}

// x * scale * w on one packed word, one packed conversion back to bf16x2.
__device__ __forceinline__ uint32_t apply2(uint32_t xu, uint32_t wu, float scale) {
  const float x0 = __uint_as_float(xu << 16), x1 = __uint_as_float(xu & 0xffff0000u);
  const float w0 = __uint_as_float(wu << 16), w1 = __uint_as_float(wu & 0xffff0000u);
  const __nv_bfloat162 o = __floats2bfloat162_rn(x0 * scale * w0, x1 * scale * w1);
  return *reinterpret_cast<const uint32_t*>(&o);
}

// Elements s .. s+7 of the 16 bf16 in (a, b), s in 0..7: word shift by s/2, then a half-word
// shift when s is odd.
__device__ __forceinline__ uint4 shifted(uint4 a, uint4 b, int s) {
  const uint32_t wd[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  uint32_t u[6], t[5];
#pragma unroll
  for (int i = 0; i < 6; ++i) u[i] = (s & 4) ? wd[i + 2] : wd[i];
#pragma unroll
  for (int i = 0; i < 5; ++i) t[i] = (s & 2) ? u[i + 1] : u[i];
  const unsigned sel = (s & 1) ? 0x5432u : 0x3210u;
  return make_uint4(__byte_perm(t[0], t[1], sel), __byte_perm(t[1], t[2], sel),
                    __byte_perm(t[2], t[3], sel), __byte_perm(t[3], t[4], sel));
}

// LPR lanes own a row (LPR < 32: several rows per warp; LPR > 32: LPR / 32 warps per row); each
// lane holds V 16-byte chunks: chunk k = t + j * LPR of the row's aligned part. A block works on
// kThreads / LPR rows at a time and loops over the rows with a grid stride.
// A row starting m elements past a 16-byte boundary has head = (8 - m) % 8 leading elements, then
// nvec aligned chunks, then fewer than 8 tail elements; head and tail go to lanes t < head and
// 8 <= t < 8 + tail as scalars (only when LPR >= 16: the host picks LPR < 16 only when every row
// is aligned and cols is a multiple of 8).
template <int V, int LPR, bool kAligned>
__global__ void __launch_bounds__(kThreads)
rmsnorm_vec8(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
             __nv_bfloat16* __restrict__ y, int64_t rows, int cols, float inv_cols) {
  constexpr int kRowsPerIter = kThreads / LPR;
  constexpr int kWarpsPerRow = LPR > 32 ? LPR / 32 : 1;
  constexpr int kShuffleWidth = LPR < 32 ? LPR : 32;
  extern __shared__ uint4 smem4[];
  float* red = reinterpret_cast<float*>(smem4);
  const uint4* w_s4 = smem4 + kRedFloats / 4;
  __nv_bfloat16* w_s = reinterpret_cast<__nv_bfloat16*>(smem4 + kRedFloats / 4);

  // Weights at w_s[c], zero-padded to a whole chunk plus one (the shifted reads look one ahead).
  const int padded = (cols + 7) / 8 * 8 + 8;
  for (int c = static_cast<int>(threadIdx.x); c < padded; c += kThreads)
    w_s[c] = c < cols ? w[c] : __float2bfloat16(0.0f);
  __syncthreads();

  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int slot = static_cast<int>(threadIdx.x) / LPR;
  const int t = static_cast<int>(threadIdx.x) % LPR;
  int parity = 0;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kRowsPerIter; base < rows;
       base += static_cast<int64_t>(gridDim.x) * kRowsPerIter) {
    const int64_t row = base + slot;
    const bool active = row < rows;
    const __nv_bfloat16* xr = x + (active ? row : 0) * cols;
    __nv_bfloat16* yr = y + (active ? row : 0) * cols;
    const int m = static_cast<int>((reinterpret_cast<uintptr_t>(xr) >> 1) & 7);
    const int head = kAligned ? 0 : min((8 - m) & 7, cols);
    const int nvec = (cols - head) >> 3;
    const int tail_start = head + 8 * nvec;

    const uint4* xv = reinterpret_cast<const uint4*>(xr + head);
    uint4 v[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int k = t + j * LPR;
      v[j] = (active && k < nvec) ? xv[k] : make_uint4(0u, 0u, 0u, 0u);
    }
    int ec = -1;
    if (kAligned) ec = -1;
    else if (t < head) ec = t;
    else if (t >= 8 && tail_start + t - 8 < cols) ec = tail_start + t - 8;
    const float e = (active && ec >= 0) ? __bfloat162float(xr[ec]) : 0.0f;

    float sum = e * e;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      sum = sq2(v[j].x, sum);
      sum = sq2(v[j].y, sum);
      sum = sq2(v[j].z, sum);
      sum = sq2(v[j].w, sum);
    }
#pragma unroll
    for (int offset = kShuffleWidth / 2; offset > 0; offset /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (kWarpsPerRow > 1) {
      // Same trip count in every warp of the block, so the barrier is uniform; the two
      // buffers alternate, so a warp one iteration ahead never overwrites unread sums.
      if (lane == 0) red[parity * kWarps + warp] = sum;
      __syncthreads();
      sum = 0.0f;
#pragma unroll
      for (int g = 0; g < kWarpsPerRow; ++g) sum += red[parity * kWarps + slot * kWarpsPerRow + g];
      parity ^= 1;
    }
    const float scale = rsqrtf(sum * inv_cols + kEps);
    if (!active) continue;

    uint4* yv = reinterpret_cast<uint4*>(yr + head);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int k = t + j * LPR;
      if (k < nvec) {
        // Columns head + 8k .. head + 8k + 7: shared chunk k shifted by head elements.
        const uint4 g = (kAligned || head == 0) ? w_s4[k] : shifted(w_s4[k], w_s4[k + 1], head);
        uint4 o;
        o.x = apply2(v[j].x, g.x, scale);
        o.y = apply2(v[j].y, g.y, scale);
        o.z = apply2(v[j].z, g.z, scale);
        o.w = apply2(v[j].w, g.w, scale);
        yv[k] = o;
      }
    }
    if (ec >= 0) yr[ec] = __float2bfloat16(e * scale * __bfloat162float(w_s[ec]));
  }
}

// Fallback (x and y at different 16-byte offsets, or rows over kMaxChunks chunks): warp per row,
// scalar accesses, the row read twice (second read from the cache).
__global__ void __launch_bounds__(kThreads)
rmsnorm_scalar_rows(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                    __nv_bfloat16* __restrict__ y, int64_t rows, int cols, float inv_cols) {
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
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float scale = rsqrtf(sum * inv_cols + kEps);
  for (int c = lane; c < cols; c += 32)
    yr[c] = __float2bfloat16(__bfloat162float(xr[c]) * scale * __bfloat162float(w[c]));
}

template <int V, int LPR, bool kAligned>
cudaError_t launch_vec8(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                        int64_t rows, int cols, float inv_cols, cudaStream_t stream) {
  struct Cache { int device = -1; size_t smem = 0; int64_t full = 0; };
  static Cache cache;  // one per instantiation: occupancy depends on the shared memory size
  const size_t smem = kRedFloats * sizeof(float) +
                      static_cast<size_t>((cols + 7) / 8 * 8 + 8) * sizeof(__nv_bfloat16);
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (cache.device != device || cache.smem != smem) {
    int sms = 0, per_sm = 0;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rmsnorm_vec8<V, LPR, kAligned>,
                                                        kThreads, smem);
    if (err != cudaSuccess) return err;
    cache.device = device;
    cache.smem = smem;
    cache.full = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
  }
  constexpr int kRowsPerIter = kThreads / LPR;
  const int64_t needed = (rows + kRowsPerIter - 1) / kRowsPerIter;
  const unsigned blocks = static_cast<unsigned>(needed < cache.full ? needed : cache.full);
  rmsnorm_vec8<V, LPR, kAligned><<<blocks, kThreads, smem, stream>>>(x, w, y, rows, cols, inv_cols);
  return cudaGetLastError();
}

// Row group per row length (chunks = 16-byte chunks per row): about 4 chunks (64 bytes) per lane,
// so every lane has the same bytes in flight and the registers stay low (no spills, 3-4 blocks
// of 256 threads per SM). Sub-warp groups (LPR < 16) only when every row is aligned: they have
// no lanes for head and tail elements.
template <bool kAligned>
cudaError_t dispatch(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                     int64_t rows, int cols, float inv_cols, cudaStream_t stream) {
  const int chunks = cols / 8;
  if (kAligned && chunks <= 16)
    return launch_vec8<4, 4, kAligned>(x, w, y, rows, cols, inv_cols, stream);
  if (kAligned && chunks <= 32)
    return launch_vec8<4, 8, kAligned>(x, w, y, rows, cols, inv_cols, stream);
  if (chunks <= 64) return launch_vec8<4, 16, kAligned>(x, w, y, rows, cols, inv_cols, stream);
  if (chunks <= 128) return launch_vec8<4, 32, kAligned>(x, w, y, rows, cols, inv_cols, stream);
  if (chunks <= 256) return launch_vec8<4, 64, kAligned>(x, w, y, rows, cols, inv_cols, stream);
  if (chunks <= 512) return launch_vec8<4, 128, kAligned>(x, w, y, rows, cols, inv_cols, stream);
  if (chunks <= 640) return launch_vec8<5, 128, kAligned>(x, w, y, rows, cols, inv_cols, stream);
  if (chunks <= 1024) return launch_vec8<4, 256, kAligned>(x, w, y, rows, cols, inv_cols, stream);
  return launch_vec8<8, 256, kAligned>(x, w, y, rows, cols, inv_cols, stream);
}

}  // namespace

extern "C" int d2k_rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                           int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if (cols > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const int c = static_cast<int>(cols);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const uintptr_t xa = reinterpret_cast<uintptr_t>(x), ya = reinterpret_cast<uintptr_t>(y);
  const int chunks = c / 8;  // no row has more aligned chunks than this
  // Every row starts on a 16-byte boundary: sub-warp row groups need no head or tail lanes.
  const bool all_aligned = (xa & 15) == 0 && c % 8 == 0;
  cudaError_t err;
  if ((xa & 15) != (ya & 15) || (xa & 1) != 0 || chunks > kMaxChunks) {
    const int64_t blocks = (rows + kWarps - 1) / kWarps;
    if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
    rmsnorm_scalar_rows<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, w, y, rows, c,
                                                                               inv_cols);
    err = cudaGetLastError();
  } else if (all_aligned) {
    err = dispatch<true>(x, w, y, rows, c, inv_cols, stream);
  } else {
    err = dispatch<false>(x, w, y, rows, c, inv_cols, stream);
  }
  return static_cast<int>(err);
}
