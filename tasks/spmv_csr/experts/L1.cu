// spmv_csr expert, layer 1 (algorithmic insight): vector CSR. The 32 lanes of a warp cooperate
// on one row: lane l takes nonzeros begin+l, begin+l+32, ..., so each load of col_idx and vals is
// one coalesced stretch, and a long row is spread over 32 lanes instead of one thread. The 32
// partial sums are combined with a butterfly of warp shuffles; lane 0 writes y[row].
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

__global__ void __launch_bounds__(kThreads)
spmv_warp_per_row(const int* __restrict__ row_ptr, const int* __restrict__ col_idx,
                  const float* __restrict__ vals, const float* __restrict__ x,
                  float* __restrict__ y, int64_t rows) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;  // the whole warp leaves together: row is uniform across the warp
  const int begin = row_ptr[row];
  const int end = row_ptr[row + 1];
  float sum = 0.0f;
  for (int j = begin + lane; j < end; j += 32) sum += vals[j] * x[col_idx[j]];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) y[row] = sum;
}

}  // namespace

extern "C" int d2k_spmv_csr(const int* row_ptr, const int* col_idx, const float* vals,
                            const float* x, float* y, int64_t rows, int64_t cols, int64_t nnz,
                            cudaStream_t stream) {
  (void)cols;
  (void)nnz;
  if (rows <= 0) return 0;
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  spmv_warp_per_row<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(row_ptr, col_idx, vals,
                                                                            x, y, rows);
  return static_cast<int>(cudaGetLastError());
}
