// moe_permute variant (bench, session 13): layer 3's two launches, but the stable in-chunk ranks are
// computed by the count kernel (not walked by every copy block), and the copy blocks are lean:
//   - count_rank_scan: one block of 1,024 threads per chunk of 1,024 entries. match_any gives each
//     lane its peers (same expert) in its warp; the lowest peer writes the group's size into a
//     [warp][expert] table of 16-bit counts in shared memory; a pass over the table (thread e
//     walks expert e's 32 warp counts) turns it into each warp's exclusive prefix and the chunk's
//     count per expert; an entry's rank in its chunk = prefix[warp][expert] + peers below it. It
//     writes the ranks (4 bytes per entry) and the counts; the last block (ticket) scans the counts
//     into each chunk's first place per expert and writes offsets, as layer 3.
//   - copy (programmatic dependent launch): one block per token. Before the grid-dependency wait
//     it starts its row's load and reads its k ids; after it, place = first[expert][chunk] + rank
//     (two loads together, one L2 round trip), order[place] = i, and the row is stored to its k
//     places. MP_TMA=1 (default): one warp per token, the row moved by bulk copies (TMA) through
//     shared memory: one bulk load, k bulk stores, issued by the slots' lanes. MP_TMA=0: 128
//     threads per token, the row in 16-byte register chunks (layer 3's copy).
// hidden not a multiple of 8 or misaligned pointers take a 2-byte copy with the same places.
#include <algorithm>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#ifndef MP_TMA
#define MP_TMA 1
#endif
#ifndef MP_HINT
#define MP_HINT 1  // evict-first L2 policy on the row stores
#endif

namespace {

constexpr int kChunk = 1024;           // entries per chunk
constexpr int kCountThreads = kChunk;  // one entry per thread
constexpr int kCountWarps = kCountThreads / 32;
constexpr int64_t kMaxTokens = 65536, kMaxK = 16, kMaxExperts = 1024;
constexpr int kMaxEntries = static_cast<int>(kMaxTokens * kMaxK);
constexpr int kMaxChunks = (kMaxEntries + kChunk - 1) / kChunk;
constexpr int kScanItems = 16;

__device__ int g_counts[kMaxExperts * kMaxChunks];
__device__ int g_rank[kMaxEntries];
__device__ unsigned g_ticket;  // 0 between calls: the last block of each call wraps it back

__device__ __forceinline__ void allow_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_for_prerequisites() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__global__ void __launch_bounds__(kCountThreads, 2)
count_rank_scan(const int* __restrict__ ids, int* __restrict__ counts, int* __restrict__ ranks,
                int* __restrict__ offsets, int n, int experts, int stride, int chunks) {
  allow_dependents();  // the copy blocks may start their loads while this grid runs
  extern __shared__ uint16_t wc[];  // [warp][expert]: counts, then exclusive prefixes over warps
  __shared__ int warp_sums[kCountWarps];
  __shared__ bool s_last;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int i = static_cast<int>(blockIdx.x) * kChunk + tid;
  const int id = i < n ? ids[i] : -1;  // -1: no entry (matches only other -1 lanes)
  {
    unsigned* w32 = reinterpret_cast<unsigned*>(wc);
    for (int j = tid; j < kCountWarps * stride / 2; j += kCountThreads) w32[j] = 0;
  }
  __syncthreads();
  const unsigned peers = __match_any_sync(0xffffffffu, id);
  const int below = __popc(peers & ((1u << lane) - 1u));
  if (id >= 0 && below == 0) wc[warp * stride + id] = static_cast<uint16_t>(__popc(peers));
  __syncthreads();
  for (int e = tid; e < experts; e += kCountThreads) {
    int run = 0;
#pragma unroll 8
    for (int w = 0; w < kCountWarps; ++w) {
      const int c = wc[w * stride + e];
      wc[w * stride + e] = static_cast<uint16_t>(run);
      run += c;
    }
    counts[e * chunks + blockIdx.x] = run;
  }
  __syncthreads();
  if (id >= 0) ranks[i] = wc[warp * stride + id] + below;
  __threadfence();
  __syncthreads();
  if (tid == 0) s_last = atomicInc(&g_ticket, static_cast<unsigned>(chunks - 1)) == static_cast<unsigned>(chunks - 1);
  __syncthreads();
  if (!s_last) return;
  __threadfence();

  // The last block: exclusive scan of counts[0 .. m) in place (expert-major: each chunk's first
  // place for each expert), 16 values per thread per step, as layer 3.
  const int m = experts * chunks;
  int carry = 0;
  for (int t0 = 0; t0 < m; t0 += kCountThreads * kScanItems) {
    const int first = t0 + tid * kScanItems;
    int v[kScanItems];
    int sum = 0;
#pragma unroll
    for (int u = 0; u < kScanItems; ++u) v[u] = first + u < m ? __ldcg(counts + first + u) : 0;
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
      int w = lane < kCountWarps ? warp_sums[lane] : 0;
      for (int d = 1; d < 32; d <<= 1) {
        const int o = __shfl_up_sync(0xffffffffu, w, d);
        if (lane >= d) w += o;
      }
      if (lane < kCountWarps) warp_sums[lane] = w;
    }
    __syncthreads();
    int run = carry + (warp > 0 ? warp_sums[warp - 1] : 0) + incl - sum;
#pragma unroll
    for (int u = 0; u < kScanItems; ++u) {
      if (first + u < m) counts[first + u] = run;
      run += v[u];
    }
    carry += warp_sums[kCountWarps - 1];
    __syncthreads();
  }
  for (int e = tid; e < experts; e += kCountThreads) offsets[e] = counts[e * chunks];
  if (tid == 0) offsets[experts] = n;
}

