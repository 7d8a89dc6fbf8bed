#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "cuda_runtime.h"
extern "C" int d2k_topk(const float* x, float* values, int* indices, int64_t rows, int64_t vocab, int64_t k, cudaStream_t stream);
static unsigned okey(float v) { unsigned u; std::memcpy(&u, &v, 4); return (u & 0x80000000u) ? ~u : (u | 0x80000000u); }
int check(int rows, int vocab, int k, int mode, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> x(static_cast<size_t>(rows) * vocab + 1);
  float* xp = x.data() + (mode == 3 ? 1 : 0);  // mode 3: a misaligned base (row starts at 4-byte offsets)
  for (int64_t i = 0; i < int64_t(rows) * vocab; ++i) {
    float v = nd(rng);
    if (mode == 1) v = std::round(v * 2.f) / 2.f;   // many ties
    if (mode == 2) v = 1.25f;                       // all equal (fallback path)
    if (mode == 5) v = 1.0f + std::fabs(v) * 1e-4f;  // one top-11-bit bin: fallback, distinct values
    if (mode == 6) v = static_cast<float>(i % vocab) * 0.25f;           // ascending row: the sample's threshold is too low (overflow)
    if (mode == 7) v = -static_cast<float>(i % vocab) * 0.25f;          // descending row: too high (fewer than k candidates)
    if (mode == 4) v = (i % 7 == 0) ? -0.0f : (i % 7 == 1 ? 0.0f : -std::fabs(v));  // zeros and negatives
    if (mode == 8) v = (i % 97 == 0) ? ((i / 97) % 2 ? -0.0f : 0.0f) : v - 9.0f;  // the threshold near zero
    xp[i] = v;
  }
  std::vector<float> vals(size_t(rows) * k, NAN);
  std::vector<int> idx(size_t(rows) * k, -7);
  int rc = d2k_topk(xp, vals.data(), idx.data(), rows, vocab, k, nullptr);
  if (rc != 0) { std::printf("rc=%d\n", rc); return 1; }
  int bad = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<int> order(vocab);
    for (int c = 0; c < vocab; ++c) order[c] = c;
    const float* row = xp + int64_t(r) * vocab;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return okey(row[a]) > okey(row[b]); });
    for (int j = 0; j < k; ++j) {
      const float ev = row[order[j]];
      if (idx[size_t(r) * k + j] != order[j] || std::memcmp(&vals[size_t(r) * k + j], &ev, 4) != 0) {
        if (bad < 5) std::printf("  row %d j %d: got (%g, %d) want (%g, %d)\n", r, j, vals[size_t(r)*k+j], idx[size_t(r)*k+j], ev, order[j]);
        ++bad;
      }
    }
  }
  std::printf("rows %d vocab %d k %d mode %d: %s (%d bad)\n", rows, vocab, k, mode, bad ? "FAIL" : "ok", bad);
  return bad ? 1 : 0;
}
int main() {
  int f = 0;
  f += check(3, 2000, 50, 0, 1);
  f += check(2, 1031, 1024, 0, 2);
  f += check(2, 5003, 1, 0, 3);
  f += check(2, 20011, 1024, 3, 4);
  f += check(2, 9001, 300, 1, 5);
  f += check(1, 10007, 1000, 2, 6);
  f += check(2, 3001, 64, 4, 7);
  f += check(1, 3, 3, 3, 8);
  f += check(2, 50257, 50, 3, 9);
  f += check(2, 12007, 1024, 5, 10);
  f += check(1, 9000, 37, 5, 11);
  f += check(2, 151936, 50, 0, 12);     // Qwen rows: the one-pass path of layer 3
  f += check(1, 151936, 1024, 0, 13);
  f += check(1, 128257, 1024, 3, 14);
  f += check(1, 30011, 100, 6, 15);
  f += check(1, 30011, 100, 7, 16);
  f += check(2, 20011, 64, 4, 17);      // one pass, negative threshold: layer 3's key test
  f += check(2, 151936, 50, 8, 18);     // one pass, threshold near zero (float test or key test)
  f += check(1, 151936, 1024, 8, 19);
  return f ? 1 : 0;
}
