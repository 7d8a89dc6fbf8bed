// Element-wise comparison of a candidate's output tensor with the trusted reference's, done in
// the parent (no process holding agent code ever sees reference outputs).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "sandbox/runner/wire.hpp"

namespace d2k::runner {

struct TensorCheck {
  std::string arg;                 // output argument name
  int seed_index = 0;              // >= 0: correctness seed; -1 - i: timed sample i
  std::uint64_t count = 0;
  std::uint64_t mismatches = 0;    // |got - want| > atol + rtol * |want|, or NaN/Inf where want is finite
  std::uint64_t nonfinite = 0;     // NaN/Inf in got where want is finite (poison left unwritten)
  double max_abs = 0;
  double max_rel = 0;
  std::int64_t first_bad = -1;     // element index, -1 when none
  double first_bad_got = 0, first_bad_want = 0;
  bool ok() const { return mismatches == 0; }
  nlohmann::json to_json() const;
};

// Reads element i of a tensor of dtype as a double (bf16/f16 widened exactly).
double element(const void* data, Dtype dtype, std::uint64_t i);

// Compares count elements. Integers compare exactly when atol is 0.
TensorCheck compare_tensors(const void* got, const void* want, Dtype dtype, std::uint64_t count,
                            double atol, double rtol);

}  // namespace d2k::runner
