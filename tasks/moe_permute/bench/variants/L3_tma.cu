// moe_permute expert, layer 3 (low level): layer 2's dataflow (counting sort by expert, stable
// in-chunk ranks, token-major row copies reading each row once) in two launches instead of four:
//   - count_and_scan: one block of 1,024 threads per chunk of 1,024 entries counts its experts with
//     warp-level matching (match_any: one shared atomic per distinct expert per 32 entries) and
//     writes them; the last block to finish (a self-resetting ticket) scans all experts x chunks
//     counts, 16 per thread per step, into each chunk's first place per expert, and writes offsets.
//     Its register budget is half an SM's (32 per thread), so copy blocks fit beside its blocks.
//   - copy_rows_vec: one block per token finds its own entries' places: the rank of entry i among
//     the earlier entries of its chunk with the same expert is a count of equal ids (the chunk's
//     ids, up to 4 KB, come from the L2, all of a thread's at once; a table in shared memory, one
//     slot mask per expert, makes each id one shared load, and the few matches are counted with
//     shared atomics). It loads its row (16-byte chunks) and the ids before it waits for the scan:
//     it is launched as a programmatic dependent of count_and_scan, so those loads and the launch
//     itself overlap the index phase; then it reads its scan values, writes order and stores the
//     row to its k places (16-byte chunks, evict-first stores).
// hidden not a multiple of 8, over 8,192, or misaligned pointers take a 2-byte copy with the same
// place computation.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kChunk = 1024;            // entries per chunk
constexpr int kCountThreads = kChunk;   // one entry per thread
constexpr int kCountBlocksPerSm = 2;    // the count kernel's register budget (32): copy blocks fit beside it
constexpr int kCountWarps = kCountThreads / 32;
constexpr int64_t kMaxTokens = 65536, kMaxK = 16, kMaxExperts = 1024;
constexpr int kMaxChunks = static_cast<int>((kMaxTokens * kMaxK + kChunk - 1) / kChunk);
constexpr int kScanItems = 16;

__device__ int g_counts[kMaxExperts * kMaxChunks];
__device__ unsigned g_ticket;  // 0 between calls: the last block of each call wraps it back

