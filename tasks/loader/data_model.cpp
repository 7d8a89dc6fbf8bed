#include "tasks/loader/data_model.hpp"

#include <algorithm>
#include <cmath>

namespace d2k::tasks {

using nlohmann::json;

std::string_view to_string(Dtype dtype) {
  switch (dtype) {
    case Dtype::f32: return "f32";
    case Dtype::f64: return "f64";
    case Dtype::bf16: return "bf16";
    case Dtype::f16: return "f16";
    case Dtype::i32: return "i32";
    case Dtype::i64: return "i64";
    case Dtype::u8: return "u8";
    case Dtype::u32: return "u32";
  }
  return "?";
}

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (Dtype d : kDtypes)
    if (to_string(d) == name) return d;
  return std::nullopt;
}

std::size_t size_of(Dtype dtype) {
  switch (dtype) {
    case Dtype::f64: case Dtype::i64: return 8;
    case Dtype::f32: case Dtype::i32: case Dtype::u32: return 4;
    case Dtype::bf16: case Dtype::f16: return 2;
    case Dtype::u8: return 1;
  }
  return 4;
}

bool is_float(Dtype dtype) {
  return dtype == Dtype::f32 || dtype == Dtype::f64 || dtype == Dtype::bf16 || dtype == Dtype::f16;
}

std::string_view to_string(Role role) {
  switch (role) {
    case Role::input: return "input";
    case Role::output: return "output";
    case Role::scalar: return "scalar";
  }
  return "?";
}

std::optional<Role> parse_role(std::string_view name) {
  for (Role r : {Role::input, Role::output, Role::scalar})
    if (to_string(r) == name) return r;
  return std::nullopt;
}

std::string_view to_string(Dist dist) {
  switch (dist) {
    case Dist::uniform: return "uniform";
    case Dist::normal: return "normal";
    case Dist::randint: return "randint";
    case Dist::constant: return "constant";
    case Dist::iota: return "iota";
    case Dist::csr_row_ptr: return "csr_row_ptr";
    case Dist::csr_col_idx: return "csr_col_idx";
    case Dist::zipf_bytes: return "zipf_bytes";
  }
  return "?";
}

std::optional<Dist> parse_dist(std::string_view name) {
  for (Dist d : {Dist::uniform, Dist::normal, Dist::randint, Dist::constant, Dist::iota, Dist::csr_row_ptr,
                 Dist::csr_col_idx, Dist::zipf_bytes})
    if (to_string(d) == name) return d;
  return std::nullopt;
}

bool is_custom_generator(std::string_view name) { return name == "csr" || name == "zipf_bytes"; }

bool is_custom(Dist dist) {
  return dist == Dist::csr_row_ptr || dist == Dist::csr_col_idx || dist == Dist::zipf_bytes;
}

namespace {

[[noreturn]] void bad(std::string field, const std::string& message) {
  throw GeneratorError(std::move(field), false, message);
}

// A finite number at j[key] (field names it in errors), or the fallback when absent.
double number(const json& j, const char* key, double fallback, const std::string& field) {
  if (!j.contains(key)) return fallback;
  if (!j.at(key).is_number()) bad(field, "'" + std::string(key) + "' is not a number");
  const double v = j.at(key).get<double>();
  if (!std::isfinite(v)) bad(field, "'" + std::string(key) + "' is not finite");
  return v;
}

Generator parse_custom(const json& init) {
  if (!init.contains("generator") || !init.at("generator").is_string())
    bad("generator", "a custom generator needs a string 'generator'");
  const auto name = init.at("generator").get<std::string>();
  if (!is_custom_generator(name))
    throw GeneratorError("generator", true,
                         "unknown custom generator '" + name + "' (the runner implements csr, zipf_bytes)");
  const json gp = init.contains("params") ? init.at("params") : json::object();
  if (!gp.is_object()) bad("params", "generator params must be an object");
  Generator g;
  if (name == "zipf_bytes") {
    g.dist = Dist::zipf_bytes;
    return g;
  }
  const std::string part = gp.contains("part") && gp.at("part").is_string() ? gp.at("part").get<std::string>() : "";
  if (part == "row_ptr") g.dist = Dist::csr_row_ptr;
  else if (part == "col_idx") g.dist = Dist::csr_col_idx;
  else bad("params.part", "csr generator params.part must be row_ptr or col_idx");
  return g;
}

std::int64_t need_size(const std::map<std::string, std::int64_t>& sizes, const char* name) {
  const auto it = sizes.find(name);
  if (it == sizes.end()) bad("", std::string("the csr generator needs a size named '") + name + "'");
  return it->second;
}

}  // namespace

