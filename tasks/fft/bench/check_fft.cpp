// Driver of tasks/fft/bench/run_cpu_check.sh: runs d2k_fft (a task kernel built for the CPU shim) on
// batch x n random complex values and compares every output with a direct O(n^2) DFT in long
// double under the task's tolerance (atol 1e-2, rtol 1e-4); also checks that nothing is written past
// the end of y. Usage: check_fft BATCH N
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
extern "C" int d2k_fft(const float* x, float* y, int64_t batch, int64_t n, void* stream);
int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const int64_t batch = atoll(argv[1]), n = atoll(argv[2]);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> x(2 * batch * n), y(2 * batch * n + 16, NAN);
  for (auto& v : x) v = d(rng);
  const int rc = d2k_fft(x.data(), y.data(), batch, n, nullptr);
  std::vector<long double> cs(n), sn(n);
  for (int64_t k = 0; k < n; ++k) {
    const long double a = -2.0L * 3.14159265358979323846264338327950288L * k / n;
    cs[k] = std::cos(a);
    sn[k] = std::sin(a);
  }
  int64_t bad = 0;
  double worst = 0.0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t k = 0; k < n; ++k) {
      long double re = 0, im = 0;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t e = (j * k) % n;
        const long double xr = x[2 * (b * n + j)], xi = x[2 * (b * n + j) + 1];
        re += xr * cs[e] - xi * sn[e];
        im += xr * sn[e] + xi * cs[e];
      }
      const float got[2] = {y[2 * (b * n + k)], y[2 * (b * n + k) + 1]};
      const double want[2] = {static_cast<double>(re), static_cast<double>(im)};
      for (int c = 0; c < 2; ++c) {
        const double err = std::fabs(got[c] - want[c]);
        if (err > worst || std::isnan(got[c])) worst = std::isnan(got[c]) ? INFINITY : err;
        if (!(err <= 1e-2 + 1e-4 * std::fabs(want[c]))) {
          if (bad < 3) std::printf("  mismatch at transform %lld bin %lld.%d: %g vs %g\n", (long long)b, (long long)k, c, got[c], want[c]);
          ++bad;
        }
      }
    }
  for (size_t i = 2 * batch * n; i < y.size(); ++i) if (!std::isnan(y[i])) ++bad;
  std::printf("fft batch=%lld n=%lld rc=%d bad=%lld max|err|=%.3g\n", (long long)batch, (long long)n, rc, (long long)bad, worst);
  return bad != 0 || rc != 0;
}
