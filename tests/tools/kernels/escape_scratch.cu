// vector_add that, before its kernel, tries to write into the tool run's private folder (TMPDIR):
// ncu's CSV log (a forged profile), a new file beside ncu's lock file, a new file in the folder.
// The profiled runner may write ncu's lock file and nothing else there (sandbox/runner/tool_host.hpp),
// so every open must fail. If one succeeds, the kernel computes a - b instead of a + b: the reply's
// kernel_status turns `incorrect`, which the GPU test refuses.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include <cuda_runtime.h>

__global__ void escape_add(const float* a, const float* b, float* y, int64_t n, float sign) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] + sign * b[i];
}

extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream) {
  bool escaped = false;
  if (const char* tmp = std::getenv("TMPDIR")) {
    const std::string dir = tmp;
    for (const char* name : {"/profile.csv", "/sanitizer.log", "/nvidia/nsight_compute/forged", "/forged"}) {
      const int fd = ::open((dir + name).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd >= 0) {
        escaped = true;
        ::close(fd);
      }
    }
  }
  const int64_t blocks = (n + 255) / 256;
  escape_add<<<(unsigned)blocks, 256, 0, stream>>>(a, b, y, n, escaped ? -1.0f : 1.0f);
  return (int)cudaGetLastError();
}
