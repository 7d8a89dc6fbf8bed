// embedding_bag expert, layer 1 (algorithm): one block of 256 threads per bag, the columns split
// over the threads: every looked-up row is read by consecutive threads at consecutive columns
// (coalesced, 64 contiguous bytes per warp instruction), the bag's rows summed in fp32 in index
// order. Each thread reads the bag's indices itself (the same addresses for all threads: served
// by the cache).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
embedding_bag_block_per_bag(const int* __restrict__ offsets, const int* __restrict__ indices,
                            const __nv_bfloat16* __restrict__ table, __nv_bfloat16* __restrict__ out,
                            int64_t dim) {
  const int64_t b = blockIdx.x;
  const int begin = offsets[b], end = offsets[b + 1];
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) {
    float sum = 0.0f;
    for (int j = begin; j < end; ++j) sum += __bfloat162float(table[static_cast<int64_t>(indices[j]) * dim + d]);
    out[b * dim + d] = __float2bfloat16(sum);
  }
}

}  // namespace

extern "C" int d2k_embedding_bag(const int* offsets, const int* indices, const __nv_bfloat16* table,
                                 __nv_bfloat16* out, int64_t rows, int64_t cols, int64_t nnz, int64_t dim,
                                 cudaStream_t stream) {
  (void)cols;
  (void)nnz;
  if (rows <= 0 || dim <= 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  embedding_bag_block_per_bag<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(offsets, indices, table, out, dim);
  return static_cast<int>(cudaGetLastError());
}
