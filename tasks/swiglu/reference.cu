// swiglu reference: trusted and obviously correct. Runs in a trusted process only; agents never
// see this file. One thread per output element (grid-stride); silu(g) * u is computed in double
// from the bf16 inputs and rounded once from double to bf16.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace {

__global__ void swiglu_reference(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows,
                                 int64_t cols) {
  const int64_t total = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t r = i / cols;
    const int64_t c = i % cols;
    const double g = static_cast<double>(__bfloat162float(x[r * 2 * cols + c]));
    const double u = static_cast<double>(__bfloat162float(x[r * 2 * cols + cols + c]));
    const double silu = g / (1.0 + exp(-g));
    y[i] = __double2bfloat16(silu * u);
  }
}

}  // namespace

extern "C" int d2k_swiglu(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t total = rows * cols;
  const int threads = 256;
  const int64_t wanted = (total + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65536 ? wanted : 65536);
  swiglu_reference<<<blocks, threads, 0, stream>>>(x, y, rows, cols);
  return static_cast<int>(cudaGetLastError());
}
