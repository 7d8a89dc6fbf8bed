// embedding_bag reference: trusted and obviously correct. Runs in a trusted process only; agents
// never see this file. One thread per output element (bag, column), grid-stride; the bag's rows are
// summed in double in index order and the sum rounded once to bf16.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

__global__ void embedding_bag_reference(const int* offsets, const int* indices, const __nv_bfloat16* table,
                                        __nv_bfloat16* out, int64_t rows, int64_t dim) {
  const int64_t total = rows * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t b = e / dim;
    const int64_t d = e % dim;
    double sum = 0.0;
    for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j)
      sum += static_cast<double>(__bfloat162float(table[static_cast<int64_t>(indices[j]) * dim + d]));
    out[e] = __double2bfloat16(sum);
  }
}

}  // namespace

extern "C" int d2k_embedding_bag(const int* offsets, const int* indices, const __nv_bfloat16* table,
                                 __nv_bfloat16* out, int64_t rows, int64_t cols, int64_t nnz, int64_t dim,
                                 cudaStream_t stream) {
  (void)cols;
  (void)nnz;
  if (rows <= 0 || dim <= 0) return 0;
  const int64_t total = rows * dim;
  const int threads = 256;
  const int64_t wanted = (total + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65536 ? wanted : 65536);
  embedding_bag_reference<<<blocks, threads, 0, stream>>>(offsets, indices, table, out, rows, dim);
  return static_cast<int>(cudaGetLastError());
}
