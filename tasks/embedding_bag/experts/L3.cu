// embedding_bag expert, layer 3 (low level): layer 2's dataflow (the sums of a bag's columns in
// registers for the whole bag, indices loaded 32 at a time per warp and broadcast with shuffles,
// several rows in flight) with 128-bit accesses and a group of lanes sized to the row: a lane owns
// V 16-byte chunks (8 columns each) of every looked-up row; LPB lanes serve a bag (16 for 128
// columns, 16 bags per block; 128 for 1024; the whole 256-thread block for 2048 and, with two
// chunks per lane, 4096). Rows per step: kVecRowsOneChunk with one chunk per lane,
// kVecRowsTwoChunks with two. Groups narrower than a warp read their indices directly (two bags
// share a warp, so their loops differ and cannot shuffle). dim not a multiple of 8, misaligned
// pointers or dim over 4096 take layer 2's kernel (warp per bag and column slice).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;               // 8 warps per block, each on its own (bag, slice)
constexpr int kWarps = kThreads / 32;
constexpr int kCols = 2;                    // columns per lane: a warp slice is 32 kCols columns (64 kCols bytes)
constexpr int kSlice = 32 * kCols;
constexpr int kRowsInFlight = 4;  // layer 2's kernel (the fallback)

__global__ void __launch_bounds__(kThreads)
embedding_bag_warp_slice(const int* __restrict__ offsets, const int* __restrict__ indices,
                         const __nv_bfloat16* __restrict__ table, __nv_bfloat16* __restrict__ out, int64_t rows,
                         int64_t dim, int64_t slices) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= rows * slices) return;  // a whole warp leaves together: the shuffles stay uniform
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t b = item / slices;
  const int64_t c0 = (item - b * slices) * kSlice + lane;
  const int begin = offsets[b], end = offsets[b + 1];
  bool in[kCols];
  float acc[kCols];
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    in[k] = c0 + 32 * k < dim;
    acc[k] = 0.0f;
  }
  for (int j0 = begin; j0 < end; j0 += 32) {
    const int n = end - j0 < 32 ? end - j0 : 32;  // the same for every lane
    const int mine = lane < n ? indices[j0 + lane] : 0;
    for (int i = 0; i < n; i += kRowsInFlight) {
      float v[kRowsInFlight][kCols];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        const int64_t row = __shfl_sync(0xffffffffu, mine, (i + u) & 31);
        const __nv_bfloat16* r = table + row * dim + c0;
#pragma unroll
        for (int k = 0; k < kCols; ++k) v[u][k] = (i + u < n && in[k]) ? __bfloat162float(r[32 * k]) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u)
#pragma unroll
        for (int k = 0; k < kCols; ++k) acc[k] += v[u][k];  // rows past the bag's end add 0
    }
  }
#pragma unroll
  for (int k = 0; k < kCols; ++k)
    if (in[k]) out[b * dim + c0 + 32 * k] = __float2bfloat16(acc[k]);
}

void launch_warp_slice(const int* offsets, const int* indices, const __nv_bfloat16* table, __nv_bfloat16* out,
                       int64_t rows, int64_t dim, int64_t slices, int64_t blocks, cudaStream_t stream) {
  embedding_bag_warp_slice<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(offsets, indices, table, out,
                                                                                    rows, dim, slices);
}

constexpr int kVecRowsOneChunk = 4;  // rows per step in the 128-bit kernel when a lane owns one chunk of a row
constexpr int kVecRowsTwoChunks = 4;  // ... and when it owns two (4096 columns)

