// GPU test (label gpu): the GPU-resident comparison kernel (sandbox/runner/gpu_slots.hpp) gives
// exactly the parent's CPU comparison (sandbox/eval/compare.hpp) for every dtype: mismatches,
// nonfinite, max_abs, max_rel and the first bad index with its values; and a VMM slot allocation
// exports a descriptor that imports and maps in this process. Skips where no GPU is.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>

#include "catch.hpp"
#include "sandbox/eval/compare.hpp"
#include "sandbox/runner/gpu_slots.hpp"
#include "skip.hpp"

using namespace d2k::runner;

namespace {
bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    d2k::test::skip("gpu compare: no CUDA GPU on this machine; runs on the H200 (scripts/gpu-check.sh)");
    return false;
  }
  return true;
}

// Writes value v as dtype at element i (the inverse of compare.hpp's element(), close enough for
// test data: floats are rounded by the hardware conversions below).
void put(std::vector<char>& buf, Dtype d, std::size_t i, double v) {
  char* p = buf.data() + i * dtype_size(d);
  switch (d) {
    case Dtype::f32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case Dtype::f64: std::memcpy(p, &v, 8); break;
    case Dtype::bf16: {
      float f = static_cast<float>(v);
      std::uint32_t b;
      std::memcpy(&b, &f, 4);
      const std::uint16_t h = static_cast<std::uint16_t>(b >> 16);
      std::memcpy(p, &h, 2);
      break;
    }
    case Dtype::f16: {  // via a simple round-toward-zero encoder for normal values, NaN and Inf
      std::uint16_t h;
      if (std::isnan(v)) h = 0x7E00;
      else if (std::isinf(v)) h = v > 0 ? 0x7C00 : 0xFC00;
      else {
        const int sign = v < 0;
        double a = std::fabs(v);
        int e = 0;
        const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
        int exp = e + 14;
        if (a == 0 || exp <= 0) h = static_cast<std::uint16_t>(sign << 15);
        else if (exp >= 31) h = static_cast<std::uint16_t>((sign << 15) | 0x7BFF);
        else h = static_cast<std::uint16_t>((sign << 15) | (exp << 10) | (static_cast<int>((m * 2 - 1) * 1024) & 0x3FF));
      }
      std::memcpy(p, &h, 2);
      break;
    }
    case Dtype::i32: { std::int32_t x = static_cast<std::int32_t>(v); std::memcpy(p, &x, 4); break; }
    case Dtype::i64: { std::int64_t x = static_cast<std::int64_t>(v); std::memcpy(p, &x, 8); break; }
    case Dtype::u8: { std::uint8_t x = static_cast<std::uint8_t>(v); std::memcpy(p, &x, 1); break; }
    case Dtype::u32: { std::uint32_t x = static_cast<std::uint32_t>(v); std::memcpy(p, &x, 4); break; }
  }
}