// Thread s < k of a copy block: the place of entry t k + s (after the wait), order[place] written.
// `e` was read before the wait (the ids are an input); rank and first come from the count grid.
__device__ __forceinline__ int place_of(const int* __restrict__ ranks, const int* __restrict__ base,
                                        int* __restrict__ order, int i, int e, int chunks) {
  const int p = __ldcg(base + e * chunks + i / kChunk) + __ldcg(ranks + i);
  order[p] = i;
  return p;
}

#if MP_TMA
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// MP_TMA=1: one warp per token; the row through shared memory by bulk copies.
__global__ void __launch_bounds__(32)
copy_rows_bulk(const int* __restrict__ ids, const int* __restrict__ ranks, const int* __restrict__ base,
               const unsigned char* __restrict__ x, unsigned char* __restrict__ rows, int* __restrict__ order, int k,
               int chunks, int row_bytes) {
  __shared__ alignas(8) unsigned long long s_bar;
  extern __shared__ __align__(128) unsigned char s_row[];
  const int64_t t = blockIdx.x;
  const int lane = static_cast<int>(threadIdx.x);
  const unsigned bar = smem_addr(&s_bar);
  if (lane == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(row_bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(s_row)), "l"(x + t * row_bytes), "r"(row_bytes), "r"(bar) : "memory");
  }
  const int i = static_cast<int>(t) * k + lane;
  const int e = lane < k ? ids[i] : 0;
  wait_for_prerequisites();  // the count grid has finished: ranks and first places are visible
  __syncwarp();              // lane 0's barrier init is visible to the other lanes
  if (lane < k) {
    const int p = place_of(ranks, base, order, i, e, chunks);
    unsigned done = 0;
    while (!done) {
      asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
                   : "=r"(done) : "r"(bar) : "memory");
    }
    unsigned char* dst = rows + static_cast<int64_t>(p) * row_bytes;
#if MP_HINT
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;"
                 ::"l"(dst), "r"(smem_addr(s_row)), "r"(row_bytes), "l"(policy) : "memory");
#else
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 ::"l"(dst), "r"(smem_addr(s_row)), "r"(row_bytes) : "memory");
#endif
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // the row stays until read
  }
}
#endif

