// GPU timing bench for gemm_skinny kernel variants (not part of the task; a development tool).
// Usage: gpu_bench reference.so variant1.so [variant2.so ...]
// Each .so exports d2k_gemm_skinny. For every workload: inputs as task.json draws them (x ~ N(0,1),
// W ~ U(-0.05, 0.05), from a hash), the reference's output, then per variant: correctness under the
// task's tolerance (atol 2e-3, rtol 1.6e-2) and the median of 20 timed calls, each after an L2 flush
// (as d2k verify-tasks times). The copy bandwidth (cudaMemcpyAsync D2D of 2 GiB, read + write) is
// measured first; "%copy" is the weight + x + y bytes over it. BENCH_ONLY=name,name limits the workloads.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <string>
#include <vector>

using Fn = int (*)(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, int64_t, int64_t, int64_t,
                   cudaStream_t);

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

__device__ uint32_t hash32(uint64_t v) {
  v ^= v >> 33;
  v *= 0xff51afd7ed558ccdULL;
  v ^= v >> 33;
  v *= 0xc4ceb9fe1a85ec53ULL;
  v ^= v >> 33;
  return static_cast<uint32_t>(v);
}

__global__ void fill(__nv_bfloat16* p, int64_t n, uint64_t seed, int normal, float a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float u1 = (hash32(seed * 0x9E3779B97F4A7C15ULL + 2 * i) + 0.5f) * 2.3283064e-10f;
    const float u2 = (hash32(seed * 0x9E3779B97F4A7C15ULL + 2 * i + 1) + 0.5f) * 2.3283064e-10f;
    float v = normal ? sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2) : (2.0f * u1 - 1.0f) * a;
    p[i] = __float2bfloat16(v);
  }
}

__global__ void garbage(__nv_bfloat16* p, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(12345.0f);
}

__global__ void compare(const __nv_bfloat16* a, const __nv_bfloat16* ref, int64_t n, unsigned long long* bad,
                        float* maxerr) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = __bfloat162float(a[i]), r = __bfloat162float(ref[i]);
    const float err = fabsf(v - r);
    if (!(err <= 2e-3f + 1.6e-2f * fabsf(r))) atomicAdd(bad, 1ULL);
    if (!(err == err)) atomicAdd(bad, 1ULL);
    atomicMax(reinterpret_cast<int*>(maxerr), __float_as_int(err == err ? err : 1e30f));
  }
}

