// moe_permute reference: trusted and obviously correct. Runs in a trusted process only; agents
// never see this file. Straight from the definition, without any sort:
//   offsets[e] = the number of entries whose expert is below e             (one thread per e)
//   position of entry i = offsets-style count of entries with a smaller expert plus the number of
//   entries with the same expert and a smaller index (the stable order)      (one thread per entry)
//   rows[p][c] = x[order[p] / k][c]                                           (one thread per element)
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

__global__ void reference_offsets(const int* ids, int* offsets, int64_t n, int64_t experts) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e > experts) return;
  int64_t below = 0;
  for (int64_t j = 0; j < n; ++j) below += ids[j] < e ? 1 : 0;
  offsets[e] = static_cast<int>(below);
}

__global__ void reference_order(const int* ids, int* order, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int e = ids[i];
  int64_t pos = 0;
  for (int64_t j = 0; j < n; ++j) pos += (ids[j] < e || (ids[j] == e && j < i)) ? 1 : 0;
  order[pos] = static_cast<int>(i);
}

__global__ void reference_rows(const int* order, const __nv_bfloat16* x, __nv_bfloat16* rows, int64_t n, int64_t k,
                               int64_t hidden) {
  const int64_t total = n * hidden;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < total; q += stride) {
    const int64_t p = q / hidden, c = q % hidden;
    rows[q] = x[(order[p] / k) * hidden + c];
  }
}

unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65536 ? b : 65536);
}

}  // namespace

extern "C" int d2k_moe_permute(const void* topk_ids, const __nv_bfloat16* x, int* order, int* offsets,
                               __nv_bfloat16* rows, int64_t tokens, int64_t k, int64_t experts, int64_t hidden,
                               cudaStream_t stream) {
  if (tokens <= 0 || k <= 0 || experts <= 0 || hidden <= 0) return 0;
  const int* ids = static_cast<const int*>(topk_ids);
  const int64_t n = tokens * k;
  const int threads = 256;
  reference_offsets<<<static_cast<unsigned>((experts + 1 + threads - 1) / threads), threads, 0, stream>>>(ids, offsets, n,
                                                                                                          experts);
  reference_order<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(ids, order, n);
  reference_rows<<<blocks_for(n * hidden, threads), threads, 0, stream>>>(order, x, rows, n, k, hidden);
  return static_cast<int>(cudaGetLastError());
}