#if MP_TMA == 2
// MP_TMA=2: persistent, one warp per block, G blocks; block b takes tokens b, b + G, ... A ring of
// `stages` row buffers in shared memory, each with its mbarrier: lane 0 keeps the loads of the
// next stages - 1 rows in flight and issues each token's k bulk stores as one group (the slot of
// token j - 1 is refilled once its stores have read it). The places run one token ahead: token
// j + 1's rank and first place are loaded before token j's row is waited for.
constexpr int kMaxStages = 32;
__global__ void __launch_bounds__(32)
copy_rows_ring(const int* __restrict__ ids, const int* __restrict__ ranks, const int* __restrict__ base,
               const unsigned char* __restrict__ x, unsigned char* __restrict__ rows, int* __restrict__ order,
               int tokens, int k, int chunks, int row_bytes, int stages) {
  __shared__ alignas(8) unsigned long long s_bar[kMaxStages];
  extern __shared__ __align__(128) unsigned char s_ring[];
  const int lane = static_cast<int>(threadIdx.x);
  const int b = static_cast<int>(blockIdx.x), G = static_cast<int>(gridDim.x);
  const int mine = b < tokens ? (tokens - b + G - 1) / G : 0;
  auto load = [&](int j) {  // lane 0: token b + j G into slot j % stages
    const int slot = j % stages;
    const unsigned bar = smem_addr(&s_bar[slot]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(row_bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(s_ring + static_cast<size_t>(slot) * row_bytes)),
                 "l"(x + (b + static_cast<int64_t>(j) * G) * row_bytes), "r"(row_bytes), "r"(bar)
                 : "memory");
  };
  if (lane == 0) {
    for (int q = 0; q < stages; ++q) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&s_bar[q])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    for (int q = 0; q < stages && q < mine; ++q) load(q);
  }
  const bool active = lane < k;
  auto entry = [&](int j) { return static_cast<int>(b + static_cast<int64_t>(j) * G) * k + lane; };
  int e_next = active && mine > 0 ? ids[entry(0)] : 0;  // the ids are an input: read before the wait
  wait_for_prerequisites();
  __syncwarp();
  int p = 0;
  if (active && mine > 0) {
    const int i = entry(0);
    p = __ldcg(base + e_next * chunks + i / kChunk) + __ldcg(ranks + i);
  }
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  for (int j = 0; j < mine; ++j) {
    // Token j + 1's place, loads issued now, used next iteration.
    int p_next = 0;
    if (active && j + 1 < mine) {
      const int i1 = entry(j + 1);
      const int e1 = ids[i1];
      p_next = __ldcg(base + e1 * chunks + i1 / kChunk) + __ldcg(ranks + i1);
    }
    if (active) order[p] = entry(j);
    const int slot = j % stages;
    const unsigned parity = static_cast<unsigned>(j / stages) & 1u;
    const unsigned bar = smem_addr(&s_bar[slot]);
    unsigned done = 0;
    while (!done) {
      asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                   : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
    const unsigned src = smem_addr(s_ring + static_cast<size_t>(slot) * row_bytes);
    for (int s = 0; s < k; ++s) {
      const int ps = __shfl_sync(0xffffffffu, p, s);
      if (lane == 0)
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;"
                     ::"l"(rows + static_cast<int64_t>(ps) * row_bytes), "r"(src), "r"(row_bytes), "l"(policy)
                     : "memory");
    }
    if (lane == 0) {
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      if (j >= 1 && j - 1 + stages < mine) {  // token j - 1's stores have read its slot: refill it
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        load(j - 1 + stages);
      }
    }
    __syncwarp();
    p = p_next;
  }
  if (lane == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
#endif

// MP_TMA=0: 128 threads per token, the row in 16-byte register chunks (V per thread).
constexpr int kCopyThreads = 128;
template <int V>
__global__ void __launch_bounds__(kCopyThreads)
copy_rows_vec(const int* __restrict__ ids, const int* __restrict__ ranks, const int* __restrict__ base,
              const uint4* __restrict__ x, uint4* __restrict__ rows, int* __restrict__ order, int k, int chunks,
              int row_chunks) {
  __shared__ int64_t s_dst[kMaxK];
  const int64_t t = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const uint4* src = x + t * row_chunks;
  uint4 v[V];
#pragma unroll
  for (int u = 0; u < V; ++u) {
    const int c = tid + u * kCopyThreads;
    if (c < row_chunks) v[u] = src[c];
  }
  const int i = static_cast<int>(t) * k + tid;
  const int e = tid < k ? ids[i] : 0;
  wait_for_prerequisites();
  if (tid < k) s_dst[tid] = static_cast<int64_t>(place_of(ranks, base, order, i, e, chunks)) * row_chunks;
  __syncthreads();
  for (int s = 0; s < k; ++s) {
    uint4* dst = rows + s_dst[s];
#pragma unroll
    for (int u = 0; u < V; ++u) {
      const int c = tid + u * kCopyThreads;
      if (c < row_chunks) __stcs(dst + c, v[u]);
    }
  }
}

constexpr int kScalarThreads = 256;

// Any hidden, any alignment: one block per token, 2-byte columns, each loaded once and stored to
// the token's k places.
__global__ void __launch_bounds__(kScalarThreads)
copy_rows_scalar(const int* __restrict__ ids, const int* __restrict__ ranks, const int* __restrict__ base,
                 const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ rows, int* __restrict__ order, int k,
                 int chunks, int64_t hidden) {
  __shared__ int64_t s_dst[kMaxK];
  const int64_t t = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const int i = static_cast<int>(t) * k + tid;
  const int e = tid < k ? ids[i] : 0;
  wait_for_prerequisites();
  if (tid < k) s_dst[tid] = static_cast<int64_t>(place_of(ranks, base, order, i, e, chunks)) * hidden;
  __syncthreads();
  const __nv_bfloat16* src = x + t * hidden;
  for (int64_t c = tid; c < hidden; c += kScalarThreads) {
    const __nv_bfloat16 v = src[c];
    for (int s = 0; s < k; ++s) rows[s_dst[s] + c] = v;
  }
}

// Launches kernel as a programmatic dependent of the previous launch on the stream (it may start
// before that grid ends; its griddepcontrol.wait orders the reads of that grid's results).
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), unsigned grid, unsigned block, size_t smem,
                             cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(block);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  cudaError_t err = cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
  if (err != cudaSuccess) {  // no programmatic launch here: a plain stream-ordered launch
    (void)cudaGetLastError();
    config.numAttrs = 0;
    err = cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
  }
  return err;
}

