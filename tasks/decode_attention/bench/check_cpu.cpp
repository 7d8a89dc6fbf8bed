// Runs one decode_attention kernel (rewritten for the CPU emulation by run_cpu_check.sh) on small
// paged caches and compares it with a double-precision evaluation of the task's definition.
// Usage: check_cpu B Hq Hkv pool mean_pages pattern seed   (pattern: 0 uniform, 1 with empty sequences
// and 1-page ones, 2 pages shared between sequences and unsorted)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

struct bf16;
extern "C" int d2k_decode_attention(const bf16*, const bf16*, const bf16*, const int*, const int*, const int*, bf16*,
                                    int64_t, int64_t, int64_t, int64_t, void*);

static float to_f(uint16_t b) { uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static uint16_t to_bf(float f) { uint32_t u; std::memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return uint16_t(u >> 16); }

int main(int argc, char** argv) {
  if (argc < 8) return 2;
  const int B = atoi(argv[1]), Hq = atoi(argv[2]), Hkv = atoi(argv[3]), pool = atoi(argv[4]);
  const int mean = atoi(argv[5]), pattern = atoi(argv[6]);
  std::mt19937_64 rng(atoi(argv[7]));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int G = Hq / Hkv;
  std::vector<uint16_t> q((size_t)B * Hq * 128), kc((size_t)pool * Hkv * 2048), vc(kc.size()), out(q.size(), 0xFFFF);
  for (auto& x : q) x = to_bf(nd(rng));
  for (auto& x : kc) x = to_bf(nd(rng));
  for (auto& x : vc) x = to_bf(nd(rng));
  std::vector<int> ptr{0}, idx, last;
  for (int b = 0; b < B; ++b) {
    int n = 1 + (int)(rng() % (2 * mean));
    if (pattern == 1 && rng() % 4 == 0) n = (int)(rng() % 2);
    for (int i = 0; i < n; ++i) idx.push_back((int)(rng() % (pattern == 2 ? std::min(pool, 5) : pool)));
    ptr.push_back((int)idx.size());
    last.push_back(1 + (int)(rng() % 16));
  }
  // Slots past a sequence's end hold NaN in last pages that no other position uses: a kernel must
  // not let them into its result.
  std::vector<int> uses(pool, 0);
  for (int p : idx) ++uses[p];
  for (int b = 0; b < B; ++b) {
    const int n = ptr[b + 1] - ptr[b];
    if (n == 0 || uses[idx[ptr[b + 1] - 1]] != 1) continue;
    const int page = idx[ptr[b + 1] - 1];
    for (int j = 0; j < Hkv; ++j)
      for (int s = last[b]; s < 16; ++s)
        for (int d = 0; d < 128; ++d) {
          kc[(((size_t)page * Hkv + j) * 16 + s) * 128 + d] = 0x7fc0;
          vc[(((size_t)page * Hkv + j) * 16 + s) * 128 + d] = 0x7fc0;
        }
  }
  if (idx.empty()) idx.push_back(0);
  const int rc = d2k_decode_attention((const bf16*)q.data(), (const bf16*)kc.data(), (const bf16*)vc.data(), ptr.data(),
                                      idx.data(), last.data(), (bf16*)out.data(), B, Hq, Hkv, pool, nullptr);
  if (rc != 0) { std::printf("rc=%d\n", rc); return 1; }
  long bad = 0;
  double worst = 0;
  for (int b = 0; b < B; ++b) {
    const int n = ptr[b + 1] - ptr[b];
    const int L = n ? 16 * (n - 1) + last[b] : 0;
    for (int h = 0; h < Hq; ++h) {
      const int j = h / G;
      std::vector<double> s(L);
      double m = -INFINITY;
      for (int t = 0; t < L; ++t) {
        const size_t row = (((size_t)idx[ptr[b] + t / 16] * Hkv + j) * 16 + t % 16) * 128;
        double dot = 0;
        for (int d = 0; d < 128; ++d) dot += (double)to_f(q[((size_t)b * Hq + h) * 128 + d]) * to_f(kc[row + d]);
        s[t] = dot / std::sqrt(128.0);
        m = std::max(m, s[t]);
      }
      double sum = 0;
      std::vector<double> acc(128, 0.0);
      for (int t = 0; t < L; ++t) {
        const double p = std::exp(s[t] - m);
        sum += p;
        const size_t row = (((size_t)idx[ptr[b] + t / 16] * Hkv + j) * 16 + t % 16) * 128;
        for (int d = 0; d < 128; ++d) acc[d] += p * to_f(vc[row + d]);
      }
      for (int d = 0; d < 128; ++d) {
        const double want = L ? (double)to_f(to_bf((float)(acc[d] / sum))) : 0.0;
        const double got = to_f(out[((size_t)b * Hq + h) * 128 + d]);
        const double err = std::fabs(got - want);
        if (!(err <= 1e-3 + 1e-2 * std::fabs(want))) {
          if (bad < 3) std::printf("  b=%d h=%d d=%d (L=%d): got %g want %g\n", b, h, d, L, got, want);
          ++bad;
        }
        if (!(err <= worst)) worst = err;
      }
    }
  }
  std::printf("B=%d Hq=%d Hkv=%d pool=%d mean=%d pattern=%d: %s (max |err| %.3g)\n", B, Hq, Hkv, pool, mean, pattern,
              bad ? "WRONG" : "ok", worst);
  return bad ? 1 : 0;
}
