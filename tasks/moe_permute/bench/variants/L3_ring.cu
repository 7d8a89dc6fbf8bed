// moe_permute expert, layer 3 (low level): layer 2's dataflow (counting sort by expert, stable
// in-chunk ranks, token-major copies reading each row once) in two launches, the rows moved by
// bulk copies (TMA) through a ring of row buffers in shared memory:
//   - count_rank_scan: one block of 1,024 threads per chunk of 1,024 entries. match_any gives each
//     lane the lanes of its warp with the same expert; the lowest of them writes the group's size
//     into a [warp][expert] table of 16-bit counts in shared memory; one pass over the table
//     (thread e walks expert e's 32 warp counts) turns it into each warp's exclusive prefix and the
//     chunk's count per expert, and an entry's stable rank in its chunk = prefix[warp][expert] +
//     its peers in lower lanes. It writes the ranks and the counts; the last block (a
//     self-resetting ticket) scans all experts x chunks counts into each chunk's first place per
//     expert and writes offsets.
//   - copy_rows_ring (a programmatic dependent of the count): persistent, one warp per block,
//     RING_BPS blocks per SM; block b takes tokens b, b + G, b + 2G, ... (G blocks). Before the
//     grid-dependency wait it starts the bulk loads of its first rows into the ring (one buffer
//     and one mbarrier per stage) and reads the ids of all its entries into shared memory; after
//     the wait the warp turns its entries into places (first[expert][chunk] + rank) in batches of
//     256, 8 per lane with their 16 loads issued together, each batch just before the first token
//     that needs it, and writes order. Lane 0 walks its tokens: waits for the row's barrier,
//     issues the k bulk stores of the row (one group), and refills the slot of the token LAG
//     tokens back once that group has read it (bulk wait_group.read), keeping STAGES - LAG row
//     loads and up to LAG + 1 tokens' stores in flight.
// Fallbacks: a block per token with one bulk load and k bulk stores when the ring does not fit
// (entries of a block too many for shared memory), a 2-byte copy for hidden not a multiple of 8
// or pointers not 16-byte aligned.
#include <algorithm>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#ifndef RING_BPS
#define RING_BPS 1  // ring blocks per SM
#endif
#ifndef RING_ONCE
#define RING_ONCE 0  // 1: all of a block's places computed before its first store (0: in batches, just ahead)
#endif
#ifndef RING_LAG
#define RING_LAG 0  // tokens whose stores may still be reading the ring (0: half the ring, at most 8)
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

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bar_init(unsigned bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Bulk copy of `bytes` from global to shared memory, completing on the barrier.
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, int bytes, unsigned bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  }
}
__device__ __forceinline__ unsigned long long evict_first_policy() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
// Bulk copy of `bytes` from shared to global memory (evict-first in L2), in the open bulk group.
__device__ __forceinline__ void bulk_store(void* dst, unsigned src, int bytes, unsigned long long policy) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;"
               ::"l"(dst), "r"(src), "r"(bytes), "l"(policy) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ void bulk_wait_read_dyn(int n) {  // wait_group.read takes an immediate
  switch (n) {
    case 0: bulk_wait_read<0>(); break;
    case 1: bulk_wait_read<1>(); break;
    case 2: bulk_wait_read<2>(); break;
    case 3: bulk_wait_read<3>(); break;
    case 4: bulk_wait_read<4>(); break;
    case 5: bulk_wait_read<5>(); break;
    case 6: bulk_wait_read<6>(); break;
    case 7: bulk_wait_read<7>(); break;
    default: bulk_wait_read<8>(); break;
  }
}

constexpr int kMaxStages = 32;
constexpr int kMaxLag = 8;
constexpr int kPlaceUnroll = 8;  // entries per lane per batch of places

