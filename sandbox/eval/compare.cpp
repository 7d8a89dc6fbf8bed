#include "sandbox/eval/compare.hpp"

#include <cmath>
#include <cstring>

namespace d2k::runner {
namespace {

double half_to_double(std::uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  double v;
  if (exp == 0) v = std::ldexp(mant, -24);
  else if (exp == 31) v = mant == 0 ? INFINITY : NAN;
  else v = std::ldexp(mant + 1024, exp - 25);
  return sign != 0 ? -v : v;
}

double bf16_to_double(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <class T>
T load(const void* data, std::uint64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(data) + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

double element(const void* data, Dtype dtype, std::uint64_t i) {
  switch (dtype) {
    case Dtype::f32: return load<float>(data, i);
    case Dtype::f64: return load<double>(data, i);
    case Dtype::bf16: return bf16_to_double(load<std::uint16_t>(data, i));
    case Dtype::f16: return half_to_double(load<std::uint16_t>(data, i));
    case Dtype::i32: return load<std::int32_t>(data, i);
    case Dtype::i64: return static_cast<double>(load<std::int64_t>(data, i));
    case Dtype::u8: return load<std::uint8_t>(data, i);
    case Dtype::u32: return load<std::uint32_t>(data, i);
  }
  return 0;
}

TensorCheck compare_tensors(const void* got, const void* want, Dtype dtype, std::uint64_t count,
                            double atol, double rtol) {
  TensorCheck c;
  c.count = count;
  // Bit-identical outputs (the common case for exact kernels) need no element-wise pass.
  if (std::memcmp(got, want, count * dtype_size(dtype)) == 0) return c;
  const bool exact_int = !is_float(dtype) && atol == 0 && rtol == 0;
  const std::size_t esize = dtype_size(dtype);
  for (std::uint64_t i = 0; i < count; ++i) {
    bool bad = false;
    double g = 0, w = 0;
    if (exact_int) {
      bad = std::memcmp(static_cast<const char*>(got) + i * esize, static_cast<const char*>(want) + i * esize,
                        esize) != 0;
      if (bad) {
        g = element(got, dtype, i);
        w = element(want, dtype, i);
        c.max_abs = std::max(c.max_abs, std::fabs(g - w));
      }
    } else {
      g = element(got, dtype, i);
      w = element(want, dtype, i);
      if (!std::isfinite(w)) {
        // The reference itself produced NaN/Inf: the candidate must match it in kind.
        bad = !(std::isnan(w) ? std::isnan(g) : g == w);
      } else if (!std::isfinite(g)) {
        bad = true;
        ++c.nonfinite;
      } else {
        const double abs_err = std::fabs(g - w);
        const double rel_err = abs_err / std::max(std::fabs(w), 1e-30);
        c.max_abs = std::max(c.max_abs, abs_err);
        if (std::fabs(w) > atol) c.max_rel = std::max(c.max_rel, rel_err);
        bad = abs_err > atol + rtol * std::fabs(w);
      }
    }
    if (bad) {
      if (c.first_bad < 0) {
        c.first_bad = static_cast<std::int64_t>(i);
        c.first_bad_got = g;
        c.first_bad_want = w;
      }
      ++c.mismatches;
    }
  }
  return c;
}


}  // namespace d2k::runner
