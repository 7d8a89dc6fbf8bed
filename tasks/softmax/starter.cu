// softmax: y[r][c] = exp(x[r][c] - max_r) / sum_k exp(x[r][k] - max_r) for every row r of a
// rows x cols row-major matrix.
//
// elem_bytes == 4: x and y are float; elem_bytes == 2: x and y are __nv_bfloat16 (load bf16,
// compute in fp32, round each output once to bf16). rows and cols can be any positive values;
// rows start unaligned for vector access when cols is odd. Write every element of y.
// Launch your kernel(s) on `stream` and return 0 on success (e.g. the value of
// cudaGetLastError() after your launches), non-zero on failure.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" int d2k_softmax(const void* x, void* y, int64_t rows, int64_t cols, int elem_bytes, cudaStream_t stream) {
  (void)x; (void)y; (void)rows; (void)cols; (void)elem_bytes; (void)stream;
  return 1;  // replace: launch your kernel on `stream` and return its error code
}