template <int V>
cudaError_t launch_vec(const int* ids, const int* ranks, const int* base, const __nv_bfloat16* x, __nv_bfloat16* rows,
                       int* order, int64_t tokens, int k, int chunks, int row_chunks, cudaStream_t stream) {
  return launch_dependent(copy_rows_vec<V>, static_cast<unsigned>(tokens), kCopyThreads, 0, stream, ids, ranks, base,
                          reinterpret_cast<const uint4*>(x), reinterpret_cast<uint4*>(rows), order, k, chunks,
                          row_chunks);
}

constexpr int64_t kMaxBulkRow = 96 * 1024;  // bytes of shared memory a bulk-copy block may take
#ifndef MP_RING_BPS
#define MP_RING_BPS 1  // MP_TMA=2: ring blocks per SM
#endif
constexpr int kRingBytes = 200 * 1024 / MP_RING_BPS;  // a ring block's row buffers

}  // namespace

extern "C" int d2k_moe_permute(const void* topk_ids, const __nv_bfloat16* x, int* order, int* offsets,
                               __nv_bfloat16* rows, int64_t tokens, int64_t k, int64_t experts, int64_t hidden,
                               cudaStream_t stream) {
  static bool configured = false;
  if (tokens <= 0 || k <= 0 || experts <= 0 || hidden <= 0) return 0;
  if (tokens > kMaxTokens || k > kMaxK || experts > kMaxExperts) return static_cast<int>(cudaErrorInvalidValue);
  const int* ids = static_cast<const int*>(topk_ids);
  const int n = static_cast<int>(tokens * k);
  const int chunks = (n + kChunk - 1) / kChunk;
  const int e = static_cast<int>(experts);
  const int kk = static_cast<int>(k);
  int *counts = nullptr, *ranks = nullptr;
  cudaError_t err = cudaGetSymbolAddress(reinterpret_cast<void**>(&counts), g_counts);
  if (err == cudaSuccess) err = cudaGetSymbolAddress(reinterpret_cast<void**>(&ranks), g_rank);
  if (err == cudaSuccess && !configured) {  // the [warp][expert] table: 64 KB at 1,024 experts
    err = cudaFuncSetAttribute(count_rank_scan, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kCountWarps * kMaxExperts * sizeof(uint16_t)));
#if MP_TMA == 2
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(copy_rows_ring, cudaFuncAttributeMaxDynamicSharedMemorySize, kRingBytes);
#elif MP_TMA
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(copy_rows_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(kMaxBulkRow));
#endif
    configured = err == cudaSuccess;
  }
  if (err != cudaSuccess) return static_cast<int>(err);
  const int stride = (e + 1) / 2 * 2;  // the table's row: an even number of 16-bit counts
  const size_t table = static_cast<size_t>(kCountWarps) * stride * sizeof(uint16_t);
  count_rank_scan<<<chunks, kCountThreads, table, stream>>>(ids, counts, ranks, offsets, n, e, stride, chunks);
  err = cudaGetLastError();
  if (err != cudaSuccess) return static_cast<int>(err);
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(rows)) & 15) == 0;
  const int64_t row_bytes = hidden * 2;
