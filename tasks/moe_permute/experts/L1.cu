// moe_permute expert, layer 1 (algorithm): a counting sort by expert, stable by construction,
// then one block per output row copying the token's row coalesced.
//   1. count: the entries are cut into chunks of 1,024 (one block each); a block counts its
//      chunk's entries per expert in a shared-memory histogram and writes counts[e][chunk]
//      (expert-major).
//   2. scan: one block scans counts in that order (exclusive): base[e][chunk] is where the
//      chunk's first entry of expert e goes; offsets[e] = base[e][0], offsets[experts] = n.
//   3. scatter: each chunk again; an entry's place is base[e][chunk] plus the number of entries
//      of the same expert before it in its chunk (counted over the chunk's ids in shared memory),
//      so entries keep their index order within an expert: order[place] = i.
//   4. rows: one block per output row p copies x[order[p] / k] to rows[p], consecutive threads on
//      consecutive columns.
// Scratch (counts) is a static device array sized for the largest legal input.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kItems = 4;
constexpr int kChunk = kThreads * kItems;  // entries per chunk
constexpr int64_t kMaxTokens = 65536, kMaxK = 16, kMaxExperts = 1024;
constexpr int kMaxChunks = static_cast<int>((kMaxTokens * kMaxK + kChunk - 1) / kChunk);
constexpr int kScanThreads = 1024;

__device__ int g_counts[kMaxExperts * kMaxChunks];

__global__ void __launch_bounds__(kThreads)
count_experts(const int* __restrict__ ids, int* __restrict__ counts, int n, int experts, int chunks) {
  extern __shared__ int hist[];
  for (int e = threadIdx.x; e < experts; e += kThreads) hist[e] = 0;
  __syncthreads();
  const int base = blockIdx.x * kChunk;
  for (int r = 0; r < kItems; ++r) {
    const int i = base + r * kThreads + threadIdx.x;
    if (i < n) atomicAdd(&hist[ids[i]], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += kThreads) counts[e * chunks + blockIdx.x] = hist[e];
}

// Exclusive scan of counts[0 .. m) in place, by one block, 1,024 values per step with a carry.
__global__ void __launch_bounds__(kScanThreads)
scan_counts(int* __restrict__ counts, int* __restrict__ offsets, int m, int chunks, int experts, int n) {
  __shared__ int warp_sums[kScanThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int carry = 0;
  for (int t0 = 0; t0 < m; t0 += kScanThreads) {
    const int i = t0 + threadIdx.x;
    const int v = i < m ? counts[i] : 0;
    int incl = v;
    for (int d = 1; d < 32; d <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += o;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      int w = warp_sums[lane];
      for (int d = 1; d < 32; d <<= 1) {
        const int o = __shfl_up_sync(0xffffffffu, w, d);
        if (lane >= d) w += o;
      }
      warp_sums[lane] = w;  // inclusive over warps
    }
    __syncthreads();
    const int before = warp > 0 ? warp_sums[warp - 1] : 0;
    if (i < m) counts[i] = carry + before + incl - v;
    carry += warp_sums[kScanThreads / 32 - 1];
    __syncthreads();  // warp_sums is reused by the next step
  }
  for (int e = threadIdx.x; e < experts; e += kScanThreads) offsets[e] = counts[e * chunks];
  if (threadIdx.x == 0) offsets[experts] = n;
}

__global__ void __launch_bounds__(kThreads)
scatter_order(const int* __restrict__ ids, const int* __restrict__ base, int* __restrict__ order, int n, int chunks) {
  __shared__ int s_ids[kChunk];
  const int b0 = blockIdx.x * kChunk;
  const int count = n - b0 < kChunk ? n - b0 : kChunk;
  for (int j = threadIdx.x; j < count; j += kThreads) s_ids[j] = ids[b0 + j];
  __syncthreads();
  for (int r = 0; r < kItems; ++r) {
    const int j = r * kThreads + threadIdx.x;
    if (j >= count) break;
    const int e = s_ids[j];
    int rank = 0;
    for (int q = 0; q < j; ++q) rank += s_ids[q] == e ? 1 : 0;
    order[base[e * chunks + blockIdx.x] + rank] = b0 + j;
  }
}

__global__ void __launch_bounds__(kThreads)
copy_rows(const int* __restrict__ order, const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ rows,
          int k, int64_t hidden) {
  const int64_t p = blockIdx.x;
  const int64_t t = order[p] / k;
  const __nv_bfloat16* src = x + t * hidden;
  __nv_bfloat16* dst = rows + p * hidden;
  for (int64_t c = threadIdx.x; c < hidden; c += kThreads) dst[c] = src[c];
}

}  // namespace

extern "C" int d2k_moe_permute(const void* topk_ids, const __nv_bfloat16* x, int* order, int* offsets,
                               __nv_bfloat16* rows, int64_t tokens, int64_t k, int64_t experts, int64_t hidden,
                               cudaStream_t stream) {
  if (tokens <= 0 || k <= 0 || experts <= 0 || hidden <= 0) return 0;
  if (tokens > kMaxTokens || k > kMaxK || experts > kMaxExperts) return static_cast<int>(cudaErrorInvalidValue);
  const int* ids = static_cast<const int*>(topk_ids);
  const int n = static_cast<int>(tokens * k);
  const int chunks = (n + kChunk - 1) / kChunk;
  const int e = static_cast<int>(experts);
  int* counts = nullptr;
  cudaError_t err = cudaGetSymbolAddress(reinterpret_cast<void**>(&counts), g_counts);
  if (err != cudaSuccess) return static_cast<int>(err);
  count_experts<<<chunks, kThreads, e * sizeof(int), stream>>>(ids, counts, n, e, chunks);
  scan_counts<<<1, kScanThreads, 0, stream>>>(counts, offsets, e * chunks, chunks, e, n);
  scatter_order<<<chunks, kThreads, 0, stream>>>(ids, counts, order, n, chunks);
  copy_rows<<<n, kThreads, 0, stream>>>(order, x, rows, static_cast<int>(k), hidden);
  return static_cast<int>(cudaGetLastError());
}
