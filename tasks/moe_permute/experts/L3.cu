// moe_permute expert, layer 3 (low level): layer 2's dataflow (counting sort by expert with
// stable in-chunk ranks, inverse permutation in scratch, token-major row copies reading each row
// once) with
//   - in-chunk ranks by warp-level matching instead of a scan over the chunk's earlier ids: each
//     warp owns 128 consecutive entries of the chunk, processed 32 at a time; match_any gives the
//     lanes with the same expert, the popcount of those below a lane is its rank among them, and
//     the lowest of them adds the group's size to the warp's running count for that expert
//     (per-warp counters in shared memory: no atomics, no conflicts). A scan over the 8 warps per
//     expert turns the per-warp counts into each warp's starting place. Counting uses the same
//     match: one shared atomic per distinct expert per 32 entries instead of one per entry.
//   - the scan of the per-chunk counts takes 16 values per thread per step (loads in flight
//     together, scanned in registers) instead of one: two steps instead of 32 for 256 experts
//     x 128 chunks.
//   - rows moved in 16-byte chunks (8 bf16): a thread loads all of its chunks of the token's row
//     first (up to 8, 128 bytes in flight), then stores them to each of the k places, with a
//     streaming (evict-first) hint on both: x is read once and rows are not read again here.
//     hidden not a multiple of 8, over 8,192, or misaligned pointers take layer 2's copy.
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

__device__ __forceinline__ unsigned lanemask_lt() {
  unsigned m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

__global__ void __launch_bounds__(kThreads)
count_experts(const int* __restrict__ ids, int* __restrict__ counts, int n, int experts, int chunks) {
  extern __shared__ int hist[];
  for (int e = threadIdx.x; e < experts; e += kThreads) hist[e] = 0;
  __syncthreads();
  const int base = blockIdx.x * kChunk;
  const int lane = threadIdx.x & 31;
  for (int r = 0; r < kItems; ++r) {
    const int i = base + r * kThreads + threadIdx.x;
    const int e = i < n ? ids[i] : -1;                  // -1: no entry (matches only other -1 lanes)
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0 && lane == __ffs(peers) - 1) atomicAdd(&hist[e], __popc(peers));
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += kThreads) counts[e * chunks + blockIdx.x] = hist[e];
}

// Exclusive scan of counts[0 .. m) in place, by one block: each thread takes 16 consecutive
// values per step (16 independent loads in flight; 16,384 values per step, so 256 experts x 128
// chunks is two steps), scans them in registers, and the block scans the threads' totals.
constexpr int kScanItems = 16;

__global__ void __launch_bounds__(kScanThreads)
scan_counts(int* __restrict__ counts, int* __restrict__ offsets, int m, int chunks, int experts, int n) {
  __shared__ int warp_sums[kScanThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int carry = 0;
  for (int t0 = 0; t0 < m; t0 += kScanThreads * kScanItems) {
    const int first = t0 + threadIdx.x * kScanItems;
    int v[kScanItems];
    int sum = 0;
#pragma unroll
    for (int u = 0; u < kScanItems; ++u) v[u] = first + u < m ? counts[first + u] : 0;
#pragma unroll
    for (int u = 0; u < kScanItems; ++u) sum += v[u];
    int incl = sum;
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
      warp_sums[lane] = w;
    }
    __syncthreads();
    int run = carry + (warp > 0 ? warp_sums[warp - 1] : 0) + incl - sum;
#pragma unroll
    for (int u = 0; u < kScanItems; ++u) {
      if (first + u < m) counts[first + u] = run;
      run += v[u];
    }
    carry += warp_sums[kScanThreads / 32 - 1];
    __syncthreads();
  }
  for (int e = threadIdx.x; e < experts; e += kScanThreads) offsets[e] = counts[e * chunks];
  if (threadIdx.x == 0) offsets[experts] = n;
}

// Warp w of the block owns the chunk's entries [w * 128, (w + 1) * 128), 32 per round.
constexpr int kWarps = kThreads / 32;
constexpr int kPerWarp = kChunk / kWarps;

