// A diagnostic for the sweep (tasks/stencil3d/bench/sweep), not a kernel of the task: how fast the
// row copy of moe_permute's L3 runs when the places are already known. The first call for an input
// (its ids pointer and sizes) computes the order on the host (a stable counting sort, synchronous)
// and keeps every entry's place on the device; every call, that one included, is then one launch
// of L3's copy (a block of 128 threads per token, the row in 16-byte chunks, stored to its k
// places with evict-first stores) that reads its k places from the kept table and writes order and
// offsets from it: no index phase, no rank walk, no grid-dependency wait. Its time against L3's
// separates what the index phase and each copy block's dependent steps cost from what the
// scattered places cost (against tasks/vector_add/bench/sweep/bw.cu's fan-out to k sequential
// regions). Correct only while the ids at that pointer do not change between calls, as in the
// sweep; hidden a multiple of 8 up to 8,192 and 16-byte aligned pointers only (else it returns
// cudaErrorInvalidValue).
#include <cstdint>
#include <algorithm>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxEntries = 65536 * 16, kMaxExperts = 1024;
__device__ int g_place[kMaxEntries];        // place of entry i
__device__ int g_offsets[kMaxExperts + 1];  // offsets of the kept input

struct Key {
  const void* ids = nullptr;
  int64_t tokens = -1, k = -1, experts = -1;
};
Key g_key;

template <int V>
__global__ void __launch_bounds__(kThreads, 8)  // at most 64 registers, as L3's copy
copy_known(const int* __restrict__ place, const int* __restrict__ kept_offsets, const uint4* __restrict__ x,
           uint4* __restrict__ rows, int* __restrict__ order, int* __restrict__ offsets, int k, int experts,
           int row_chunks) {
  __shared__ int64_t s_dst[16];
  const int64_t t = blockIdx.x;
  const uint4* src = x + t * row_chunks;
  uint4 v[V];
#pragma unroll
  for (int u = 0; u < V; ++u) {
    const int c = static_cast<int>(threadIdx.x) + u * kThreads;
    if (c < row_chunks) v[u] = src[c];
  }
  if (static_cast<int>(threadIdx.x) < k) {
    const int i = static_cast<int>(t) * k + static_cast<int>(threadIdx.x);
    const int p = place[i];
    order[p] = i;
    s_dst[threadIdx.x] = static_cast<int64_t>(p) * row_chunks;
  }
  if (t == 0)
    for (int e = static_cast<int>(threadIdx.x); e <= experts; e += kThreads) offsets[e] = kept_offsets[e];
  __syncthreads();
  for (int s = 0; s < k; ++s) {
    uint4* dst = rows + s_dst[s];
#pragma unroll
    for (int u = 0; u < V; ++u) {
      const int c = static_cast<int>(threadIdx.x) + u * kThreads;
      if (c < row_chunks) __stcs(dst + c, v[u]);
    }
  }
}

#ifndef PROBE_TMA
#define PROBE_TMA 0  // 1: the row through shared memory by bulk copies (TMA), as bench/variants/L3_tma.cu
#endif
__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__global__ void __launch_bounds__(kThreads)
copy_known_tma(const int* __restrict__ place, const int* __restrict__ kept_offsets, const unsigned char* __restrict__ x,
               unsigned char* __restrict__ rows, int* __restrict__ order, int* __restrict__ offsets, int k, int experts,
               int row_bytes) {
  __shared__ alignas(8) unsigned long long s_bar;
  extern __shared__ __align__(128) unsigned char s_row[];
  const int64_t t = blockIdx.x;
  const unsigned bar = smem_addr(&s_bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(row_bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(s_row)), "l"(x + t * row_bytes), "r"(row_bytes), "r"(bar) : "memory");
  }
  if (t == 0)
    for (int e = static_cast<int>(threadIdx.x); e <= experts; e += kThreads) offsets[e] = kept_offsets[e];
  const int s = static_cast<int>(threadIdx.x);
  if (s < k) {
    const int i = static_cast<int>(t) * k + s;
    const int p = place[i];
    order[p] = i;
    unsigned done = 0;
    while (!done) {
      asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
                   : "=r"(done) : "r"(bar) : "memory");
    }
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;"
                 ::"l"(rows + static_cast<int64_t>(p) * row_bytes), "r"(smem_addr(s_row)), "r"(row_bytes), "l"(policy) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}

