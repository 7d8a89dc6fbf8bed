// spmv_csr baseline: scalar CSR, the kernel a beginner writes first. One thread per row walks the
// row's nonzeros. Correct, but the 32 threads of a warp read 32 different rows (each load touches
// up to 32 cache lines), and one long row keeps its whole warp (and the launch's tail) busy alone.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void spmv_scalar(const int* row_ptr, const int* col_idx, const float* vals,
                            const float* x, float* y, int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int begin = row_ptr[r];
  const int end = row_ptr[r + 1];
  float sum = 0.0f;
  for (int j = begin; j < end; ++j) {
    sum += vals[j] * x[col_idx[j]];
  }
  y[r] = sum;
}

extern "C" int d2k_spmv_csr(const int* row_ptr, const int* col_idx, const float* vals,
                            const float* x, float* y, int64_t rows, int64_t cols, int64_t nnz,
                            cudaStream_t stream) {
  (void)cols;
  (void)nnz;
  if (rows <= 0) return 0;
  const int threads = 256;
  const int64_t blocks = (rows + threads - 1) / threads;
  spmv_scalar<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(row_ptr, col_idx, vals, x, y,
                                                                    rows);
  return static_cast<int>(cudaGetLastError());
}
