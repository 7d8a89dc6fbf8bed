#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>
#include "cuda_runtime.h"
extern "C" int d2k_radix_sort(const uint32_t* keys_in, const uint32_t* vals_in, uint32_t* keys_out, uint32_t* vals_out, int64_t n, cudaStream_t stream);
int check(int64_t n, int mode, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> k(n), v(n), ko(n, 0xdeadbeef), vo(n, 0xdeadbeef);
  for (int64_t i = 0; i < n; ++i) {
    k[i] = rng();
    if (mode == 1) k[i] &= 0xf00f000fu;     // few distinct keys: stability under heavy ties
    if (mode == 2) k[i] = 0x12345678u;      // all equal
    v[i] = static_cast<uint32_t>(i) ^ 0x5a5a5a5au;
  }
  int rc = d2k_radix_sort(k.data(), v.data(), ko.data(), vo.data(), n, nullptr);
  if (rc) { std::printf("rc %d\n", rc); return 1; }
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return k[a] < k[b]; });
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (ko[i] != k[order[i]] || vo[i] != v[order[i]]) { if (bad < 5) std::printf("  at %ld: got (%08x,%08x) want (%08x,%08x)\n", (long)i, ko[i], vo[i], k[order[i]], v[order[i]]); ++bad; }
  std::printf("n %ld mode %d: %s (%ld bad)\n", (long)n, mode, bad ? "FAIL" : "ok", (long)bad);
  return bad ? 1 : 0;
}
int main(int argc, char** argv) {
  int f = 0;
  f += check(1, 0, 1);
  f += check(5, 0, 2);
  f += check(2048, 0, 3);
  f += check(2049, 0, 4);
  f += check(10007, 0, 5);
  f += check(30001, 1, 6);
  f += check(4099, 2, 7);
  f += check(8192, 1, 8);
  return f ? 1 : 0;
}
