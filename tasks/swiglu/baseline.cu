// swiglu baseline: the kernel a beginner writes first ("for each token, loop over its features").
// Correct, but one thread owns a whole row: the 32 threads of a warp walk 32 different rows, so
// every load and store instruction touches 32 cache lines a row apart (uncoalesced), and only
// `rows` threads exist to hide the DRAM latency.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void swiglu_thread_per_row(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows,
                                      int64_t cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const __nv_bfloat16* gate = x + row * 2 * cols;
  const __nv_bfloat16* up = gate + cols;
  __nv_bfloat16* yr = y + row * cols;
  for (int64_t c = 0; c < cols; ++c) {
    const float g = __bfloat162float(gate[c]);
    const float u = __bfloat162float(up[c]);
    yr[c] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
  }
}

extern "C" int d2k_swiglu(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  const int threads = 128;
  const int64_t blocks = (rows + threads - 1) / threads;
  swiglu_thread_per_row<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(x, y, rows, cols);
  return static_cast<int>(cudaGetLastError());
}