__global__ void __launch_bounds__(kThreads)
scatter_order(const int* __restrict__ ids, const int* __restrict__ base, int* __restrict__ order,
              int* __restrict__ place, int n, int experts, int chunks) {
  extern __shared__ int next[];  // [kWarps][experts]: the warp's next place for each expert
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int b0 = blockIdx.x * kChunk;
  const int w0 = b0 + warp * kPerWarp;
  for (int q = threadIdx.x; q < kWarps * experts; q += kThreads) next[q] = 0;
  __syncthreads();
  int e_r[kPerWarp / 32];
  unsigned peers_r[kPerWarp / 32];
#pragma unroll
  for (int r = 0; r < kPerWarp / 32; ++r) {
    const int i = w0 + r * 32 + lane;
    e_r[r] = i < n ? ids[i] : -1;
    peers_r[r] = __match_any_sync(0xffffffffu, e_r[r]);
    if (e_r[r] >= 0 && lane == __ffs(peers_r[r]) - 1) next[warp * experts + e_r[r]] += __popc(peers_r[r]);
    __syncwarp();
  }
  __syncthreads();
  // Per expert: the warps' counts become their starting places (chunk base + warps before).
  for (int e = threadIdx.x; e < experts; e += kThreads) {
    int run = base[e * chunks + blockIdx.x];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const int c = next[w * experts + e];
      next[w * experts + e] = run;
      run += c;
    }
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kPerWarp / 32; ++r) {
    const int i = w0 + r * 32 + lane;
    const int e = e_r[r];
    const unsigned peers = peers_r[r];
    int p = 0;
    if (e >= 0) p = next[warp * experts + e] + __popc(peers & lanemask_lt());
    __syncwarp();  // every lane has read its expert's counter before the group's lowest lane moves it
    if (e >= 0) {
      if (lane == __ffs(peers) - 1) next[warp * experts + e] += __popc(peers);
      order[p] = i;
      place[i] = p;
    }
    __syncwarp();
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

constexpr int kCopyThreads = 128;

// One block per token, the row in 16-byte chunks: chunk c of the row goes to thread c % 128, V
// chunks per thread, all loaded before any store.
template <int V>
__global__ void __launch_bounds__(kCopyThreads)
copy_rows_vec(const int* __restrict__ place, const uint4* __restrict__ x, uint4* __restrict__ rows, int k, int chunks) {
  __shared__ int64_t s_dst[kMaxK];
  const int64_t t = blockIdx.x;
  if (threadIdx.x < k) s_dst[threadIdx.x] = static_cast<int64_t>(place[t * k + threadIdx.x]) * chunks;
  const uint4* src = x + t * chunks;
  uint4 v[V];
#pragma unroll
  for (int u = 0; u < V; ++u) {
    const int c = threadIdx.x + u * kCopyThreads;
    if (c < chunks) v[u] = __ldcs(src + c);
  }
  __syncthreads();
  for (int s = 0; s < k; ++s) {
    uint4* dst = rows + s_dst[s];
#pragma unroll
    for (int u = 0; u < V; ++u) {
      const int c = threadIdx.x + u * kCopyThreads;
      if (c < chunks) __stcs(dst + c, v[u]);
    }
  }
}

template <int V>
void launch_vec(const int* place, const __nv_bfloat16* x, __nv_bfloat16* rows, int64_t tokens, int k, int chunks,
                cudaStream_t stream) {
  copy_rows_vec<V><<<static_cast<unsigned>(tokens), kCopyThreads, 0, stream>>>(
      place, reinterpret_cast<const uint4*>(x), reinterpret_cast<uint4*>(rows), k, chunks);
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
  scatter_order<<<chunks, kThreads, kWarps * e * sizeof(int), stream>>>(ids, counts, order, place, n, e, chunks);
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(rows)) & 15) == 0;
  if (aligned && hidden % 8 == 0 && hidden <= 8 * 8 * kCopyThreads) {
    const int c = static_cast<int>(hidden / 8);
    const int v = (c + kCopyThreads - 1) / kCopyThreads;
    const int kk = static_cast<int>(k);
    switch (v) {
      case 1: launch_vec<1>(place, x, rows, tokens, kk, c, stream); break;
      case 2: launch_vec<2>(place, x, rows, tokens, kk, c, stream); break;
      case 3: launch_vec<3>(place, x, rows, tokens, kk, c, stream); break;
      case 4: launch_vec<4>(place, x, rows, tokens, kk, c, stream); break;
      case 5: launch_vec<5>(place, x, rows, tokens, kk, c, stream); break;
      case 6: launch_vec<6>(place, x, rows, tokens, kk, c, stream); break;
      case 7: launch_vec<7>(place, x, rows, tokens, kk, c, stream); break;
      default: launch_vec<8>(place, x, rows, tokens, kk, c, stream); break;
    }
  } else {
    copy_rows_token_major<<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(place, x, rows, static_cast<int>(k),
                                                                                hidden);
  }
  return static_cast<int>(cudaGetLastError());
}
