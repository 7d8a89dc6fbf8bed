// moe_permute baseline: the kernels a beginner writes first. One thread per entry finds the entry's
// place by counting, over all tokens * k entries, those that sort before it (quadratic work), then
// writes order and copies the token's row to its place element by element: the 32 threads of a
// warp copy 32 unrelated rows, so every load and store instruction touches 32 different lines.
// One thread per expert counts the offsets the same way.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void moe_offsets_by_counting(const int* ids, int* offsets, int64_t n, int64_t experts) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e > experts) return;
  int count = 0;
  for (int64_t j = 0; j < n; ++j) count += ids[j] < e ? 1 : 0;
  offsets[e] = count;
}

__global__ void moe_permute_thread_per_entry(const int* ids, const __nv_bfloat16* x, int* order,
                                             __nv_bfloat16* rows, int64_t n, int64_t k, int64_t hidden) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int e = ids[i];
  int64_t pos = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int f = ids[j];
    if (f < e || (f == e && j < i)) ++pos;
  }
  order[pos] = static_cast<int>(i);
  const __nv_bfloat16* src = x + (i / k) * hidden;
  __nv_bfloat16* dst = rows + pos * hidden;
  for (int64_t c = 0; c < hidden; ++c) dst[c] = src[c];
}

extern "C" int d2k_moe_permute(const void* topk_ids, const __nv_bfloat16* x, int* order, int* offsets,
                               __nv_bfloat16* rows, int64_t tokens, int64_t k, int64_t experts, int64_t hidden,
                               cudaStream_t stream) {
  if (tokens <= 0 || k <= 0 || experts <= 0 || hidden <= 0) return 0;
  const int* ids = static_cast<const int*>(topk_ids);
  const int64_t n = tokens * k;
  const int threads = 128;
  moe_offsets_by_counting<<<static_cast<unsigned>((experts + threads) / threads), threads, 0, stream>>>(ids, offsets, n,
                                                                                                     experts);
  moe_permute_thread_per_entry<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(
      ids, x, order, rows, n, k, hidden);
  return static_cast<int>(cudaGetLastError());
}
