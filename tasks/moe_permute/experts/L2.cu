// moe_permute expert, layer 2 (dataflow): layer 1's counting sort (per-chunk expert histograms,
// one scan, stable in-chunk ranks), but the rows are copied token-major: the scatter also writes
// each entry's place (the inverse permutation, in scratch), and one block per token reads the
// token's row once and writes it to its k places. An output-ordered copy reads x once per entry
// (k times per token: the same row comes back from DRAM k times, far apart in time); this one
// reads it once, so the bytes moved drop from 4 n hidden to 2 n hidden (1 + 1/k): 1.8x fewer at
// k = 8. The token's k places are read once per block into shared memory.
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
__device__ int g_place[kMaxTokens * kMaxK];  // place of entry i in the sorted order

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
scatter_order(const int* __restrict__ ids, const int* __restrict__ base, int* __restrict__ order,
              int* __restrict__ place, int n, int chunks) {
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
    const int p = base[e * chunks + blockIdx.x] + rank;
    order[p] = b0 + j;
    place[b0 + j] = p;
  }
}

// One block per token: each column is loaded once and stored to the token's k places.
__global__ void __launch_bounds__(kThreads)
copy_rows_token_major(const int* __restrict__ place, const __nv_bfloat16* __restrict__ x,
                      __nv_bfloat16* __restrict__ rows, int k, int64_t hidden) {
  __shared__ int64_t s_dst[kMaxK];
  const int64_t t = blockIdx.x;
  if (threadIdx.x < k) s_dst[threadIdx.x] = static_cast<int64_t>(place[t * k + threadIdx.x]) * hidden;
  __syncthreads();
  const __nv_bfloat16* src = x + t * hidden;
  for (int64_t c = threadIdx.x; c < hidden; c += kThreads) {
    const __nv_bfloat16 v = src[c];
    for (int s = 0; s < k; ++s) rows[s_dst[s] + c] = v;
  }
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
  int* place = nullptr;
  cudaError_t err = cudaGetSymbolAddress(reinterpret_cast<void**>(&counts), g_counts);
  if (err == cudaSuccess) err = cudaGetSymbolAddress(reinterpret_cast<void**>(&place), g_place);
  if (err != cudaSuccess) return static_cast<int>(err);
  count_experts<<<chunks, kThreads, e * sizeof(int), stream>>>(ids, counts, n, e, chunks);
  scan_counts<<<1, kScanThreads, 0, stream>>>(counts, offsets, e * chunks, chunks, e, n);
  scatter_order<<<chunks, kThreads, 0, stream>>>(ids, counts, order, place, n, chunks);
  copy_rows_token_major<<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(place, x, rows, static_cast<int>(k),
                                                                              hidden);
  return static_cast<int>(cudaGetLastError());
}