__device__ __forceinline__ float lo_of(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_of(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ void add8(float (&acc)[8], const uint4& r) {
  acc[0] += lo_of(r.x); acc[1] += hi_of(r.x);
  acc[2] += lo_of(r.y); acc[3] += hi_of(r.y);
  acc[4] += lo_of(r.z); acc[5] += hi_of(r.z);
  acc[6] += lo_of(r.w); acc[7] += hi_of(r.w);
}

__device__ __forceinline__ uint32_t pack2(float a, float b) {
  const __nv_bfloat162 o = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&o);
}

template <int V, int LPB>
__global__ void __launch_bounds__(kThreads)
embedding_bag_vec8(const int* __restrict__ offsets, const int* __restrict__ indices,
                   const uint4* __restrict__ table, uint4* __restrict__ out, int64_t rows, int chunks) {
  constexpr int kVecRows = V == 1 ? kVecRowsOneChunk : kVecRowsTwoChunks;  // 16-byte loads in flight per lane: kVecRows x V
  constexpr int kBagsPerBlock = kThreads / LPB;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int t = tid % LPB;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kBagsPerBlock + tid / LPB;
  if (b >= rows) return;  // a whole group (a whole warp when LPB >= 32) leaves together; no barriers
  const int begin = offsets[b], end = offsets[b + 1];
  float acc[V][8];
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[v][e] = 0.0f;

  if (LPB >= 32) {
    for (int j0 = begin; j0 < end; j0 += 32) {
      const int n = end - j0 < 32 ? end - j0 : 32;  // the same for the whole warp
      const int mine = lane < n ? indices[j0 + lane] : 0;
      for (int i = 0; i < n; i += kVecRows) {
        uint4 r[kVecRows][V];
#pragma unroll
        for (int u = 0; u < kVecRows; ++u) {
          const int64_t row = __shfl_sync(0xffffffffu, mine, (i + u) & 31);
#pragma unroll
          for (int v = 0; v < V; ++v) {
            const int k = t + v * LPB;
            r[u][v] = (i + u < n && k < chunks) ? table[row * chunks + k] : make_uint4(0u, 0u, 0u, 0u);
          }
        }
#pragma unroll
        for (int u = 0; u < kVecRows; ++u)
#pragma unroll
          for (int v = 0; v < V; ++v) add8(acc[v], r[u][v]);  // zeros past the bag add nothing
      }
    }
  } else {
    for (int j = begin; j < end; j += kVecRows) {
      uint4 r[kVecRows][V];
#pragma unroll
      for (int u = 0; u < kVecRows; ++u) {
        const bool in = j + u < end;
        const int64_t row = in ? indices[j + u] : 0;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const int k = t + v * LPB;
          r[u][v] = (in && k < chunks) ? table[row * chunks + k] : make_uint4(0u, 0u, 0u, 0u);
        }
      }
#pragma unroll
      for (int u = 0; u < kVecRows; ++u)
#pragma unroll
        for (int v = 0; v < V; ++v) add8(acc[v], r[u][v]);
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int k = t + v * LPB;
    if (k < chunks)
      out[b * chunks + k] = make_uint4(pack2(acc[v][0], acc[v][1]), pack2(acc[v][2], acc[v][3]),
                                       pack2(acc[v][4], acc[v][5]), pack2(acc[v][6], acc[v][7]));
  }
}

template <int V, int LPB>
void launch_vec8(const int* offsets, const int* indices, const __nv_bfloat16* table, __nv_bfloat16* out,
                 int64_t rows, int chunks, cudaStream_t stream) {
  constexpr int kBagsPerBlock = kThreads / LPB;
  const int64_t blocks = (rows + kBagsPerBlock - 1) / kBagsPerBlock;
  embedding_bag_vec8<V, LPB><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      offsets, indices, reinterpret_cast<const uint4*>(table), reinterpret_cast<uint4*>(out), rows, chunks);
}

}  // namespace

extern "C" int d2k_embedding_bag(const int* offsets, const int* indices, const __nv_bfloat16* table,
                                 __nv_bfloat16* out, int64_t rows, int64_t cols, int64_t nnz, int64_t dim,
                                 cudaStream_t stream) {
  (void)cols;
  (void)nnz;
  if (rows <= 0 || dim <= 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const bool aligned = ((reinterpret_cast<uintptr_t>(table) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
  if (aligned && dim % 8 == 0 && dim <= 4096) {
    const int chunks = static_cast<int>(dim / 8);
    if (chunks <= 16) launch_vec8<1, 16>(offsets, indices, table, out, rows, chunks, stream);
    else if (chunks <= 32) launch_vec8<1, 32>(offsets, indices, table, out, rows, chunks, stream);
    else if (chunks <= 64) launch_vec8<1, 64>(offsets, indices, table, out, rows, chunks, stream);
    else if (chunks <= 128) launch_vec8<1, 128>(offsets, indices, table, out, rows, chunks, stream);
    else if (chunks <= 256) launch_vec8<1, 256>(offsets, indices, table, out, rows, chunks, stream);
    else launch_vec8<2, 256>(offsets, indices, table, out, rows, chunks, stream);
    return static_cast<int>(cudaGetLastError());
  }
  // Layer 2's kernel for the other shapes (dim not a multiple of 8, misaligned, or over 4096).
  const int64_t slices = (dim + kSlice - 1) / kSlice;
  const int64_t blocks = (rows * slices + kWarps - 1) / kWarps;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  launch_warp_slice(offsets, indices, table, out, rows, dim, slices, blocks, stream);
  return static_cast<int>(cudaGetLastError());
}
