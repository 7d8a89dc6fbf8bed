// histogram: bins[v] = number of i in [0, n) with data[i] == v, for the 256 byte values v.
//
// Write your kernel(s) and make d2k_histogram launch them on `stream`. Return 0 on success
// (e.g. the value of cudaGetLastError() after your launches), non-zero on failure.
// data is a device pointer to n bytes, bins a device pointer to 256 uint32 counters. bins holds
// garbage when the call starts: the call must set every one of the 256 counters.
#include <cstdint>
#include <cuda_runtime.h>

extern "C" int d2k_histogram(const uint8_t* data, uint32_t* bins, int64_t n, cudaStream_t stream) {
  (void)data; (void)bins; (void)n; (void)stream;
  return 1;  // replace: launch your kernel on `stream` and return its error code
}
