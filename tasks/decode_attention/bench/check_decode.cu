// decode_attention workbench: loads kernel shared objects (each built from one of the task's .cu
// files with the task's flags) and the reference's, runs them on the same inputs, compares every
// output under the task's tolerance and times each kernel like the runner (L2 flushed before each
// sample, the median; kernels whose file name starts with L). Not part of the task. Usage:
//   check_decode REF.so KERNEL.so... [--time]
// Inputs: the cache pools are filled on the GPU from a hash (pseudo-normal values); page tables on
// the host, in patterns the task uses (uniform lengths, power-law lengths with empty sequences,
// contiguous pages, pages shared between sequences, unsorted pages).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <random>
#include <string>
#include <vector>

using Entry = int (*)(const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const int*, const int*,
                      const int*, __nv_bfloat16*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                         \
    }                                                                                       \
  } while (0)

__device__ uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
__global__ void fill_normal(__nv_bfloat16* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t r = mix(seed ^ (uint64_t)i * 0x632BE59BD9B4E019ull);
    const float u1 = ((r >> 40) + 1) * (1.0f / 16777217.0f), u2 = ((r >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
    p[i] = __float2bfloat16(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
  }
}

struct Config {
  const char* name;
  int B, Hq, Hkv, pool;
  int pattern;  // 0 uniform, 1 power law (empty sequences possible), 2 contiguous, 3 shared + unsorted
  int mean_pages;
  bool timed;
};

struct Tables {
  std::vector<int> ptr, idx, last;
};

Tables make_tables(const Config& c, std::mt19937_64& rng) {
  Tables t;
  std::vector<int> len(c.B);
  for (int b = 0; b < c.B; ++b) {
    if (c.pattern == 1) {
      const double u = std::uniform_real_distribution<double>(1e-9, 1.0)(rng);
      len[b] = std::min(2048, (int)(c.mean_pages * 0.4 * std::pow(u, -1.0 / 1.5)));
      if (rng() % 7 == 0) len[b] = 0;
    } else if (c.pattern == 2) {
      len[b] = c.mean_pages;
    } else {
      len[b] = std::max(1, std::min(2048, (int)(c.mean_pages * (0.33 + 1.33 * std::uniform_real_distribution<double>()(rng)))));
    }
  }
  t.ptr.push_back(0);
  int next = 0;
  for (int b = 0; b < c.B; ++b) {
    for (int i = 0; i < len[b]; ++i) {
      int p;
      if (c.pattern == 2) p = next++ % c.pool;
      else if (c.pattern == 3) p = (int)(rng() % std::min(c.pool, 64 + c.mean_pages));  // heavy sharing
      else p = (int)(rng() % c.pool);
      t.idx.push_back(p);
    }
    if (c.pattern != 3) std::sort(t.idx.begin() + t.ptr.back(), t.idx.end());
    t.ptr.push_back((int)t.idx.size());
    t.last.push_back(1 + (int)(rng() % 16));
  }
  if (t.idx.empty()) t.idx.push_back(0);
  return t;
}

float bf(const __nv_bfloat16 v) { return __bfloat162float(v); }

std::string label(const std::string& path) {  // file name without the directory and ".so"
  std::string s = path.substr(path.find_last_of('/') + 1);
  return s.size() > 3 && s.compare(s.size() - 3, 3, ".so") == 0 ? s.substr(0, s.size() - 3) : s;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s REF.so KERNEL.so... [--time]\n", argv[0]);
    return 2;
  }
  bool time = false;
  std::vector<std::string> sos;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--time")) time = true;
    else sos.push_back(argv[i]);
  }
  std::vector<Entry> entries;
  for (auto& s : sos) {
    void* h = dlopen(s.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) { std::fprintf(stderr, "dlopen %s: %s\n", s.c_str(), dlerror()); return 2; }
    entries.push_back((Entry)dlsym(h, "d2k_decode_attention"));
  }
  const Config configs[] = {
      {"tiny_g4", 3, 8, 2, 9, 0, 2, false},
      {"tiny_mha", 5, 3, 3, 11, 0, 2, false},
      {"g7_short", 13, 28, 4, 400, 0, 9, false},
      {"g16_power", 41, 128, 8, 3000, 1, 30, false},
      {"g1_shared", 9, 8, 8, 500, 3, 40, false},
      {"g5_contig", 7, 40, 8, 700, 2, 100, false},
      {"g3_one_long", 1, 6, 2, 4000, 0, 2048, false},
      {"llama3_8b_b32_4k", 32, 32, 8, 12289, 0, 256, true},
      {"llama3_70b_b8_long", 8, 64, 8, 12800, 0, 1200, true},
      {"mixed_b96_power_law", 96, 32, 8, 12288, 1, 85, true},
      {"qwen2_7b_b61_g7", 61, 28, 4, 18013, 0, 197, true},
      {"one_seq_32k_g8", 1, 64, 8, 3001, 0, 2048, true},
      {"power_law_b203_g16", 203, 128, 8, 13007, 1, 44, true},
  };
  std::mt19937_64 rng(12345);
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  void* flush;
  CK(cudaMalloc(&flush, 256 << 20));
  int fails = 0;
  for (const Config& c : configs) {
    Tables t = make_tables(c, rng);
    const int64_t cache_elems = (int64_t)c.pool * c.Hkv * 16 * 128;
    const int64_t qn = (int64_t)c.B * c.Hq * 128;
    __nv_bfloat16 *q, *kc, *vc, *out, *ref;
    int *ptr, *idx, *last;
    CK(cudaMalloc(&q, qn * 2));
    CK(cudaMalloc(&kc, cache_elems * 2));
    CK(cudaMalloc(&vc, cache_elems * 2));
    CK(cudaMalloc(&out, qn * 2));
    CK(cudaMalloc(&ref, qn * 2));
    CK(cudaMalloc(&ptr, t.ptr.size() * 4));
    CK(cudaMalloc(&idx, t.idx.size() * 4));
    CK(cudaMalloc(&last, t.last.size() * 4));
    fill_normal<<<1024, 256>>>(q, qn, rng());
    fill_normal<<<4096, 256>>>(kc, cache_elems, rng());
    fill_normal<<<4096, 256>>>(vc, cache_elems, rng());
    CK(cudaMemcpy(ptr, t.ptr.data(), t.ptr.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(idx, t.idx.data(), t.idx.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(last, t.last.data(), t.last.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    int64_t tokens = 0;
    for (int b = 0; b < c.B; ++b) {
      const int n = t.ptr[b + 1] - t.ptr[b];
      tokens += n ? 16 * (n - 1) + t.last[b] : 0;
    }
    const double kv_bytes = 4.0 * 128 * c.Hkv * tokens;
    CK((cudaError_t)entries[0](q, kc, vc, ptr, idx, last, ref, c.B, c.Hq, c.Hkv, c.pool, st));
    CK(cudaStreamSynchronize(st));
    std::vector<__nv_bfloat16> hr(qn), ho(qn);
    CK(cudaMemcpy(hr.data(), ref, qn * 2, cudaMemcpyDeviceToHost));
    std::printf("%-20s B=%d G=%d KV %6.1f MiB:", c.name, c.B, c.Hq / c.Hkv, kv_bytes / 1048576.0);
    std::fflush(stdout);
    for (size_t e = 1; e < entries.size(); ++e) {
      CK(cudaMemset(out, 0xFF, qn * 2));
      const int rc = entries[e](q, kc, vc, ptr, idx, last, out, c.B, c.Hq, c.Hkv, c.pool, st);
      const cudaError_t se = cudaStreamSynchronize(st);
      if (rc != 0 || se != cudaSuccess) {
        std::printf(" | %s rc=%d sync=%s", label(sos[e]).c_str(), rc, cudaGetErrorString(se));
        fails++;
        if (se != cudaSuccess) {  // a sticky error: nothing later in this process can run
          std::printf("\n");
          return 1;
        }
        continue;
      }
      CK(cudaMemcpy(ho.data(), out, qn * 2, cudaMemcpyDeviceToHost));
      int64_t bad = 0, first = -1;
      double worst = 0;
      for (int64_t i = 0; i < qn; ++i) {
        const double g = bf(ho[i]), w = bf(hr[i]), err = std::fabs(g - w);
        if (!(err <= 1e-3 + 1e-2 * std::fabs(w))) {
          if (first < 0) first = i;
          ++bad;
        }
        if (err > worst || std::isnan(err)) worst = std::isnan(err) ? INFINITY : err;
      }
      std::printf(" | %s %s", label(sos[e]).c_str(), bad ? "WRONG" : "ok");
      if (bad) {
        fails++;
        std::printf(" (max|err| %.3g, %lld bad; first b=%lld h=%lld d=%lld: %g vs %g)", worst, (long long)bad,
                    (long long)(first / 128 / c.Hq), (long long)(first / 128 % c.Hq), (long long)(first % 128),
                    bf(ho[first]), bf(hr[first]));
      }
      if (time && label(sos[e])[0] == 'L') {  // the baseline is checked, not timed
        std::vector<float> ms;
        cudaEvent_t a, z;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&z));
        for (int s = 0; s < 13; ++s) {
          CK(cudaMemsetAsync(flush, s, 256 << 20, st));
          CK(cudaStreamSynchronize(st));
          CK(cudaEventRecord(a, st));
          entries[e](q, kc, vc, ptr, idx, last, out, c.B, c.Hq, c.Hkv, c.pool, st);
          CK(cudaEventRecord(z, st));
          CK(cudaEventSynchronize(z));
          float m;
          CK(cudaEventElapsedTime(&m, a, z));
          if (s >= 3) ms.push_back(m);
        }
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2] * 1e-3;
        std::printf(" %.1fus %.0fGB/s", med * 1e6, kv_bytes / med / 1e9);
      }
      std::fflush(stdout);
    }
    std::printf("\n");
    cudaFree(q); cudaFree(kc); cudaFree(vc); cudaFree(out); cudaFree(ref); cudaFree(ptr); cudaFree(idx); cudaFree(last);
  }
  if (time) {  // copy bandwidth for scale: a 1 GiB device-to-device copy, bytes read + written
    void *a, *z;
    CK(cudaMalloc(&a, 1 << 30));
    CK(cudaMalloc(&z, 1 << 30));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float best = 1e9;
    for (int i = 0; i < 5; ++i) {
      CK(cudaEventRecord(e0, st));
      CK(cudaMemcpyAsync(z, a, 1 << 30, cudaMemcpyDeviceToDevice, st));
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float m;
      CK(cudaEventElapsedTime(&m, e0, e1));
      best = std::min(best, m);
    }
    std::printf("copy bandwidth (1 GiB D2D, read + write): %.0f GB/s\n", 2.0 * (1 << 30) / (best * 1e-3) / 1e9);
  }
  if (fails) std::printf("FAILED: %d wrong\n", fails); else std::printf("all correct\n");
  return fails ? 1 : 0;
}