TensorCheck on_gpu(const std::vector<char>& got, const std::vector<char>& want, Dtype d, std::size_t n, double atol,
                   double rtol) {
  void *g = nullptr, *w = nullptr;
  REQUIRE(cudaMalloc(&g, got.size()) == cudaSuccess);
  REQUIRE(cudaMalloc(&w, want.size()) == cudaSuccess);
  REQUIRE(cudaMemcpy(g, got.data(), got.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(w, want.data(), want.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  TensorCheck c;
  REQUIRE(compare_on_gpu(g, w, d, n, atol, rtol, nullptr, c) == cudaSuccess);
  cudaFree(g);
  cudaFree(w);
  return c;
}

void same(const TensorCheck& gpu, const TensorCheck& cpu) {
  CHECK(gpu.count == cpu.count);
  CHECK(gpu.mismatches == cpu.mismatches);
  CHECK(gpu.nonfinite == cpu.nonfinite);
  CHECK(gpu.max_abs == cpu.max_abs);
  CHECK(gpu.max_rel == cpu.max_rel);
  CHECK(gpu.first_bad == cpu.first_bad);
  if (cpu.first_bad >= 0) {
    CHECK((gpu.first_bad_got == cpu.first_bad_got || (std::isnan(gpu.first_bad_got) && std::isnan(cpu.first_bad_got))));
    CHECK((gpu.first_bad_want == cpu.first_bad_want || (std::isnan(gpu.first_bad_want) && std::isnan(cpu.first_bad_want))));
  }
}
}  // namespace

TEST_CASE("gpu compare equals the parent's CPU comparison for every dtype", "[gpu][resident]") {
  if (!have_gpu()) return;
  std::mt19937_64 rng(42);
  const std::size_t n = 1000003;
  for (Dtype d : d2k::tasks::kDtypes) {
    INFO("dtype " << dtype_name(d));
    const bool fl = is_float(d);
    std::vector<char> want(n * dtype_size(d)), got(n * dtype_size(d));
    std::uniform_real_distribution<double> u(fl ? -4.0 : 0.0, fl ? 4.0 : 200.0);
    for (std::size_t i = 0; i < n; ++i) put(want, d, i, fl ? u(rng) : std::floor(u(rng)));
    got = want;
    // Bit-identical: nothing to report.
    same(on_gpu(got, want, d, n, fl ? 1e-3 : 0, fl ? 1e-3 : 0), compare_tensors(got.data(), want.data(), d, n, fl ? 1e-3 : 0, fl ? 1e-3 : 0));
    // Perturbed: small errors within tolerance, large ones beyond, NaN/Inf on both sides.
    std::uniform_int_distribution<std::size_t> at(0, n - 1);
    for (int k = 0; k < 2000; ++k) {
      const std::size_t i = at(rng);
      const double v = element(want.data(), d, i);
      put(got, d, i, fl ? v * (1 + 1e-4) + 1e-4 : v + 1);
    }
    for (int k = 0; k < 50; ++k) put(got, d, at(rng), fl ? 1e3 : 7);
    if (fl) {
      for (int k = 0; k < 20; ++k) put(got, d, at(rng), std::nan(""));
      for (int k = 0; k < 20; ++k) put(got, d, at(rng), INFINITY);
      for (int k = 0; k < 10; ++k) {
        const std::size_t i = at(rng);
        put(want, d, i, k % 2 ? std::nan("") : -INFINITY);
        if (k % 4 == 0) put(got, d, i, k % 2 ? std::nan("") : -INFINITY);  // matched in kind
      }
    }
    for (const auto& [atol, rtol] : std::vector<std::pair<double, double>>{{0, 0}, {1e-3, 1e-3}, {1e-5, 0}, {0, 1e-2}}) {
      INFO("atol " << atol << " rtol " << rtol);
      const TensorCheck cpu = compare_tensors(got.data(), want.data(), d, n, atol, rtol);
      same(on_gpu(got, want, d, n, atol, rtol), cpu);
      CHECK(cpu.mismatches > 0);
    }
  }
}

TEST_CASE("output slots: a VMM allocation exports a descriptor that maps again", "[gpu][resident]") {
  if (!have_gpu()) return;
  SharedSlots owner;
  int fd = -1;
  REQUIRE(owner.create(5u << 20, fd) == "");
  REQUIRE(fd >= 0);
  CHECK(owner.size() >= (5u << 20));
  std::vector<unsigned char> host(owner.size());
  REQUIRE(cudaMemcpy(host.data(), owner.data(), host.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(host.front() == 0xFF);  // poisoned
  CHECK(host.back() == 0xFF);
  SharedSlots user;
  REQUIRE(user.import(fd, owner.size()) == "");  // closes fd
  REQUIRE(cudaMemset(user.data() + 4096, 0x5A, 4096) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(host.data(), owner.data(), 3 * 4096, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(host[4095] == 0xFF);
  CHECK(host[4096] == 0x5A);
  CHECK(host[8191] == 0x5A);
  CHECK(host[8192] == 0xFF);
  std::printf("output slots: %llu bytes exported and mapped twice\n", static_cast<unsigned long long>(owner.size()));
}

TEST_CASE("input arena: a mapping asked read-only reads the owner's bytes; the driver says whether it is read-only",
          "[gpu][resident]") {
  if (!have_gpu()) return;
  SharedSlots owner;
  int fd = -1;
  REQUIRE(owner.create(3u << 20, fd) == "");
  REQUIRE(cudaMemset(owner.data() + 8192, 0x3C, 4096) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  SharedSlots user;
  REQUIRE(user.import(fd, owner.size(), true) == "");  // closes fd
  std::vector<unsigned char> host(3 * 4096);
  REQUIRE(cudaMemcpy(host.data(), user.data() + 4096, host.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(host[4095] == 0xFF);
  CHECK(host[4096] == 0x3C);
  CHECK(host[8191] == 0x3C);
  CHECK(host[8192] == 0xFF);
  // A write through a read-only mapping would fault the context; the answer is printed, not tried.
  std::printf("input arena: imported mapping is %s\n", user.read_only() ? "read-only" : "read-write (read-only refused)");
  user.release();
  CHECK_FALSE(user.mapped());
}
