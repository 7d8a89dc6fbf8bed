// rmsnorm: y[r][c] = bf16( x[r][c] * rsqrt(mean_c(x[r][c]^2) + 1e-6) * w[c] ), bf16 in and out,
// fp32 (or wider) accumulation. x and y are rows x cols row-major, w has cols elements.
//
// Write your kernel(s) and make d2k_rmsnorm launch them on `stream`. Return 0 on success
// (e.g. the value of cudaGetLastError() after your launches), non-zero on failure.
// rows and cols can be any positive values (cols need not be even: rows may start at any
// 2-byte boundary).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" int d2k_rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  (void)x; (void)w; (void)y; (void)rows; (void)cols; (void)stream;
  return 1;  // replace: launch your kernel on `stream` and return its error code
}