// The ring: see the top of the file. Dynamic shared memory: stages row buffers, then the places of
// the block's entries (mine * k ints, first its ids).
__global__ void __launch_bounds__(32)
copy_rows_ring(const int* __restrict__ ids, const int* __restrict__ ranks, const int* __restrict__ base,
               const unsigned char* __restrict__ x, unsigned char* __restrict__ rows, int* __restrict__ order,
               int tokens, int k, int chunks, int row_bytes, int stages, int lag) {
  __shared__ alignas(8) unsigned long long s_bar[kMaxStages];
  extern __shared__ __align__(128) unsigned char s_ring[];
  const int lane = static_cast<int>(threadIdx.x);
  const int b = static_cast<int>(blockIdx.x), G = static_cast<int>(gridDim.x);
  const int mine = b < tokens ? (tokens - b + G - 1) / G : 0;
  const int m = mine * k;  // the block's entries: q = j k + s is slot s of its j-th token
  int* s_place = reinterpret_cast<int*>(s_ring + static_cast<size_t>(stages) * row_bytes);
  auto row_of = [&](int j) { return x + (b + static_cast<int64_t>(j) * G) * row_bytes; };
  auto slot_of = [&](int j) { return smem_addr(s_ring + static_cast<size_t>(j % stages) * row_bytes); };
  if (lane == 0) {
    for (int q = 0; q < stages; ++q) bar_init(smem_addr(&s_bar[q]));
    bar_fence_init();
    for (int j = 0; j < stages && j < mine; ++j) bulk_load(slot_of(j), row_of(j), row_bytes, smem_addr(&s_bar[j]));
  }
  auto entry = [&](int q) { return (b + (q / k) * G) * k + q % k; };
  // The ids are an input: read them before the wait (8 per lane per step, loads together).
  for (int q0 = lane; q0 < m; q0 += 32 * kPlaceUnroll) {
    int e[kPlaceUnroll];
#pragma unroll
    for (int u = 0; u < kPlaceUnroll; ++u) e[u] = q0 + 32 * u < m ? ids[entry(q0 + 32 * u)] : 0;
#pragma unroll
    for (int u = 0; u < kPlaceUnroll; ++u)
      if (q0 + 32 * u < m) s_place[q0 + 32 * u] = e[u];
  }
  wait_for_prerequisites();  // the count grid has finished: ranks and first places are visible
  // Places of entries [q0, q0 + 32 kPlaceUnroll): each lane 8 entries, all 16 loads issued
  // together (one L2 round trip), then order[place] = i.
  auto place_batch = [&](int q0) {
    int first[kPlaceUnroll], rank[kPlaceUnroll];
#pragma unroll
    for (int u = 0; u < kPlaceUnroll; ++u) {
      const int q = q0 + lane + 32 * u;
      if (q < m) {
        const int i = entry(q);
        first[u] = __ldcg(base + s_place[q] * chunks + i / kChunk);
        rank[u] = __ldcg(ranks + i);
      }
    }
#pragma unroll
    for (int u = 0; u < kPlaceUnroll; ++u) {
      const int q = q0 + lane + 32 * u;
      if (q < m) {
        const int p = first[u] + rank[u];
        s_place[q] = p;
        order[p] = entry(q);
      }
    }
  };
#if RING_ONCE
  for (int q0 = 0; q0 < m; q0 += 32 * kPlaceUnroll) place_batch(q0);
  int placed = m;
#else
  int placed = 0;  // entries [0, placed) have their places (the batches run just ahead of the stores)
#endif
  __syncwarp();
  const unsigned long long policy = evict_first_policy();
  for (int j = 0; j < mine; ++j) {
    if (placed < (j + 1) * k) {  // warp-uniform: the next batch of places, by the whole warp
      place_batch(placed);
      placed += 32 * kPlaceUnroll;
      __syncwarp();
    }
    if (lane == 0) {
      bar_wait(smem_addr(&s_bar[j % stages]), static_cast<unsigned>(j / stages) & 1u);
      const unsigned src = slot_of(j);
      for (int s = 0; s < k; ++s)
        bulk_store(rows + static_cast<int64_t>(s_place[j * k + s]) * row_bytes, src, row_bytes, policy);
      bulk_commit();
      const int r = j - lag;  // token r's stores have read its slot once at most lag groups are pending
      if (r >= 0 && r + stages < mine) {
        bulk_wait_read_dyn(lag);
        bulk_load(slot_of(r), row_of(r + stages), row_bytes, smem_addr(&s_bar[r % stages]));
      }
    }
    __syncwarp();
  }
  if (lane != 0) return;
  bulk_wait_read<0>();  // the ring stays until every store has read it
}

