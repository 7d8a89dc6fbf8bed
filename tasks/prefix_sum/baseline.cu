// prefix_sum baseline: the scan a beginner writes first. Hillis-Steele over global memory: pass k
// computes dst[i] = src[i] + src[i - 2^k] (src[i] alone when i < 2^k), one launch per pass,
// ping-ponging between y and a scratch buffer so that the last pass lands in y. ceil(log2 n)
// launches and O(n log n) work and traffic. int32 is added as uint32 (two's complement wraparound).
#include <cstdint>
#include <cuda_runtime.h>

template <typename T>
__global__ void hillis_steele_pass(const T* src, T* dst, int64_t n, int64_t d) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = i >= d ? src[i] + src[i - d] : src[i];
}

namespace {

// Scratch buffer of n elements, grown on demand (allocated by the first call of a larger size).
void* g_tmp = nullptr;
size_t g_tmp_bytes = 0;
int g_tmp_device = -1;

cudaError_t scratch(size_t bytes, cudaStream_t stream, void** out) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device != g_tmp_device || bytes > g_tmp_bytes) {
    if (g_tmp != nullptr && device == g_tmp_device) {
      err = cudaStreamSynchronize(stream);  // earlier passes may still read the old buffer
      if (err != cudaSuccess) return err;
      cudaFree(g_tmp);
    }
    g_tmp = nullptr;
    g_tmp_bytes = 0;
    err = cudaMalloc(&g_tmp, bytes);
    if (err != cudaSuccess) return err;
    g_tmp_bytes = bytes;
    g_tmp_device = device;
  }
  *out = g_tmp;
  return cudaSuccess;
}

template <typename T>
cudaError_t run(const T* x, T* y, int64_t n, cudaStream_t stream) {
  void* tmp_raw = nullptr;
  cudaError_t err = scratch(static_cast<size_t>(n) * sizeof(T), stream, &tmp_raw);
  if (err != cudaSuccess) return err;
  T* tmp = static_cast<T*>(tmp_raw);
  int passes = 0;
  for (int64_t d = 1; d < n; d *= 2) ++passes;
  if (passes == 0) passes = 1;  // n == 1: one pass copies x[0]
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  const T* src = x;
  int64_t d = 1;
  for (int p = 1; p <= passes; ++p, d *= 2) {
    T* dst = (passes - p) % 2 == 0 ? y : tmp;  // the last pass writes y
    hillis_steele_pass<T><<<blocks, threads, 0, stream>>>(src, dst, n, d);
    src = dst;
  }
  return cudaGetLastError();
}

}  // namespace

extern "C" int d2k_prefix_sum(const void* x, void* y, int64_t n, int is_float, cudaStream_t stream) {
  if (n <= 0) return 0;
  if (is_float)
    return static_cast<int>(run(static_cast<const float*>(x), static_cast<float*>(y), n, stream));
  return static_cast<int>(
      run(static_cast<const unsigned*>(x), static_cast<unsigned*>(y), n, stream));
}