__device__ __forceinline__ void allow_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_for_prerequisites() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__global__ void __launch_bounds__(kCountThreads, kCountBlocksPerSm)
count_and_scan(const int* __restrict__ ids, int* __restrict__ counts, int* __restrict__ offsets, int n,
               int experts, int chunks) {
  allow_dependents();  // the copy blocks may start their loads while this grid runs
  extern __shared__ int hist[];
  __shared__ int warp_sums[kCountWarps];
  __shared__ bool s_last;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  for (int e = tid; e < experts; e += kCountThreads) hist[e] = 0;
  __syncthreads();
  const int i = static_cast<int>(blockIdx.x) * kChunk + tid;
  const int id = i < n ? ids[i] : -1;  // -1: no entry (matches only other -1 lanes)
  const unsigned peers = __match_any_sync(0xffffffffu, id);
  if (id >= 0 && lane == __ffs(peers) - 1) atomicAdd(&hist[id], __popc(peers));
  __syncthreads();
  for (int e = tid; e < experts; e += kCountThreads) counts[e * chunks + blockIdx.x] = hist[e];
  __threadfence();
  __syncthreads();
  if (tid == 0) s_last = atomicInc(&g_ticket, static_cast<unsigned>(chunks - 1)) == static_cast<unsigned>(chunks - 1);
  __syncthreads();
  if (!s_last) return;
  __threadfence();

  // The last block: exclusive scan of counts[0 .. m) in place (expert-major, so the result is each
  // chunk's first place for each expert). 16 consecutive values per thread per step, loaded
  // together past the L1 (other blocks wrote them), scanned in registers, the threads' totals by
  // warp shuffles and one warp over the warp sums.
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

// The places of token t's k entries, for a block of THREADS threads: rank of entry i = t k + s
// among the entries of its chunk before it with the same expert, then, after the index grid has
// finished, place = the chunk's first place for that expert + rank. The block's threads walk the
// chunk's ids before the token's last entry: all of a thread's walk loads (at most kChunk + kMaxK
// ids over the block) are issued together at the start, one L2 latency for the walk instead of
// one per step. A table in shared memory, one bit mask per expert (bit s: slot s of this token
// has that expert), turns each walked id into one shared load: about k / experts of them hit, and
// only those look at the slots (a token's entries may start a new chunk part-way: each slot
// counts only ids from its own chunk). The thread of slot s issues its scan load as soon as the
// index grid has finished, before the walk's compares, so that L2 round trip overlaps them. Thread
// s < k writes order[place] = i and dst[s] = place x row_units. Ends with a barrier: dst is ready
// for the whole block. `tab` holds `experts` ints.
template <int THREADS>
__device__ __forceinline__ void entry_places(const int* __restrict__ ids, const int* __restrict__ base,
                                             int* __restrict__ order, int64_t t, int k, int experts, int chunks,
                                             int64_t row_units, int* tab, int64_t* dst) {
  __shared__ int s_first[kMaxK], s_rank[kMaxK];
  constexpr int kWalk = (kChunk + kMaxK + THREADS - 1) / THREADS;  // ids per thread, at most
  const int tid = static_cast<int>(threadIdx.x);
  const int i0 = static_cast<int>(t) * k;
  const int lo = i0 / kChunk * kChunk;  // start of the first entry's chunk
  const int hi = i0 + k - 1;            // the last entry itself is not counted
  int walk[kWalk];
#pragma unroll
  for (int u = 0; u < kWalk; ++u) {
    const int j = lo + tid + u * THREADS;
    walk[u] = j < hi ? ids[j] : -1;  // ids are in [0, experts): -1 marks no entry
  }
  const int my_id = tid < k ? ids[i0 + tid] : 0;
  for (int e = tid; e < experts; e += THREADS) tab[e] = 0;
  if (tid < k) {
    s_first[tid] = (i0 + tid) / kChunk * kChunk;  // start of this entry's chunk
    s_rank[tid] = 0;
  }
  __syncthreads();
  if (tid < k) atomicOr(&tab[my_id], 1 << tid);
  __syncthreads();
  wait_for_prerequisites();  // count_and_scan has finished: its scan is visible
  const int first = tid < k ? __ldcg(base + my_id * chunks + (i0 + tid) / kChunk) : 0;
#pragma unroll
  for (int u = 0; u < kWalk; ++u) {
    if (walk[u] < 0) continue;
    const int j = lo + tid + u * THREADS;
    for (unsigned m = static_cast<unsigned>(tab[walk[u]]); m != 0; m &= m - 1) {
      const int s = __ffs(static_cast<int>(m)) - 1;
      if (j < i0 + s && j >= s_first[s]) atomicAdd(&s_rank[s], 1);
    }
  }
  __syncthreads();
  if (tid < k) {
    const int i = i0 + tid;
    const int p = first + s_rank[tid];
    order[p] = i;
    dst[tid] = static_cast<int64_t>(p) * row_units;
  }
  __syncthreads();
}

constexpr int kCopyThreads = 128;
#ifndef MP_HINT
#define MP_HINT 1  // evict-first L2 policy on the bulk stores
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// One block per token: thread 0 starts a bulk copy (TMA) of the row into shared memory before
// anything else; the block then finds its entries' places (the walk and the wait of L3), and the
// thread of slot s stores the row to place s with one bulk copy from shared memory.
__global__ void __launch_bounds__(kCopyThreads)
copy_rows_tma(const int* __restrict__ ids, const int* __restrict__ base, const __nv_bfloat16* __restrict__ x,
              __nv_bfloat16* __restrict__ rows, int* __restrict__ order, int k, int experts, int chunks,
              int row_bytes) {
  __shared__ int64_t s_dst[kMaxK];
  __shared__ alignas(8) unsigned long long s_bar;
  extern __shared__ __align__(128) unsigned char s_dyn[];
  unsigned char* s_row = s_dyn;
  int* s_tab = reinterpret_cast<int*>(s_dyn + row_bytes);
  const int64_t t = blockIdx.x;
  const unsigned bar = smem_addr(&s_bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(row_bytes) : "memory");
    const unsigned char* src = reinterpret_cast<const unsigned char*>(x) + t * row_bytes;
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(s_row)), "l"(src), "r"(row_bytes), "r"(bar) : "memory");
  }
  entry_places<kCopyThreads>(ids, base, order, t, k, experts, chunks, row_bytes / 2, s_tab, s_dst);
