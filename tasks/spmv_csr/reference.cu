// spmv_csr reference: trusted and obviously correct. Runs in a trusted process only; agents never
// see this file. One thread per row walks the row's nonzeros in order and accumulates the
// products in double; the row's sum is rounded to float once.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void spmv_csr_reference(const int* row_ptr, const int* col_idx, const float* vals,
                                   const float* x, float* y, int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int begin = row_ptr[r];
  const int end = row_ptr[r + 1];
  double sum = 0.0;
  for (int j = begin; j < end; ++j) {
    sum += static_cast<double>(vals[j]) * static_cast<double>(x[col_idx[j]]);
  }
  y[r] = static_cast<float>(sum);
}

extern "C" int d2k_spmv_csr(const int* row_ptr, const int* col_idx, const float* vals,
                            const float* x, float* y, int64_t rows, int64_t cols, int64_t nnz,
                            cudaStream_t stream) {
  (void)cols;
  (void)nnz;
  if (rows <= 0) return 0;
  const int threads = 256;
  const int64_t blocks = (rows + threads - 1) / threads;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  spmv_csr_reference<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(row_ptr, col_idx, vals,
                                                                           x, y, rows);
  return static_cast<int>(cudaGetLastError());
}