struct Wl {
  const char* name;
  int64_t M, N, K;
  bool timed;
};

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s reference.so variant.so...\n", argv[0]);
    return 2;
  }
  std::vector<Fn> fns;
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    void* h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "dlopen %s: %s\n", argv[i], dlerror());
      return 1;
    }
    Fn f = reinterpret_cast<Fn>(dlsym(h, "d2k_gemm_skinny"));
    if (!f) return 1;
    fns.push_back(f);
    std::string n = argv[i];
    names.push_back(n.substr(n.find_last_of('/') + 1));
  }
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  // copy bandwidth
  double copy_gbs = 0;
  {
    const size_t bytes = size_t(2) << 30;
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemsetAsync(a, 1, bytes, st));
    std::vector<float> t;
    for (int r = 0; r < 15; ++r) {
      CK(cudaEventRecord(e0, st));
      CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    copy_gbs = 2.0 * bytes / (t[t.size() / 2] * 1e-3) / 1e9;
    CK(cudaFree(a));
    CK(cudaFree(b));
  }
  printf("copy bandwidth %.0f GB/s\n", copy_gbs);
  const size_t flush_bytes = size_t(256) << 20;
  void* flush;
  CK(cudaMalloc(&flush, flush_bytes));
  const Wl wls[] = {
      {"m1_n28672_k8192", 1, 28672, 8192, true},    {"m8_n8192_k28672", 8, 8192, 28672, true},
      {"m16_n4096_k4096", 16, 4096, 4096, true},    {"m16_n28679_k8192", 16, 28679, 8192, true},
      {"m64_n16389_k8192", 64, 16389, 8192, true},  {"m1_n1031_k16384", 1, 1031, 16384, true},
      {"m37_n3001_k5000", 37, 3001, 5000, true},    {"m32_n16384_k8192", 32, 16384, 8192, true},
      {"m64_n28672_k8192", 64, 28672, 8192, true},  {"m3_n1000_k1032", 3, 1000, 1032, false},
      {"m5_n7_k40", 5, 7, 40, false},               {"m64_n3_k24", 64, 3, 24, false},
      {"m33_n11_k1544", 33, 11, 1544, false},       {"m2_n1_k8", 2, 1, 8, false},
      {"m17_n300_k200", 17, 300, 200, false},       {"m64_n129_k8200", 64, 129, 8200, false},
      {"m1_n257_k65536", 1, 257, 65536, false},     {"m12_n5000_k520", 12, 5000, 520, false},
  };
  unsigned long long* bad;
  float* maxerr;
  CK(cudaMalloc(&bad, 8));
  CK(cudaMalloc(&maxerr, 4));
  printf("%-18s", "workload");
  for (size_t v = 1; v < fns.size(); ++v) printf(" | %22s", names[v].c_str());
  printf("\n");
  const char* only = getenv("BENCH_ONLY");  // comma-separated workload names, or all
  for (const Wl& w : wls) {
    if (only && !strstr(only, w.name)) continue;
    __nv_bfloat16 *x, *W, *y, *yr;
    CK(cudaMalloc(&x, w.M * w.K * 2));
    CK(cudaMalloc(&W, w.N * w.K * 2));
    CK(cudaMalloc(&y, w.M * w.N * 2));
    CK(cudaMalloc(&yr, w.M * w.N * 2));
    fill<<<1024, 256, 0, st>>>(x, w.M * w.K, 11, 1, 1.0f);
    fill<<<1024, 256, 0, st>>>(W, w.N * w.K, 23, 0, 0.05f);
    if (fns[0](x, W, yr, w.M, w.N, w.K, st) != 0) {
      printf("reference failed\n");
      return 1;
    }
    CK(cudaStreamSynchronize(st));
    const double bytes = 2.0 * (w.N * w.K + w.M * w.K + w.M * w.N);
    printf("%-18s", w.name);
    for (size_t v = 1; v < fns.size(); ++v) {
      // correctness over 3 calls (the workspace must be clean after each)
      unsigned long long nbad = 0;
      float me = 0;
      int rc = 0;
      for (int r = 0; r < 3 && rc == 0; ++r) {
        garbage<<<1024, 256, 0, st>>>(y, w.M * w.N);
        rc = fns[v](x, W, y, w.M, w.N, w.K, st);
        CK(cudaMemsetAsync(bad, 0, 8, st));
        CK(cudaMemsetAsync(maxerr, 0, 4, st));
        compare<<<1024, 256, 0, st>>>(y, yr, w.M * w.N, bad, maxerr);
        unsigned long long b1;
        float m1;
        CK(cudaMemcpyAsync(&b1, bad, 8, cudaMemcpyDeviceToHost, st));
        CK(cudaMemcpyAsync(&m1, maxerr, 4, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        nbad += b1;
        me = std::max(me, m1);
      }
      if (rc != 0 || cudaGetLastError() != cudaSuccess) {
        printf(" | %22s", "ERROR");
        continue;
      }
      char cell[64];
      if (w.timed) {
        std::vector<float> t;
        for (int r = 0; r < 23; ++r) {
          CK(cudaMemsetAsync(flush, r, flush_bytes, st));
          CK(cudaEventRecord(e0, st));
          fns[v](x, W, y, w.M, w.N, w.K, st);
          CK(cudaEventRecord(e1, st));
          CK(cudaEventSynchronize(e1));
          float ms;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          if (r >= 3) t.push_back(ms * 1000.0f);
        }
        std::sort(t.begin(), t.end());
        const double us = t[t.size() / 2];
        const double pct = 100.0 * bytes / (us * 1e-6) / 1e9 / copy_gbs;
        snprintf(cell, sizeof cell, "%7.1fus %5.1f%% %s", us, pct, nbad ? "BAD" : "ok");
      } else {
        snprintf(cell, sizeof cell, "%s (%llu, %.4f)", nbad ? "BAD" : "ok", nbad, me);
      }
      if (w.timed && nbad) printf(" | %s[%llu,%.3f]", cell, nbad, me);
      else printf(" | %22s", cell);
    }
    printf("\n");
    fflush(stdout);
    CK(cudaFree(x));
    CK(cudaFree(W));
    CK(cudaFree(y));
    CK(cudaFree(yr));
  }
  printf("END\n");  // the run completed (a variant that faults ends the process before this)
  return 0;
}
