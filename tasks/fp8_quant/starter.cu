// fp8_quant: per row r of the rows x cols bf16 matrix x, amax = max |x[r][c]|, a = max(amax, 1e-12f),
// scale[r] = a / 448, inv = 448 / a (both correctly rounded fp32 divisions), and
// q[r][c] = e4m3(float(x[r][c]) * inv), round to nearest even, saturating to +-448 (what
// __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3) from <cuda_fp8.h> does). q holds the e4m3
// bytes, rows x cols row-major; scale holds rows floats. Checked bit for bit.
//
// Write your kernel(s) and make d2k_fp8_quant launch them on `stream`. Return 0 on success
// (e.g. the value of cudaGetLastError() after your launches), non-zero on failure.
// rows and cols can be any positive values (cols need not be even: rows may start at any
// 2-byte boundary of x and any byte of q).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

extern "C" int d2k_fp8_quant(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t rows, int64_t cols, cudaStream_t stream) {
  (void)x; (void)q; (void)scale; (void)rows; (void)cols; (void)stream;
  return 1;  // replace: launch your kernel on `stream` and return its error code
}