// PROBE_TMA=2: one block of one warp per SM, persistent: block b takes tokens b, b + G, b + 2G, ...
// (G blocks); a ring of S row buffers in shared memory, each with its mbarrier; lane 0 keeps S - 1
// row loads in flight ahead of the stores and issues each token's k bulk stores as one group.
constexpr int kMaxStages = 32;
#ifndef PROBE_BPS
#define PROBE_BPS 1  // persistent blocks per SM
#endif
__global__ void __launch_bounds__(32)
copy_known_persist(const int* __restrict__ place, const int* __restrict__ kept_offsets,
                   const unsigned char* __restrict__ x, unsigned char* __restrict__ rows, int* __restrict__ order,
                   int* __restrict__ offsets, int tokens, int k, int experts, int row_bytes, int stages) {
  __shared__ alignas(8) unsigned long long s_bar[kMaxStages];
  extern __shared__ __align__(128) unsigned char s_ring[];
  const int lane = static_cast<int>(threadIdx.x);
  const int b = static_cast<int>(blockIdx.x), G = static_cast<int>(gridDim.x);
  const int mine = b < tokens ? (tokens - b + G - 1) / G : 0;
  if (b == 0)
    for (int e = lane; e <= experts; e += 32) offsets[e] = kept_offsets[e];
  auto load = [&](int j) {  // lane 0: token b + j G into slot j % stages
    const int slot = j % stages;
    const unsigned bar = smem_addr(&s_bar[slot]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(row_bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(s_ring + static_cast<size_t>(slot) * row_bytes)),
                 "l"(x + static_cast<int64_t>(b + static_cast<int64_t>(j) * G) * row_bytes), "r"(row_bytes), "r"(bar)
                 : "memory");
  };
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  if (lane == 0) {
    for (int q = 0; q < stages; ++q) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&s_bar[q])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    for (int q = 0; q < stages && q < mine; ++q) load(q);
  }
  __syncwarp();
  for (int j = 0; j < mine; ++j) {
    const int64_t t = b + static_cast<int64_t>(j) * G;
    int p = 0;
    if (lane < k) {
      const int i = static_cast<int>(t) * k + lane;
      p = place[i];
      order[p] = i;
    }
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
                     ::"l"(rows + static_cast<int64_t>(ps) * row_bytes), "r"(src), "r"(row_bytes), "l"(policy) : "memory");
    }
    if (lane == 0) {
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      if (j >= 1 && j - 1 + stages < mine) {  // token j - 1's stores have read its slot: refill it
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        load(j - 1 + stages);
      }
    }
    __syncwarp();
  }
  if (lane == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

template <int V>
void launch(const int* place, const int* kept, const __nv_bfloat16* x, __nv_bfloat16* rows, int* order, int* offsets,
            int64_t tokens, int k, int experts, int row_chunks, cudaStream_t stream) {
  copy_known<V><<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(
      place, kept, reinterpret_cast<const uint4*>(x), reinterpret_cast<uint4*>(rows), order, offsets, k, experts,
      row_chunks);
}

}  // namespace