// Fallback when a ring block's entries do not fit beside two row buffers: one warp per token, one
// bulk load of the row, k bulk stores issued by the slots' lanes.
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
    bar_init(bar);
    bar_fence_init();
    bulk_load(smem_addr(s_row), x + t * row_bytes, row_bytes, bar);
  }
  const int i = static_cast<int>(t) * k + lane;
  const int e = lane < k ? ids[i] : 0;
  wait_for_prerequisites();
  __syncwarp();
  if (lane < k) {
    const int p = place_of(ranks, base, order, i, e, chunks);
    bar_wait(bar, 0);
    bulk_store(rows + static_cast<int64_t>(p) * row_bytes, smem_addr(s_row), row_bytes, evict_first_policy());
    bulk_commit();
    bulk_wait_read<0>();
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


constexpr int kRingSmem = 200 * 1024 / RING_BPS;  // a ring block's dynamic shared memory: a count block fits beside it
constexpr int kMaxBulkRow = 96 * 1024;            // the per-token fallback's row buffer, at most

struct Setup {
  bool done = false;
  int sms = 0;
  int* counts = nullptr;
  int* ranks = nullptr;
};

cudaError_t setup(Setup& s) {
  if (s.done) return cudaSuccess;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, dev);
  if (err == cudaSuccess) err = cudaGetSymbolAddress(reinterpret_cast<void**>(&s.counts), g_counts);
  if (err == cudaSuccess) err = cudaGetSymbolAddress(reinterpret_cast<void**>(&s.ranks), g_rank);
  if (err == cudaSuccess)  // the [warp][expert] table: 64 KB at 1,024 experts
    err = cudaFuncSetAttribute(count_rank_scan, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kCountWarps * kMaxExperts * sizeof(uint16_t)));
  if (err == cudaSuccess) err = cudaFuncSetAttribute(copy_rows_ring, cudaFuncAttributeMaxDynamicSharedMemorySize, kRingSmem);
  if (err == cudaSuccess) err = cudaFuncSetAttribute(copy_rows_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxBulkRow);
  s.done = err == cudaSuccess;
  return err;
}

}  // namespace

extern "C" int d2k_moe_permute(const void* topk_ids, const __nv_bfloat16* x, int* order, int* offsets,
                               __nv_bfloat16* rows, int64_t tokens, int64_t k, int64_t experts, int64_t hidden,
                               cudaStream_t stream) {
  static Setup s;
  if (tokens <= 0 || k <= 0 || experts <= 0 || hidden <= 0) return 0;
  if (tokens > kMaxTokens || k > kMaxK || experts > kMaxExperts) return static_cast<int>(cudaErrorInvalidValue);
  cudaError_t err = setup(s);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int* ids = static_cast<const int*>(topk_ids);
  const int n = static_cast<int>(tokens * k);
  const int chunks = (n + kChunk - 1) / kChunk;
  const int e = static_cast<int>(experts);
  const int kk = static_cast<int>(k);
  const int stride = (e + 1) / 2 * 2;  // the table's row: an even number of 16-bit counts
  const size_t table = static_cast<size_t>(kCountWarps) * stride * sizeof(uint16_t);
  count_rank_scan<<<chunks, kCountThreads, table, stream>>>(ids, s.counts, s.ranks, offsets, n, e, stride, chunks);
  err = cudaGetLastError();
  if (err != cudaSuccess) return static_cast<int>(err);
  const int* ranks = s.ranks;
  const int* base = s.counts;
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(rows)) & 15) == 0;
  const int64_t row_bytes = hidden * 2;
  if (aligned && hidden % 8 == 0) {
    const int64_t grid = std::min<int64_t>(tokens, static_cast<int64_t>(s.sms) * RING_BPS);
    const int64_t places = (tokens + grid - 1) / grid * k * static_cast<int64_t>(sizeof(int));
    const int64_t stages = std::min<int64_t>(kMaxStages, (kRingSmem - places) / row_bytes);
    if (stages >= 2) {
      const int64_t want = RING_LAG > 0 ? RING_LAG : stages / 2;
      const int lag = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({kMaxLag, stages - 1, want})));
      return static_cast<int>(launch_dependent(
          copy_rows_ring, static_cast<unsigned>(grid), 32, static_cast<size_t>(stages * row_bytes + places), stream, ids,
          ranks, base, reinterpret_cast<const unsigned char*>(x), reinterpret_cast<unsigned char*>(rows), order,
          static_cast<int>(tokens), kk, chunks, static_cast<int>(row_bytes), static_cast<int>(stages), lag));
    }
    if (row_bytes <= kMaxBulkRow)
      return static_cast<int>(launch_dependent(copy_rows_bulk, static_cast<unsigned>(tokens), 32,
                                               static_cast<size_t>(row_bytes), stream, ids, ranks, base,
                                               reinterpret_cast<const unsigned char*>(x),
                                               reinterpret_cast<unsigned char*>(rows), order, kk, chunks,
                                               static_cast<int>(row_bytes)));
  }
  return static_cast<int>(launch_dependent(copy_rows_scalar, static_cast<unsigned>(tokens), kScalarThreads, 0, stream,
                                           ids, ranks, base, x, rows, order, kk, chunks, hidden));
}