#ifndef MP_ONE_ISSUER
#define MP_ONE_ISSUER 0  // 1: thread 0 issues all k stores; 0: the thread of slot s issues store s
#endif
  const int tid = static_cast<int>(threadIdx.x);
  if (MP_ONE_ISSUER ? tid == 0 : tid < k) {
    unsigned done = 0;
    while (!done) {
      asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
                   : "=r"(done) : "r"(bar) : "memory");
    }
#if MP_HINT
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
    for (int s = MP_ONE_ISSUER ? 0 : tid; s < (MP_ONE_ISSUER ? k : tid + 1); ++s) {
      unsigned char* dst = reinterpret_cast<unsigned char*>(rows + s_dst[s]);
#if MP_HINT
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;"
                   ::"l"(dst), "r"(smem_addr(s_row)), "r"(row_bytes), "l"(policy) : "memory");
#else
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                   ::"l"(dst), "r"(smem_addr(s_row)), "r"(row_bytes) : "memory");
#endif
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}

constexpr int kScalarThreads = 256;

// Any hidden, any alignment: one block per token, 2-byte columns, each loaded once and stored to
// the token's k places.
__global__ void __launch_bounds__(kScalarThreads)
copy_rows_scalar(const int* __restrict__ ids, const int* __restrict__ base, const __nv_bfloat16* __restrict__ x,
                 __nv_bfloat16* __restrict__ rows, int* __restrict__ order, int k, int experts, int chunks,
                 int64_t hidden) {
  __shared__ int64_t s_dst[kMaxK];
  __shared__ int s_tab[kMaxExperts];
  const int64_t t = blockIdx.x;
  entry_places<kScalarThreads>(ids, base, order, t, k, experts, chunks, hidden, s_tab, s_dst);
  const __nv_bfloat16* src = x + t * hidden;
  for (int64_t c = threadIdx.x; c < hidden; c += kScalarThreads) {
    const __nv_bfloat16 v = src[c];
    for (int s = 0; s < k; ++s) rows[s_dst[s] + c] = v;
  }
}

// Launches kernel as a programmatic dependent of the previous launch on the stream (it may start
// before that grid ends; its griddepcontrol.wait orders the reads of that grid's results).
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), unsigned grid, unsigned block, int smem, cudaStream_t stream,
                             Args... args) {
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
  const int kk = static_cast<int>(k);
  int* counts = nullptr;
  cudaError_t err = cudaGetSymbolAddress(reinterpret_cast<void**>(&counts), g_counts);
  if (err != cudaSuccess) return static_cast<int>(err);
  count_and_scan<<<chunks, kCountThreads, e * sizeof(int), stream>>>(ids, counts, offsets, n, e, chunks);
  err = cudaGetLastError();
  if (err != cudaSuccess) return static_cast<int>(err);
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(rows)) & 15) == 0;
  const int64_t row_bytes = hidden * 2;
  const int64_t smem = row_bytes + 4 * e;
  if (aligned && hidden % 8 == 0 && smem <= 48 * 1024) {
    err = launch_dependent(copy_rows_tma, static_cast<unsigned>(tokens), kCopyThreads, static_cast<int>(smem), stream,
                           ids, static_cast<const int*>(counts), x, rows, order, kk, e, chunks,
                           static_cast<int>(row_bytes));
  } else {
    err = launch_dependent(copy_rows_scalar, static_cast<unsigned>(tokens), kScalarThreads, 0, stream, ids,
                           static_cast<const int*>(counts), x, rows, order, kk, e, chunks, hidden);
  }
  return static_cast<int>(err);
}