extern "C" int d2k_moe_permute(const void* topk_ids, const __nv_bfloat16* x, int* order, int* offsets,
                               __nv_bfloat16* rows, int64_t tokens, int64_t k, int64_t experts, int64_t hidden,
                               cudaStream_t stream) {
  if (tokens <= 0 || k <= 0 || experts <= 0 || hidden <= 0) return 0;
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(rows)) & 15) == 0;
  if (tokens * k > kMaxEntries || k > 16 || experts > kMaxExperts || !aligned || hidden % 8 != 0 || hidden > 8192)
    return static_cast<int>(cudaErrorInvalidValue);
  int *place = nullptr, *kept = nullptr;
  cudaError_t err = cudaGetSymbolAddress(reinterpret_cast<void**>(&place), g_place);
  if (err == cudaSuccess) err = cudaGetSymbolAddress(reinterpret_cast<void**>(&kept), g_offsets);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (g_key.ids != topk_ids || g_key.tokens != tokens || g_key.k != k || g_key.experts != experts) {
    const int64_t n = tokens * k;
    std::vector<int> ids(static_cast<size_t>(n)), off(static_cast<size_t>(experts + 1), 0), pl(static_cast<size_t>(n));
    if ((err = cudaStreamSynchronize(stream)) != cudaSuccess) return static_cast<int>(err);
    if ((err = cudaMemcpy(ids.data(), topk_ids, n * sizeof(int), cudaMemcpyDeviceToHost)) != cudaSuccess)
      return static_cast<int>(err);
    for (int64_t i = 0; i < n; ++i) ++off[static_cast<size_t>(ids[i]) + 1];
    for (int64_t e = 0; e < experts; ++e) off[e + 1] += off[e];
    std::vector<int> next(off.begin(), off.end() - 1);
    for (int64_t i = 0; i < n; ++i) pl[i] = next[static_cast<size_t>(ids[i])]++;  // stable: i ascending
    if ((err = cudaMemcpy(place, pl.data(), n * sizeof(int), cudaMemcpyHostToDevice)) != cudaSuccess ||
        (err = cudaMemcpy(kept, off.data(), (experts + 1) * sizeof(int), cudaMemcpyHostToDevice)) != cudaSuccess)
      return static_cast<int>(err);
    g_key = Key{topk_ids, tokens, k, experts};
  }
  const int c = static_cast<int>(hidden / 8);
#if PROBE_TMA == 2
  {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int row_bytes = static_cast<int>(hidden * 2);
    const int stages = std::min(kMaxStages, (200 * 1024 / PROBE_BPS) / row_bytes);
    const int smem = stages * row_bytes;
    cudaFuncSetAttribute(copy_known_persist, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    copy_known_persist<<<static_cast<unsigned>(sms * PROBE_BPS), 32, smem, stream>>>(
        place, kept, reinterpret_cast<const unsigned char*>(x), reinterpret_cast<unsigned char*>(rows), order, offsets,
        static_cast<int>(tokens), static_cast<int>(k), static_cast<int>(experts), row_bytes, stages);
    return static_cast<int>(cudaGetLastError());
  }
#elif PROBE_TMA
  copy_known_tma<<<static_cast<unsigned>(tokens), kThreads, static_cast<size_t>(hidden * 2), stream>>>(
      place, kept, reinterpret_cast<const unsigned char*>(x), reinterpret_cast<unsigned char*>(rows), order, offsets,
      static_cast<int>(k), static_cast<int>(experts), static_cast<int>(hidden * 2));
  return static_cast<int>(cudaGetLastError());
#endif
  const int kk = static_cast<int>(k), e = static_cast<int>(experts);
  switch ((c + kThreads - 1) / kThreads) {
    case 1: launch<1>(place, kept, x, rows, order, offsets, tokens, kk, e, c, stream); break;
    case 2: launch<2>(place, kept, x, rows, order, offsets, tokens, kk, e, c, stream); break;
    case 3: launch<3>(place, kept, x, rows, order, offsets, tokens, kk, e, c, stream); break;
    case 4: launch<4>(place, kept, x, rows, order, offsets, tokens, kk, e, c, stream); break;
    case 5: launch<5>(place, kept, x, rows, order, offsets, tokens, kk, e, c, stream); break;
    case 6: launch<6>(place, kept, x, rows, order, offsets, tokens, kk, e, c, stream); break;
    case 7: launch<7>(place, kept, x, rows, order, offsets, tokens, kk, e, c, stream); break;
    default: launch<8>(place, kept, x, rows, order, offsets, tokens, kk, e, c, stream); break;
  }
  return static_cast<int>(cudaGetLastError());
}
