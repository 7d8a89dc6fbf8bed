// Element-wise comparison of a candidate's output tensor with the trusted reference's, done in
// the parent (no process holding agent code ever sees reference outputs).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "sandbox/runner/wire.hpp"

namespace d2k::runner {

// TensorCheck (one output tensor's comparison) is defined with the wire (sandbox/runner/wire.hpp):
// the GPU-resident path's trusted runner sends the same checks in its result.


// Reads element i of a tensor of dtype as a double (bf16/f16 widened exactly).
double element(const void* data, Dtype dtype, std::uint64_t i);

// Compares count elements. Integers compare exactly when atol is 0.
TensorCheck compare_tensors(const void* got, const void* want, Dtype dtype, std::uint64_t count,
                            double atol, double rtol);

}  // namespace d2k::runner
