// The data model that a task declares and a runner carries out: element types (Dtype), argument
// roles (Role) and input generators (Generator), with their names, sizes and parsing. Defined once
// here; the task loader (task.json) and the runner's wire (sandbox/runner/wire.hpp) both use it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace d2k::tasks {

enum class Dtype { f32, f64, bf16, f16, i32, i64, u8, u32 };
inline constexpr std::array<Dtype, 8> kDtypes = {Dtype::f32, Dtype::f64, Dtype::bf16, Dtype::f16,
                                                 Dtype::i32, Dtype::i64, Dtype::u8,   Dtype::u32};
std::string_view to_string(Dtype dtype);  // "f32", ... (task.json and the wire spell them so)
std::optional<Dtype> parse_dtype(std::string_view name);
std::size_t size_of(Dtype dtype);         // bytes of one element
bool is_float(Dtype dtype);

enum class Role { input, output, scalar };
std::string_view to_string(Role role);    // "input", "output", "scalar"
std::optional<Role> parse_role(std::string_view name);

// How an input's elements are drawn from (seed, arg index, element index). Counter-based, so any
// runner with the same seed produces bit-identical inputs on any GPU.
// The custom generators (task.json {"dist":"custom","generator":...}) are trusted code of the runner:
// csr_row_ptr / csr_col_idx (one CSR structure, see sandbox/runner/csr_gen.hpp; both parts of one call
// come from the same structure) and zipf_bytes (u8 values, P(v) ~ 1/(rank(v)+1)^s).
enum class Dist { uniform, normal, randint, constant, iota, csr_row_ptr, csr_col_idx, zipf_bytes };
std::string_view to_string(Dist dist);
std::optional<Dist> parse_dist(std::string_view name);
enum class CsrPattern { uniform, power_law, banded };

struct Generator {
  Dist dist = Dist::uniform;
  double a = -1;  // uniform: low, normal: mean, randint: low (inclusive), constant: value, iota: start,
                  // csr power_law: alpha, zipf_bytes: s
  double b = 1;   // uniform: high, normal: std, randint: high (inclusive), iota: step
  // csr_*: the structure's shape and pattern (from the workload's sizes rows, cols, nnz and params).
  std::int64_t rows = 0, cols = 0, nnz = 0;
  std::int64_t max_row = 0;      // csr: cap on a row's length (0: cols)
  CsrPattern pattern = CsrPattern::uniform;
};

// A generator that cannot be parsed or made. `field` says where, relative to the init object
// ("high", "params.part") or to the workload ("sizes.nnz", "params.zipf_s").
struct GeneratorError : std::invalid_argument {
  GeneratorError(std::string field_, bool unsupported_, const std::string& message)
      : std::invalid_argument(message), field(std::move(field_)), unsupported(unsupported_) {}
  std::string field;
  bool unsupported;  // an unknown custom generator, or a custom one given no workload
};

// The custom generators the runner implements ("csr", "zipf_bytes").
bool is_custom_generator(std::string_view name);

// Parses an input generator (task.json "init": {"dist":"uniform","low":-1,"high":1} ...); missing
// parameters take the defaults of Generator; null is uniform [-1, 1]. A custom generator gets its
// dist here and its structure from a workload (fit_to_workload). Throws GeneratorError.
Generator parse_generator(const nlohmann::json& init);
bool is_custom(Dist dist);
// A custom generator's structure from one workload's sizes (rows, cols, nnz) and params (pattern,
// alpha, max_row, zipf_s); other generators are left as they are. Throws GeneratorError.
void fit_to_workload(Generator& g, const std::map<std::string, std::int64_t>& sizes, const nlohmann::json& params);

// The elements a generator's tensor must have, where the generator fixes it (csr row_ptr: rows + 1,
// col_idx: nnz); nullopt where any count works.
std::optional<std::int64_t> required_elements(const Generator& g);
// Why `dtype` cannot hold what `dist` draws (csr parts are i32, zipf_bytes u8); nullopt when it can.
std::optional<std::string> dtype_mismatch(Dist dist, Dtype dtype);

}  // namespace d2k::tasks
