// Driver of tasks/grouped_gemm/bench/run_cpu_check.sh: runs d2k_grouped_gemm (a task kernel built for
// the CPU emulation) on random bf16 X (normal) and W (uniform in [-1, 1]) with uneven group sizes
// (some groups empty, one group holding a quarter of the rows) and compares every output with the
// definition evaluated in double and rounded once to bf16, under the task's tolerance (atol 5e-2,
// rtol 1.6e-2); counts outputs more than one bf16 ulp from the correctly rounded value; checks
// that every output was written (Y starts as NaN) and nothing past the end of Y.
// Usage: check_grouped_gemm G T N K seed
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
struct bf16s { uint16_t v; };
static float to_f(bf16s b) { uint32_t u = uint32_t(b.v) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static bf16s to_b(float f) { uint32_t u; std::memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return bf16s{uint16_t(u >> 16)}; }
extern "C" int d2k_grouped_gemm(const bf16s* X, const bf16s* W, const int* offsets, bf16s* Y, int64_t T,
                                int64_t G, int64_t N, int64_t K, void* stream);
int main(int argc, char** argv) {
  if (argc != 6) return 2;
  const int64_t G = atoll(argv[1]), T = atoll(argv[2]), N = atoll(argv[3]), K = atoll(argv[4]);
  std::mt19937 rng(static_cast<unsigned>(atoi(argv[5])));
  // Group sizes: weights in [0, 1) with every third group empty and group G/2 heavy.
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> wt(G);
  for (int64_t g = 0; g < G; ++g) wt[g] = (g % 3 == 1) ? 0.0 : u(rng);
  if (G > 1) wt[G / 2] += G / 4.0;
  double sum = 0;
  for (double v : wt) sum += v;
  std::vector<int> off(G + 1, 0);
  double acc = 0;
  for (int64_t g = 0; g < G; ++g) {
    acc += wt[g];
    off[g + 1] = sum > 0 ? static_cast<int>(std::llround(T * acc / sum)) : static_cast<int>(T);
  }
  off[G] = static_cast<int>(T);
  std::normal_distribution<float> dx(0.0f, 1.0f);
  std::uniform_real_distribution<float> dw(-1.0f, 1.0f);
  std::vector<bf16s> X(T * K), W(G * N * K), Y(T * N + 64, bf16s{0x7fc0});
  for (auto& v : X) v = to_b(dx(rng));
  for (auto& v : W) v = to_b(dw(rng));
  const int rc = d2k_grouped_gemm(X.data(), W.data(), off.data(), Y.data(), T, G, N, K, nullptr);
  int64_t bad = 0, far = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t t = off[g]; t < off[g + 1]; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0.0;
        for (int64_t k = 0; k < K; ++k) s += static_cast<double>(to_f(X[t * K + k])) * to_f(W[(g * N + n) * K + k]);
        const float want = to_f(to_b(static_cast<float>(s)));
        const float got = to_f(Y[t * N + n]);
        if (!(std::fabs(got - want) <= 5e-2 + 1.6e-2 * std::fabs(want))) {
          if (bad < 3) std::printf("  mismatch at group %lld row %lld col %lld: %g vs %g\n", (long long)g, (long long)t,
                                   (long long)n, got, want);
          ++bad;
        }
        if (std::fabs(got - want) > std::ldexp(1.0, std::ilogb(std::fabs(want) + 1e-30) - 7) + 1e-6) ++far;
      }
  for (size_t i = T * N; i < Y.size(); ++i) if (Y[i].v != 0x7fc0) ++bad;
  std::printf("grouped_gemm G=%lld T=%lld N=%lld K=%lld rc=%d bad=%lld beyond_1ulp=%lld\n", (long long)G, (long long)T,
              (long long)N, (long long)K, rc, (long long)bad, (long long)far);
  return bad != 0 || rc != 0;
}
