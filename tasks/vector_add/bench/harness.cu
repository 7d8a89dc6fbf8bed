// Times several builds of `d2k_vector_add` (each its own .so) on one large workload, side by side,
// interleaved, with an L2 flush before every sample. A tuning aid for the task's expert ladder; the
// task's verdicts come from `d2k verify-tasks`.
//   nvcc -O3 -arch=sm_90 -o harness harness.cu -ldl && ./harness N so1 so2 ...
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

using Fn = int (*)(const float*, const float*, float*, int64_t, cudaStream_t);

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

__global__ void fill(float* p, int64_t n, unsigned seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    p[i] = (x & 0xffff) / 65536.0f - 0.5f;
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s N lib.so...\n", argv[0]);
    return 2;
  }
  int64_t n = std::atoll(argv[1]);
  std::vector<Fn> fns;
  for (int i = 2; i < argc; ++i) {
    void* h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::fprintf(stderr, "%s\n", dlerror());
      return 1;
    }
    fns.push_back(reinterpret_cast<Fn>(dlsym(h, "d2k_vector_add")));
  }
  float *a, *b, *y, *flush;
  size_t flush_bytes = 256u << 20;
  CHECK(cudaMalloc(&a, n * 4));
  CHECK(cudaMalloc(&b, n * 4));
  CHECK(cudaMalloc(&y, n * 4));
  CHECK(cudaMalloc(&flush, flush_bytes));
  fill<<<1024, 256>>>(a, n, 1);
  fill<<<1024, 256>>>(b, n, 2);
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  const int samples = 60;
  std::vector<std::vector<float>> ms(fns.size());
  for (int s = 0; s < samples + 3; ++s)
    for (size_t k = 0; k < fns.size(); ++k) {
      CHECK(cudaMemsetAsync(flush, s & 0xff, flush_bytes));
      CHECK(cudaDeviceSynchronize());  // idle GPU at the first event, as in d2k's runner
      CHECK(cudaEventRecord(e0));
      if (fns[k](a, b, y, n, 0) != 0) std::fprintf(stderr, "variant %zu returned an error\n", k);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float t;
      CHECK(cudaEventElapsedTime(&t, e0, e1));
      if (s >= 3) ms[k].push_back(t);
    }
  std::printf("vector_add variants, n=%lld (%.0f MB moved per call)\n", (long long)n, 12.0 * n / 1e6);
  for (size_t k = 0; k < fns.size(); ++k) {
    std::sort(ms[k].begin(), ms[k].end());
    double med = ms[k][ms[k].size() / 2];
    std::printf("  %-50s median %8.1f us  min %8.1f us  %6.0f GB/s\n", argv[k + 2], med * 1e3, ms[k][0] * 1e3,
                12.0 * n / (med * 1e-3) / 1e9);
  }
  return 0;
}
