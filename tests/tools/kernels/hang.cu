// vector_add whose kernel never ends (it waits on a flag nobody sets): under the profiler or the
// sanitizer the step must end at the tool deadline, typed timeout.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void spin(volatile int* flag) {
  while (*flag == 0) {
  }
}

extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream) {
  (void)a; (void)b; (void)n;
  cudaMemsetAsync(y, 0, sizeof(int), stream);
  spin<<<1, 1, 0, stream>>>(reinterpret_cast<volatile int*>(y));
  return (int)cudaGetLastError();
}
