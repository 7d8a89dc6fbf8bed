// Driver of tasks/w4a16_gemm/bench/run_cpu_check.sh: runs d2k_w4a16_gemm (a task kernel built for the
// CPU shim) on random bf16 x (normal), random packed codes (every byte value) and bf16 scales
// (uniform in [0.001, 0.01]), and compares every output with the definition evaluated in double
// (w = bf16((q - 8) * s), low nibble first; the sum of x * w in double, rounded once to bf16) under
// the task's tolerance (atol 2e-3, rtol 1.6e-2); counts outputs that differ from the correctly
// rounded value by more than one bf16 ulp; checks that nothing is written past the end of y.
// EMU_SMS=n: the shim reports n SMs (default 3), so the kernels pick the slicing they would pick for
// a larger N on the H200. EMU_MAX_FULL_PHASES=n (L3 only): fail if a block completed more than n
// phases of one ring slot's "full" barrier, i.e. refilled a slot (n = 1: no refills).
// Usage: check_w4a16_gemm M N K
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
extern "C" int d2k_w4a16_gemm(const bf16s* x, const uint8_t* Wq, const bf16s* scales, bf16s* y, int64_t M, int64_t N,
                              int64_t K, void* stream);
extern int g_sms __attribute__((weak));                  // cuda_cpu_shim.hpp (absent if unused)
extern "C" unsigned emu_full_phases() __attribute__((weak));  // cuda_cpu_extra.hpp, L3 builds only
int main(int argc, char** argv) {
  if (argc != 4) return 2;
  const int64_t M = atoll(argv[1]), N = atoll(argv[2]), K = atoll(argv[3]);
  std::mt19937 rng(17);
  std::normal_distribution<float> dx(0.0f, 1.0f);
  std::uniform_int_distribution<int> dq(0, 255);
  std::uniform_real_distribution<float> ds(0.001f, 0.01f);
  // 16-byte aligned buffers (TMA needs them; cudaMalloc gives 256)
  std::vector<uint64_t> xb((M * K * 2 + 15) / 8 + 2), wb((N * K / 2 + 15) / 8 + 2);
  bf16s* x = reinterpret_cast<bf16s*>(xb.data());
  uint8_t* W = reinterpret_cast<uint8_t*>(wb.data());
  std::vector<bf16s> s(N * (K / 128)), y(M * N + 16, bf16s{0x7fc0});
  for (int64_t i = 0; i < M * K; ++i) x[i] = to_b(dx(rng));
  for (int64_t i = 0; i < N * K / 2; ++i) W[i] = static_cast<uint8_t>(dq(rng));
  for (auto& v : s) v = to_b(ds(rng));
  if (const char* e = std::getenv("EMU_SMS"); e != nullptr && &g_sms != nullptr) g_sms = std::atoi(e);
  const int rc = d2k_w4a16_gemm(x, W, s.data(), y.data(), M, N, K, nullptr);
  std::vector<double> w(K);
  int64_t bad = 0, far = 0;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      const unsigned byte = W[n * (K / 2) + k / 2];
      const int q = (k & 1) ? int(byte >> 4) : int(byte & 15u);
      w[k] = to_f(to_b(float(q - 8) * to_f(s[n * (K / 128) + k / 128])));
    }
    for (int64_t m = 0; m < M; ++m) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(to_f(x[m * K + k])) * w[k];
      const float want = to_f(to_b(static_cast<float>(acc)));
      const float got = to_f(y[m * N + n]);
      if (!(std::fabs(got - want) <= 2e-3 + 1.6e-2 * std::fabs(want))) {
        if (bad < 3) std::printf("  mismatch at (%lld,%lld): %g vs %g\n", (long long)m, (long long)n, got, want);
        ++bad;
      }
      if (std::fabs(got - want) > std::ldexp(1.0, std::ilogb(std::fabs(want) + 1e-30) - 7) + 1e-6) ++far;
    }
  }
  for (size_t i = M * N; i < y.size(); ++i) if (y[i].v != 0x7fc0) ++bad;
  const unsigned phases = emu_full_phases ? emu_full_phases() : 0;
  const char* most = std::getenv("EMU_MAX_FULL_PHASES");
  const bool refilled = most != nullptr && phases > static_cast<unsigned>(std::atoi(most));
  std::printf("w4a16_gemm M=%lld N=%lld K=%lld rc=%d bad=%lld beyond_1ulp=%lld full_phases=%u%s\n", (long long)M,
              (long long)N, (long long)K, rc, (long long)bad, (long long)far, phases,
              refilled ? " (a block refilled a ring slot)" : "");
  return bad != 0 || rc != 0 || refilled;
}