Generator parse_generator(const json& init) {
  Generator g;
  if (init.is_null()) return g;  // default: uniform [-1, 1]
  if (!init.is_object() || !init.contains("dist") || !init.at("dist").is_string())
    bad("dist", "input generator must be an object with a string 'dist'");
  const auto name = init.at("dist").get<std::string>();
  if (name == "custom") return parse_custom(init);
  const auto dist = parse_dist(name);
  if (!dist || is_custom(*dist)) bad("dist", "unknown input generator '" + name + "'");
  g.dist = *dist;
  auto param = [&](const char* key, double fallback) { return number(init, key, fallback, key); };
  switch (g.dist) {
    case Dist::uniform: g.a = param("low", -1); g.b = param("high", 1); break;
    case Dist::normal: g.a = param("mean", 0); g.b = param("std", 1); break;
    case Dist::randint: g.a = param("low", 0); g.b = param("high", 100); break;
    case Dist::constant: g.a = param("value", 0); g.b = 0; break;
    case Dist::iota: g.a = param("start", 0); g.b = param("step", 1); break;
    default: break;
  }
  if ((g.dist == Dist::uniform || g.dist == Dist::randint) && g.b < g.a) bad("high", "input generator has high < low");
  if (g.dist == Dist::normal && g.b < 0) bad("std", "input generator has std < 0");
  return g;
}

void fit_to_workload(Generator& g, const std::map<std::string, std::int64_t>& sizes, const json& params) {
  if (!is_custom(g.dist)) return;
  const json wp = params.is_object() ? params : json::object();
  if (g.dist == Dist::zipf_bytes) {
    g.a = number(wp, "zipf_s", 0, "workload.params.zipf_s");
    if (g.a < 0 || g.a > 16) bad("workload.params.zipf_s", "zipf_s must be in [0, 16]");
    return;
  }
  g.rows = need_size(sizes, "rows");
  g.cols = need_size(sizes, "cols");
  g.nnz = need_size(sizes, "nnz");
  if (g.rows < 1 || g.cols < 1 || g.nnz < 1 || g.nnz > 0x7fffffffLL || g.rows >= 0x7fffffffLL ||
      g.cols > 0x7fffffffLL)
    bad("", "csr sizes out of range (1 <= rows, cols, nnz < 2^31)");
  if (static_cast<double>(g.nnz) > static_cast<double>(g.rows) * static_cast<double>(g.cols))
    bad("workload.sizes.nnz", "csr nnz exceeds rows*cols");
  const std::string pattern = !wp.contains("pattern")      ? std::string("uniform")
                              : wp.at("pattern").is_string() ? wp.at("pattern").get<std::string>()
                                                             : std::string("?");
  if (pattern == "uniform") g.pattern = CsrPattern::uniform;
  else if (pattern == "power_law") g.pattern = CsrPattern::power_law;
  else if (pattern == "banded") g.pattern = CsrPattern::banded;
  else bad("workload.params.pattern", "csr pattern must be uniform, power_law or banded");
  g.a = number(wp, "alpha", 2.0, "workload.params.alpha");
  if (g.pattern == CsrPattern::power_law && !(g.a > 1.0 && g.a <= 8.0))
    bad("workload.params.alpha", "csr alpha must be in (1, 8]");
  const double max_row = number(wp, "max_row", 0, "workload.params.max_row");
  if (max_row < 0 || max_row != std::floor(max_row))
    bad("workload.params.max_row", "csr max_row must be a non-negative integer");
  g.max_row = static_cast<std::int64_t>(std::min<double>(max_row, static_cast<double>(g.cols)));
  const std::int64_t cap = g.max_row > 0 ? g.max_row : g.cols;
  if (static_cast<double>(cap) * static_cast<double>(g.rows) < static_cast<double>(g.nnz))
    bad("workload.sizes.nnz", "csr nnz exceeds rows*max_row");
}

std::optional<std::int64_t> required_elements(const Generator& g) {
  if (g.dist == Dist::csr_row_ptr) return g.rows + 1;
  if (g.dist == Dist::csr_col_idx) return g.nnz;
  return std::nullopt;
}

std::optional<std::string> dtype_mismatch(Dist dist, Dtype dtype) {
  if ((dist == Dist::csr_row_ptr || dist == Dist::csr_col_idx) && dtype != Dtype::i32) return "csr parts are i32";
  if (dist == Dist::zipf_bytes && dtype != Dtype::u8) return "zipf_bytes draws u8 values";
  return std::nullopt;
}

}  // namespace d2k::tasks
