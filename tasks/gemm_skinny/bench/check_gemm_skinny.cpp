// Driver of tasks/gemm_skinny/bench/run_cpu_check.sh: runs d2k_gemm_skinny (a task kernel built for
// the CPU shim) on random bf16 x (normal) and W (uniform in [-0.05, 0.05]) and compares every output
// with the definition evaluated in double and rounded once to bf16, under the task's tolerance
// (atol 2e-3, rtol 1.6e-2); counts outputs that differ from the correctly rounded value by more
// than one bf16 ulp; checks that nothing is written past the end of y.
// Usage: check_gemm_skinny M N K
#include <algorithm>
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
extern "C" int d2k_gemm_skinny(const bf16s* x, const bf16s* W, bf16s* y, int64_t M, int64_t N, int64_t K, void* stream);
int main(int argc, char** argv) {
  if (argc != 4) return 2;
  const int64_t M = atoll(argv[1]), N = atoll(argv[2]), K = atoll(argv[3]);
  std::mt19937 rng(17);
  std::normal_distribution<float> dx(0.0f, 1.0f);
  std::uniform_real_distribution<float> dw(-0.05f, 0.05f);
  std::vector<bf16s> x(M * K), W(N * K), y(M * N + 16, bf16s{0x7fc0});
  for (auto& v : x) v = to_b(dx(rng));
  for (auto& v : W) v = to_b(dw(rng));
  // CHECK_CALLS=n calls the kernel n times (y refilled with NaN before each) and checks the last:
  // state a kernel keeps between calls (a workspace it must leave clean) is exercised.
  const int calls = std::getenv("CHECK_CALLS") ? std::atoi(std::getenv("CHECK_CALLS")) : 1;
  int rc = 0;
  for (int c = 0; c < calls && rc == 0; ++c) {
    std::fill(y.begin(), y.begin() + M * N, bf16s{0x7fc0});
    rc = d2k_gemm_skinny(x.data(), W.data(), y.data(), M, N, K, nullptr);
  }
  int64_t bad = 0, far = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(to_f(x[m * K + k])) * to_f(W[n * K + k]);
      const float want = to_f(to_b(static_cast<float>(s)));
      const float got = to_f(y[m * N + n]);
      if (!(std::fabs(got - want) <= 2e-3 + 1.6e-2 * std::fabs(want))) {
        if (bad < 3) std::printf("  mismatch at (%lld,%lld): %g vs %g\n", (long long)m, (long long)n, got, want);
        ++bad;
      }
      if (std::fabs(got - want) > std::ldexp(1.0, std::ilogb(std::fabs(want) + 1e-30) - 7) + 1e-6) ++far;
    }
  for (size_t i = M * N; i < y.size(); ++i) if (y[i].v != 0x7fc0) ++bad;
  std::printf("gemm_skinny M=%lld N=%lld K=%lld rc=%d bad=%lld beyond_1ulp=%lld\n", (long long)M, (long long)N,
              (long long)K, rc, (long long)bad, (long long)far);
  return bad != 0 || rc != 0;
}
