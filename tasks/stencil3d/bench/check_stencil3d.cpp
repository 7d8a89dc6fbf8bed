#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <random>
#include <vector>
extern "C" int d2k_stencil3d(const float* in, float* out, int64_t nx, int64_t ny, int64_t nz, void* stream);
int main(int argc, char** argv) {
  const int64_t nx = atoll(argv[1]), ny = atoll(argv[2]), nz = atoll(argv[3]);
  const int64_t n = nx * ny * nz;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> in(n + 8), out(n + 8, NAN);
  for (auto& v : in) v = d(rng);
  int rc = d2k_stencil3d(in.data(), out.data(), nx, ny, nz, nullptr);
  int64_t bad = 0;
  for (int64_t z = 0; z < nz; ++z)
    for (int64_t y = 0; y < ny; ++y)
      for (int64_t x = 0; x < nx; ++x) {
        const int64_t i = (z * ny + y) * nx + x;
        double r = in[i];
        if (x > 0 && x < nx - 1 && y > 0 && y < ny - 1 && z > 0 && z < nz - 1)
          r = 0.25 * in[i] + 0.125 * ((double)in[i - 1] + in[i + 1] + in[i - nx] + in[i + nx] + in[i - nx * ny] + in[i + nx * ny]);
        const float ref = (float)r;
        if (!(std::fabs(out[i] - ref) <= 1e-6 + 1e-6 * std::fabs(ref))) {
          if (bad < 3) std::printf("  mismatch at (%lld,%lld,%lld): %g vs %g\n", (long long)z, (long long)y, (long long)x, out[i], ref);
          ++bad;
        }
      }
  for (int64_t i = n; i < n + 8; ++i) if (!std::isnan(out[i])) ++bad;  // no writes past the end
  std::printf("stencil %lldx%lldx%lld rc=%d bad=%lld\n", (long long)nx, (long long)ny, (long long)nz, rc, (long long)bad);
  return bad != 0 || rc != 0;
}