#if MP_TMA == 2
  if (aligned && hidden % 8 == 0 && row_bytes <= kRingBytes / 2) {
    int dev = 0, sms = 0;
    if ((err = cudaGetDevice(&dev)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
      return static_cast<int>(err);
    const int stages = static_cast<int>(std::min<int64_t>(kMaxStages, kRingBytes / row_bytes));
    return static_cast<int>(launch_dependent(copy_rows_ring, static_cast<unsigned>(sms * MP_RING_BPS), 32,
                                             static_cast<size_t>(stages * row_bytes), stream, ids,
                                             static_cast<const int*>(ranks), static_cast<const int*>(counts),
                                             reinterpret_cast<const unsigned char*>(x),
                                             reinterpret_cast<unsigned char*>(rows), order, static_cast<int>(tokens),
                                             kk, chunks, static_cast<int>(row_bytes), stages));
  }
#elif MP_TMA
  if (aligned && hidden % 8 == 0 && row_bytes <= kMaxBulkRow) {
    return static_cast<int>(launch_dependent(copy_rows_bulk, static_cast<unsigned>(tokens), 32,
                                             static_cast<size_t>(row_bytes), stream, ids,
                                             static_cast<const int*>(ranks), static_cast<const int*>(counts),
                                             reinterpret_cast<const unsigned char*>(x),
                                             reinterpret_cast<unsigned char*>(rows), order, kk, chunks,
                                             static_cast<int>(row_bytes)));
  }
#else
  if (aligned && hidden % 8 == 0 && hidden <= 8 * 8 * kCopyThreads) {
    const int c = static_cast<int>(hidden / 8);
    const int* r = ranks;
    const int* b = counts;
    switch ((c + kCopyThreads - 1) / kCopyThreads) {
      case 1: return static_cast<int>(launch_vec<1>(ids, r, b, x, rows, order, tokens, kk, chunks, c, stream));
      case 2: return static_cast<int>(launch_vec<2>(ids, r, b, x, rows, order, tokens, kk, chunks, c, stream));
      case 3: return static_cast<int>(launch_vec<3>(ids, r, b, x, rows, order, tokens, kk, chunks, c, stream));
      case 4: return static_cast<int>(launch_vec<4>(ids, r, b, x, rows, order, tokens, kk, chunks, c, stream));
      case 5: return static_cast<int>(launch_vec<5>(ids, r, b, x, rows, order, tokens, kk, chunks, c, stream));
      case 6: return static_cast<int>(launch_vec<6>(ids, r, b, x, rows, order, tokens, kk, chunks, c, stream));
      case 7: return static_cast<int>(launch_vec<7>(ids, r, b, x, rows, order, tokens, kk, chunks, c, stream));
      default: return static_cast<int>(launch_vec<8>(ids, r, b, x, rows, order, tokens, kk, chunks, c, stream));
    }
  }
#endif
  return static_cast<int>(launch_dependent(copy_rows_scalar, static_cast<unsigned>(tokens), kScalarThreads, 0, stream,
                                           ids, static_cast<const int*>(ranks), static_cast<const int*>(counts), x,
                                           rows, order, kk, chunks, hidden));
}
