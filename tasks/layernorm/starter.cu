// layernorm: y[r][c] = bf16( (x[r][c] - mean_r) * rsqrt(var_r + 1e-5) * w[c] + b[c] ), with mean_r and
// the biased variance var_r of row r in fp32 (or wider); bf16 in and out. x and y are rows x cols
// row-major; w and b have cols elements.
//
// Write your kernel(s) and make d2k_layernorm launch them on `stream`. Return 0 on success
// (e.g. the value of cudaGetLastError() after your launches), non-zero on failure.
// rows and cols can be any positive values (cols need not be even: rows may start at any
// 2-byte boundary).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" int d2k_layernorm(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b, __nv_bfloat16* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  (void)x; (void)w; (void)b; (void)y; (void)rows; (void)cols; (void)stream;
  return 1;  // replace: launch your kernel on `stream` and return its error code
}
