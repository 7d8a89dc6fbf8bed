// load_task: reads task.json and the files beside it, validating every field. Every error is a
// TaskError naming the file and the field, so a task author (or an operator facing a hostile
// task folder) sees exactly what to fix.
#include "tasks/loader/task.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <set>
#include <tuple>

#include "tasks/loader/folder.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace d2k::tasks {
namespace {

constexpr std::size_t kMaxJsonDepth = 32;
constexpr std::size_t kMaxListItems = 64;
constexpr std::size_t kMaxNameLength = 64;
constexpr std::size_t kMaxTitleLength = 200;
constexpr std::size_t kMaxStatementLength = 64u << 10;
constexpr std::size_t kMaxSignatureLength = 1024;
constexpr std::size_t kMaxShapeRank = 8;
constexpr std::size_t kMaxPatternLength = 200;

const char* const kRequiredFiles[] = {
    "task.json",     "reference.cu",  "starter.cu",     "baseline.cu",    "experts/L1.cu",
    "experts/L2.cu", "experts/L3.cu", "guidance/L1.md", "guidance/L2.md", "guidance/L3.md",
};

bool is_lower_name(std::string_view s) {
  return !s.empty() && s.size() <= kMaxNameLength && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool is_identifier(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameLength) return false;
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string join_field(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

// Deep nesting would make later recursive walks (dump, destroy) expensive: refuse it up front.
void check_json_depth(std::string_view text, const std::string& file) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        throw TaskError(file, "", "JSON nested deeper than " + std::to_string(kMaxJsonDepth));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

// A view of one JSON object with the file and field path, for typed, located errors.
class Obj {
 public:
  Obj(const json& j, std::string file, std::string path)
      : j_(j), file_(std::move(file)), path_(std::move(path)) {
    if (!j_.is_object()) fail("", "must be an object");
  }

  [[noreturn]] void fail(std::string_view key, const std::string& why) const {
    throw TaskError(file_, key.empty() ? path_ : join_field(path_, key), why);
  }
  std::string field(std::string_view key) const { return join_field(path_, key); }
  const std::string& file() const { return file_; }
  bool has(std::string_view key) const { return j_.contains(key); }

  const json& need(std::string_view key) const {
    const auto it = j_.find(key);
    if (it == j_.end()) fail(key, "missing");
    return *it;
  }

  std::string str(std::string_view key, std::size_t max_len, bool allow_empty = false) const {
    const json& v = need(key);
    if (!v.is_string()) fail(key, "must be a string");
    std::string s = v.get<std::string>();
    if (!allow_empty && s.empty()) fail(key, "must not be empty");
    if (s.size() > max_len) fail(key, "longer than " + std::to_string(max_len) + " characters");
    return s;
  }
  std::string opt_str(std::string_view key, std::size_t max_len, std::string fallback) const {
    return has(key) ? str(key, max_len) : std::move(fallback);
  }
  bool boolean(std::string_view key) const {
    const json& v = need(key);
    if (!v.is_boolean()) fail(key, "must be true or false");
    return v.get<bool>();
  }
  std::int64_t integer(std::string_view key) const {
    const json& v = need(key);
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      fail(key, "integer out of range");
    }
    if (!v.is_number_integer()) fail(key, "must be an integer");
    return v.get<std::int64_t>();
  }
  double number(std::string_view key) const {
    const json& v = need(key);
    if (!v.is_number()) fail(key, "must be a number");
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(key, "must be finite");
    return d;
  }
  const json& array(std::string_view key, std::size_t max_items) const {
    const json& v = need(key);
    if (!v.is_array()) fail(key, "must be a list");
    if (v.size() > max_items) fail(key, "more than " + std::to_string(max_items) + " items");
    return v;
  }
  Obj object(std::string_view key) const { return Obj(need(key), file_, field(key)); }
  const json& raw() const { return j_; }

  void only(std::initializer_list<std::string_view> allowed) const {
    for (const auto& [key, value] : j_.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        fail(key, "unknown field");
      }
    }
  }

 private:
  const json& j_;
  std::string file_;
  std::string path_;
};

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// C spellings accepted for each dtype in the signature (pointee type for tensors).
bool spelling_matches(Dtype d, const std::string& base, bool pointer) {
  static const std::map<Dtype, std::set<std::string>> kSpellings = {
      {Dtype::f32, {"float"}},
      {Dtype::f64, {"double"}},
      {Dtype::bf16, {"__nv_bfloat16", "nv_bfloat16", "uint16_t"}},
      {Dtype::f16, {"__half", "half", "uint16_t"}},
      {Dtype::i32, {"int", "int32_t"}},
      {Dtype::i64, {"int64_t", "longlong", "long"}},
      {Dtype::u8, {"uint8_t", "unsignedchar"}},
      {Dtype::u32, {"uint32_t", "unsigned", "unsignedint"}},
  };
  if (pointer && base == "void") return true;
  return kSpellings.at(d).count(base) > 0;
}

// Checks `extern "C" int <entry>(<params>)` and that the parameters match args in order,
// followed by one cudaStream_t.
void check_signature(Task& t, const std::string& file) {
  static const std::regex kDecl(
      R"(^\s*extern\s+"C"\s+int\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(([^()]*)\)\s*;?\s*$)");
  std::smatch m;
  if (!std::regex_match(t.signature, m, kDecl)) {
    throw TaskError(file, "signature",
                    "must read: extern \"C\" int " + t.entry + "(<params>, cudaStream_t stream)");
  }
  if (m[1].str() != t.entry) {
    throw TaskError(file, "signature", "declares '" + m[1].str() + "', entry is '" + t.entry + "'");
  }
  std::vector<std::string> params;
  const std::string list = m[2].str();
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = list.find(',', start);
    params.push_back(
        trim(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (params.size() != t.args.size() + 1) {
    throw TaskError(file, "signature",
                    "has " + std::to_string(params.size()) + " parameters; args lists " +
                        std::to_string(t.args.size()) + " plus the stream");
  }
  if (params.back().find("cudaStream_t") == std::string::npos) {
    throw TaskError(file, "signature", "last parameter must be a cudaStream_t");
  }
  static const std::regex kParam(R"(^(.*[^A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)$)");
  for (std::size_t i = 0; i < t.args.size(); ++i) {
    const Arg& a = t.args[i];
    const std::string field = "args[" + std::to_string(i) + "]";
    std::smatch pm;
    if (!std::regex_match(params[i], pm, kParam)) {
      throw TaskError(file, "signature",
                      "parameter " + std::to_string(i + 1) + " '" + params[i] + "' has no name");
    }
    const std::string type = pm[1].str();
    if (pm[2].str() != a.name) {
      throw TaskError(file, field + ".name",
                      "'" + a.name + "' but the signature's parameter " + std::to_string(i + 1) + " is '" +
                          pm[2].str() + "'");
    }
    const bool pointer = type.find('*') != std::string::npos;
    const bool is_const = type.find("const") != std::string::npos;
    if (a.role == Role::scalar && pointer)
      throw TaskError(file, field + ".role", "scalar but the signature passes a pointer");
    if (a.role != Role::scalar && !pointer)
      throw TaskError(file, field + ".role", "tensor but the signature passes no pointer");
    if (a.role == Role::input && !is_const)
      throw TaskError(file, field + ".role", "input must be a const pointer in the signature");
    if (a.role == Role::output && is_const)
      throw TaskError(file, field + ".role", "output must not be const in the signature");
    // Drop qualifiers, '*' and spaces; type words stay glued ("unsigned char" -> "unsignedchar").
    static const std::regex kNoise(R"(\bconst\b|\b__restrict__\b|\b__restrict\b|\*|\s)");
    const std::string base = std::regex_replace(type, kNoise, "");
    if (pointer && base == "void") t.args[i].untyped = true;
    if (!spelling_matches(a.dtype, base, pointer)) {
      throw TaskError(file, field + ".dtype",
                      std::string(to_string(a.dtype)) + " does not match the C type '" + trim(type) +
                          "' in the signature");
    }
  }
}

Dtype need_dtype(const Obj& o, std::string_view key) {
  const std::string s = o.str(key, 16);
  const auto d = parse_dtype(s);
  if (!d) o.fail(key, "unknown dtype '" + s + "' (f32 f64 bf16 f16 i32 i64 u8 u32)");
  return *d;
}

std::pair<double, double> dtype_range(Dtype d) {
  switch (d) {
    case Dtype::i32:
      return {-2147483648.0, 2147483647.0};
    case Dtype::i64:
      return {-9.2e18, 9.2e18};
    case Dtype::u8:
      return {0, 255};
    case Dtype::u32:
      return {0, 4294967295.0};
    case Dtype::f16:
      return {-65504.0, 65504.0};
    case Dtype::bf16:
      return {-3.3e38, 3.3e38};
    case Dtype::f32:
      return {-3.4e38, 3.4e38};
    case Dtype::f64:
      return {-1.7e308, 1.7e308};
  }
  return {0, 0};
}

void parse_init(const Obj& o, Dtype dtype) {
  const std::string dist = o.str("dist", 32);
  const auto [lo_ok, hi_ok] = dtype_range(dtype);
  if (dist == "uniform" || dist == "randint") {
    o.only({"dist", "low", "high"});
    double low = 0, high = 0;
    if (dist == "uniform") {
      if (!is_float(dtype)) o.fail("dist", "uniform needs a floating dtype; use randint");
      low = o.number("low");
      high = o.number("high");
      if (!(low < high)) o.fail("high", "must be greater than low");
    } else {
      low = static_cast<double>(o.integer("low"));
      high = static_cast<double>(o.integer("high"));
      if (low > high) o.fail("high", "must be at least low");
    }
    if (low < lo_ok || high > hi_ok)
      o.fail("low", "range does not fit dtype " + std::string(to_string(dtype)));
  } else if (dist == "normal") {
    o.only({"dist", "mean", "std"});
    if (!is_float(dtype)) o.fail("dist", "normal needs a floating dtype");
    o.number("mean");
    if (!(o.number("std") > 0)) o.fail("std", "must be positive");
  } else if (dist == "custom") {
    o.only({"dist", "generator", "params"});
    const std::string gen = o.str("generator", kMaxNameLength);
    if (gen == "csr") o.object("params").only({"part"});
    if (gen == "zipf_bytes" && o.has("params")) o.object("params").only({});
  } else {
    o.fail("dist", "unknown distribution '" + dist + "' (uniform normal randint custom)");
  }
  // The rules above are task.json's (fields present and no others, ranges that fit the dtype); the
  // generator itself is the data model's, parsed as the runner's wire parses it.
  try {
    const Generator g = parse_generator(o.raw());
    if (auto why = dtype_mismatch(g.dist, dtype)) o.fail("generator", *why);
  } catch (const GeneratorError& e) {
    o.fail(e.field, e.what());
  }
}

Arg parse_arg(const Obj& o) {
  Arg a;
  a.name = o.str("name", kMaxNameLength);
  if (!is_identifier(a.name)) o.fail("name", "must be a C identifier");
  const auto role = parse_role(o.str("role", 16));
  if (!role) o.fail("role", "must be input, output or scalar");
  a.role = *role;
  a.dtype = need_dtype(o, "dtype");
  if (a.role == Role::scalar) {
    o.only({"name", "role", "dtype", "value"});
    a.value = o.str("value", kMaxExprLength);
    try {
      size_expr_symbols(a.value);
    } catch (const std::invalid_argument& e) {
      o.fail("value", e.what());
    }
    return a;
  }
  o.only(a.role == Role::input
             ? std::initializer_list<std::string_view>{"name", "role", "dtype", "shape", "init"}
             : std::initializer_list<std::string_view>{"name", "role", "dtype", "shape"});
  const json& shape = o.array("shape", kMaxShapeRank);
  if (shape.empty()) o.fail("shape", "must list at least one dimension");
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::string f = "shape[" + std::to_string(i) + "]";
    if (!shape[i].is_string()) o.fail(f, "must be a size expression string");
    a.shape.push_back(shape[i].get<std::string>());
    try {
      size_expr_symbols(a.shape.back());
    } catch (const std::invalid_argument& e) {
      o.fail(f, e.what());
    }
  }
  if (a.role == Role::input) {
    Obj init = o.object("init");
    parse_init(init, a.dtype);
    a.init = init.raw();
  }
  return a;
}

Workload parse_workload(const Obj& o, const Task& t) {
  o.only({"name", "visible", "sizes", "params", "timed", "dtypes", "inits"});
  Workload w;
  w.name = o.str("name", kMaxNameLength);
  if (!is_lower_name(w.name)) o.fail("name", "must match [a-z0-9_]+");
  w.visible = o.boolean("visible");
  const Obj sizes = o.object("sizes");
  if (sizes.raw().empty()) sizes.fail("", "must define at least one size");
  if (sizes.raw().size() > 32) sizes.fail("", "more than 32 sizes");
  for (const auto& [sym, value] : sizes.raw().items()) {
    if (!is_identifier(sym)) sizes.fail(sym, "symbol must be an identifier");
    const std::int64_t v = sizes.integer(sym);
    if (v <= 0) sizes.fail(sym, "must be positive");
    w.sizes[sym] = v;
  }
  w.params = o.has("params") ? o.object("params").raw() : json::object();
  w.timed = o.has("timed") ? o.boolean("timed") : true;
  auto untyped_tensor = [&](const Obj& obj, const std::string& name) -> const Arg& {
    for (const Arg& a : t.args) {
      if (a.name != name) continue;
      if (a.role == Role::scalar) obj.fail(name, "is a scalar; only tensor arguments can be overridden");
      if (!a.untyped) obj.fail(name, "the signature types this pointer; overrides need 'void*' (const void* for inputs)");
      return a;
    }
    obj.fail(name, "no argument of that name");
  };
  if (o.has("dtypes")) {
    const Obj d = o.object("dtypes");
    for (const auto& [name, value] : d.raw().items()) {
      untyped_tensor(d, name);
      w.dtypes[name] = need_dtype(d, name);
    }
  }
  if (o.has("inits")) {
    const Obj in = o.object("inits");
    for (const auto& [name, value] : in.raw().items()) {
      const Arg& a = untyped_tensor(in, name);
      if (a.role != Role::input) in.fail(name, "only inputs have a generator");
      const auto it = w.dtypes.find(name);
      const Obj init = in.object(name);
      parse_init(init, it != w.dtypes.end() ? it->second : a.dtype);
      w.inits[name] = init.raw();
    }
  }
  // An override of the dtype alone must still suit the declared generator.
  for (const auto& [name, dtype] : w.dtypes) {
    for (const Arg& a : t.args) {
      if (a.name != name || a.role != Role::input || w.inits.count(name)) continue;
      parse_init(Obj(a.init, o.file(), o.field("dtypes." + name)), dtype);
    }
  }
  return w;
}

Property parse_property(const Obj& o) {
  o.only({"id", "title", "layer", "check"});
  Property p;
  p.id = o.str("id", kMaxNameLength);
  if (!is_lower_name(p.id)) o.fail("id", "must match [a-z0-9_]+");
  p.title = o.str("title", kMaxTitleLength);
  const std::int64_t layer = o.integer("layer");
  if (layer < 1 || layer > 3) o.fail("layer", "must be 1, 2 or 3");
  p.layer = static_cast<int>(layer);
  const Obj c = o.object("check");
  const std::string kind = c.str("kind", 16);
  auto check_op = [&] {
    static const std::set<std::string> kOps = {"<", "<=", "==", "!=", ">=", ">"};
    if (!kOps.count(c.str("op", 2))) c.fail("op", "must be one of < <= == != >= >");
    c.number("value");
  };
  auto check_workloads = [&] {
    if (!c.has("workloads")) return;
    const json& ws = c.array("workloads", kMaxListItems);
    if (ws.empty()) c.fail("workloads", "must name at least one workload (omit it for all)");
    for (std::size_t i = 0; i < ws.size(); ++i) {
      if (!ws[i].is_string()) c.fail("workloads[" + std::to_string(i) + "]", "must be a workload name");
    }
  };
  if (kind == "sass") {
    c.only({"kind", "pattern", "expect", "min_count"});
    const std::string pattern = c.str("pattern", kMaxPatternLength);
    try {
      std::regex re(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      c.fail("pattern", std::string("not a valid regular expression: ") + e.what());
    }
    const std::string expect = c.opt_str("expect", 16, "present");
    if (expect != "present" && expect != "absent") c.fail("expect", "must be present or absent");
    if (c.has("min_count")) {
      if (expect == "absent") c.fail("min_count", "only with expect: present");
      if (c.integer("min_count") < 1) c.fail("min_count", "must be at least 1");
    }
  } else if (kind == "resource") {
    c.only({"kind", "metric", "op", "value", "workloads"});
    static const std::set<std::string> kMetrics = {"registers_per_thread", "local_bytes_per_thread",
                                                   "static_shared_bytes",  "dynamic_shared_bytes",
                                                   "block_threads",        "grid_blocks",
                                                   "grid_blocks_per_sm",   "launches"};
    if (!kMetrics.count(c.str("metric", 32))) c.fail("metric", "unknown resource metric");
    check_op();
    check_workloads();
  } else if (kind == "measured") {
    c.only({"kind", "metric", "op", "value", "workloads"});
    static const std::set<std::string> kMetrics = {"bandwidth_fraction", "flops_fraction",
                                                   "speedup_over_baseline"};
    if (!kMetrics.count(c.str("metric", 32))) c.fail("metric", "unknown measured metric");
    check_op();
    check_workloads();
  } else {
    c.fail("kind", "must be sass, resource or measured");
  }
  p.check = c.raw();
  return p;
}

void check_compile_flag(const Obj& o, const std::string& field, const std::string& flag) {
  static const std::regex kAllowed(
      R"(^(-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.]*)?|--use_fast_math|-maxrregcount=[0-9]{1,3}|)"
      R"(-std=c\+\+(17|20)|--expt-relaxed-constexpr|--extended-lambda|-Xptxas=-v|-arch=sm_90a?)$)");
  if (flag.size() > 64 || !std::regex_match(flag, kAllowed)) {
    o.fail(field, "flag '" + flag.substr(0, 64) + "' is not in the allowed set (see docs/task-format.md)");
  }
}

// A custom generator's structure comes from each workload (sizes rows, cols, nnz; params pattern,
// alpha, max_row, zipf_s): made here as the runner's job will make it, so a workload the runner
// would refuse fails at load, and a csr part's shape must hold the elements its structure has.
void check_custom_generator(const Task& t, const Arg& a, const Workload& w, std::int64_t elements,
                            const std::string& file, const std::string& af) {
  const std::string where = "in workload '" + w.name + "': ";
  Generator g;
  try {
    g = parse_generator(t.init_of(a, w));
    fit_to_workload(g, w.sizes, w.params);
  } catch (const GeneratorError& e) {
    // Workload fields are named as the workload spells them ("sizes.nnz"); the rest is the init's.
    constexpr std::string_view kWorkload = "workload.";
    const std::string field = e.field.rfind(kWorkload, 0) == 0 ? e.field.substr(kWorkload.size())
                              : e.field.empty()                ? af + ".init"
                                                               : af + ".init." + e.field;
    throw TaskError(file, field, where + e.what());
  }
  if (auto want = required_elements(g); want && elements != *want)
    throw TaskError(file, af + ".shape",
                    where + "the csr " + std::string(g.dist == Dist::csr_row_ptr ? "row_ptr" : "col_idx") +
                        " part has " + std::to_string(*want) + " elements, the shape gives " +
                        std::to_string(elements));
}

// The values every workload gives each tensor and scalar; checks the bounds.
void check_workload_sizes(const Task& t, const std::string& file) {
  for (std::size_t wi = 0; wi < t.workloads.size(); ++wi) {
    const Workload& w = t.workloads[wi];
    const std::string wf = "workloads[" + std::to_string(wi) + "]";
    auto eval = [&](const std::string& expr, const std::string& field) {
      try {
        return eval_size_expr(expr, w.sizes);
      } catch (const std::invalid_argument& e) {
        throw TaskError(file, field, "in workload '" + w.name + "': " + e.what());
      }
    };
    std::int64_t total_bytes = 0;
    for (std::size_t ai = 0; ai < t.args.size(); ++ai) {
      const Arg& a = t.args[ai];
      const std::string af = "args[" + std::to_string(ai) + "]";
      if (a.role == Role::scalar) {
        const std::int64_t v = eval(a.value, af + ".value");
        const auto [lo, hi] = dtype_range(a.dtype);
        if (static_cast<double>(v) < lo || static_cast<double>(v) > hi) {
          throw TaskError(file, af + ".value",
                          "in workload '" + w.name + "': " + std::to_string(v) + " does not fit " +
                              std::string(to_string(a.dtype)));
        }
        continue;
      }
      std::int64_t elements = 1;
      for (std::size_t d = 0; d < a.shape.size(); ++d) {
        const std::string df = af + ".shape[" + std::to_string(d) + "]";
        const std::int64_t dim = eval(a.shape[d], df);
        if (dim <= 0)
          throw TaskError(
              file, df,
              "in workload '" + w.name + "': dimension " + std::to_string(dim) + " is not positive");
        if (__builtin_mul_overflow(elements, dim, &elements) || elements > kMaxTensorElements) {
          throw TaskError(file, af + ".shape", "in workload '" + w.name + "': more than 2^31-1 elements");
        }
      }
      total_bytes += elements * static_cast<std::int64_t>(size_of(t.dtype_of(a, w)));
      if (a.role == Role::input) check_custom_generator(t, a, w, elements, file, af);
      if (total_bytes > kMaxWorkloadBytes) {
        throw TaskError(file, wf + ".sizes", "workload '" + w.name + "' needs more than 16 GiB of tensors");
      }
    }
    if (eval(t.flops, "flops") < 0) throw TaskError(file, "flops", "negative in workload '" + w.name + "'");
    if (eval(t.bytes, "bytes") <= 0)
      throw TaskError(file, "bytes", "not positive in workload '" + w.name + "'");
    if (!t.bound_bytes.empty() && eval(t.bound_bytes, "bound.bytes") < eval(t.bytes, "bytes"))
      throw TaskError(file, "bound.bytes",
                      "less than `bytes` in workload '" + w.name + "' (a stated bound can only add traffic)");
  }
}

Guidance load_guidance(const fs::path& dir, int layer) {
  const std::string rel = "guidance/L" + std::to_string(layer) + ".md";
  const std::string text = read_task_file(dir, rel);
  const std::string shown = (dir / rel).string();
  const std::size_t eol = text.find('\n');
  const std::string first = trim(text.substr(0, eol));
  if (first.rfind("# ", 0) != 0 || trim(first.substr(2)).empty()) {
    throw TaskError(shown, "title", "first line must be '# <title>'");
  }
  Guidance g;
  g.layer = layer;
  g.title = trim(first.substr(2));
  g.text = eol == std::string::npos ? "" : trim(std::string_view(text).substr(eol + 1));
  if (g.text.empty()) throw TaskError(shown, "text", "no text after the title");
  return g;
}

}  // namespace

std::vector<const Workload*> Task::visible_workloads() const {
  std::vector<const Workload*> out;
  for (const Workload& w : workloads) {
    if (w.visible) out.push_back(&w);
  }
  return out;
}

const Workload* Task::find_workload(std::string_view name) const {
  for (const Workload& w : workloads) {
    if (w.name == name) return &w;
  }
  return nullptr;
}

double Task::flops_of(const Workload& w) const { return static_cast<double>(eval_size_expr(flops, w.sizes)); }
double Task::bytes_of(const Workload& w) const { return static_cast<double>(eval_size_expr(bytes, w.sizes)); }
double Task::sol_bytes_of(const Workload& w) const {
  return bound_bytes.empty() ? bytes_of(w) : static_cast<double>(eval_size_expr(bound_bytes, w.sizes));
}
fs::path Task::reference_path() const { return dir / "reference.cu"; }
fs::path Task::baseline_path() const { return dir / "baseline.cu"; }

fs::path Task::expert_path(int layer) const {
  if (layer < 1 || layer > 3)
    throw std::invalid_argument("expert layer must be 1..3, got " + std::to_string(layer));
  return dir / "experts" / ("L" + std::to_string(layer) + ".cu");
}

std::vector<Guidance> Task::guidance_up_to(int layer) const {
  if (layer < 0 || layer > 3)
    throw std::invalid_argument("guidance layer must be 0..3, got " + std::to_string(layer));
  const auto k = std::min<std::size_t>(static_cast<std::size_t>(layer), guidance.size());
  return {guidance.begin(), guidance.begin() + static_cast<std::ptrdiff_t>(k)};
}

Task load_task(const fs::path& dir_in) {
  std::error_code ec;
  const fs::path dir = fs::canonical(dir_in, ec);
  if (ec || !fs::is_directory(dir)) throw TaskError(dir_in.string(), "", "not a task folder");

  // Every file is checked (symlinks, special files, sizes) before any is read.
  const std::vector<detail::FolderFile> files = detail::scan_folder(dir);
  for (const char* required : kRequiredFiles) {
    const bool present = std::any_of(files.begin(), files.end(),
                                     [&](const detail::FolderFile& f) { return f.relative == required; });
    if (!present) throw TaskError((dir / required).string(), "", "missing required file");
  }

  const std::string file = (dir / "task.json").string();
  const std::string text = read_task_file(dir, "task.json");
  check_json_depth(text, file);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw TaskError(file, "", std::string("malformed JSON: ") + e.what());
  }
  const Obj root(j, file, "");
  root.only({"id", "title", "category", "statement", "entry", "signature", "main_file", "compile_flags",
             "args", "workloads", "tolerances", "flops", "bytes", "bound", "speed_of_light_target", "memory_bound", "properties",
             "vendor"});

  Task t;
  t.dir = dir;
  t.id = root.str("id", kMaxNameLength);
  if (!is_lower_name(t.id)) root.fail("id", "must match [a-z0-9_]+");
  if (t.id != dir.filename().string()) {
    root.fail("id", "'" + t.id + "' differs from the folder name '" + dir.filename().string() + "'");
  }
  t.title = root.str("title", kMaxTitleLength);
  t.category = root.str("category", kMaxNameLength);
  if (!is_lower_name(t.category)) root.fail("category", "must match [a-z0-9_]+");
  t.statement = root.str("statement", kMaxStatementLength);
  t.entry = root.str("entry", kMaxNameLength);
  if (!is_identifier(t.entry) || t.entry.rfind("d2k_", 0) != 0) {
    root.fail("entry", "must be a C identifier starting with d2k_");
  }
  t.signature = root.str("signature", kMaxSignatureLength);
  t.main_file = root.opt_str("main_file", kMaxNameLength, "kernel.cu");
  static const std::regex kMainFile(R"(^[A-Za-z0-9_][A-Za-z0-9_.-]*\.cu$)");
  if (!std::regex_match(t.main_file, kMainFile))
    root.fail("main_file", "must be a plain file name ending in .cu");
  if (root.has("compile_flags")) {
    const json& flags = root.array("compile_flags", 16);
    for (std::size_t i = 0; i < flags.size(); ++i) {
      const std::string f = "compile_flags[" + std::to_string(i) + "]";
      if (!flags[i].is_string()) root.fail(f, "must be a string");
      check_compile_flag(root, f, flags[i].get<std::string>());
      t.compile_flags.push_back(flags[i].get<std::string>());
    }
  }

  const json& args = root.array("args", kMaxListItems);
  if (args.empty()) root.fail("args", "must list at least one argument");
  std::set<std::string> arg_names;
  bool has_output = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string f = "args[" + std::to_string(i) + "]";
    t.args.push_back(parse_arg(Obj(args[i], file, f)));
    if (!arg_names.insert(t.args.back().name).second) root.fail(f + ".name", "duplicate argument name");
    has_output = has_output || t.args.back().role == Role::output;
  }
  if (!has_output) root.fail("args", "needs at least one output");
  check_signature(t, file);

  const json& workloads = root.array("workloads", kMaxListItems);
  if (workloads.empty()) root.fail("workloads", "must list at least one workload");
  std::set<std::string> workload_names;
  for (std::size_t i = 0; i < workloads.size(); ++i) {
    const std::string f = "workloads[" + std::to_string(i) + "]";
    t.workloads.push_back(parse_workload(Obj(workloads[i], file, f), t));
    if (!workload_names.insert(t.workloads.back().name).second)
      root.fail(f + ".name", "duplicate workload name '" + t.workloads.back().name + "'");
  }

  const Obj tolerances = root.object("tolerances");
  std::set<std::string> output_dtypes;
  for (const Arg& a : t.args) {
    if (a.role != Role::output) continue;
    for (const Workload& w : t.workloads) output_dtypes.insert(std::string(to_string(t.dtype_of(a, w))));
  }
  for (const auto& [dtype, value] : tolerances.raw().items()) {
    if (!output_dtypes.count(dtype)) tolerances.fail(dtype, "no output has this dtype");
    const Obj tol = tolerances.object(dtype);
    tol.only({"atol", "rtol", "why"});
    Tolerance x;
    x.atol = tol.number("atol");
    x.rtol = tol.number("rtol");
    if (x.atol < 0) tol.fail("atol", "must not be negative");
    if (x.rtol < 0) tol.fail("rtol", "must not be negative");
    x.why = trim(tol.str("why", kMaxTitleLength * 4));
    if (x.why.empty()) tol.fail("why", "must not be blank");
    t.tolerances[dtype] = x;
  }
  for (const std::string& d : output_dtypes) {
    if (!t.tolerances.count(d)) tolerances.fail(d, "missing: an output has dtype " + d);
  }

  t.flops = root.str("flops", kMaxExprLength);
  t.bytes = root.str("bytes", kMaxExprLength);
  for (const char* key : {"flops", "bytes"}) {
    try {
      size_expr_symbols(std::string_view(key) == "flops" ? t.flops : t.bytes);
    } catch (const std::invalid_argument& e) {
      root.fail(key, e.what());
    }
  }
  if (root.has("bound")) {
    const Obj b = root.object("bound");
    b.only({"bytes", "why"});
    t.bound_bytes = b.str("bytes", kMaxExprLength);
    t.bound_why = b.str("why", kMaxTitleLength * 4);
    if (trim(t.bound_why).empty()) b.fail("why", "must say why a design touches more than `bytes`");
    try {
      size_expr_symbols(t.bound_bytes);
    } catch (const std::invalid_argument& e) {
      b.fail("bytes", e.what());
    }
  }
  if (root.has("speed_of_light_target")) {
    t.speed_of_light_target = root.number("speed_of_light_target");
    if (!(t.speed_of_light_target >= 0.5 && t.speed_of_light_target <= 1.0))
      root.fail("speed_of_light_target", "must be a fraction of copy bandwidth from 0.5 to 1.0");
  }
  if (root.has("memory_bound")) {
    const Obj m = root.object("memory_bound");
    m.only({"value", "why"});
    t.memory_bound = m.boolean("value");
    t.memory_bound_why = m.str("why", kMaxTitleLength * 4);
    if (trim(t.memory_bound_why).empty()) m.fail("why", "must say why the task is (or is not) memory-bound on the GPU");
  }
  check_workload_sizes(t, file);

  if (root.has("properties")) {
    const json& props = root.array("properties", kMaxListItems);
    std::set<std::string> ids;
    for (std::size_t i = 0; i < props.size(); ++i) {
      const std::string f = "properties[" + std::to_string(i) + "]";
      t.properties.push_back(parse_property(Obj(props[i], file, f)));
      if (!ids.insert(t.properties.back().id).second) root.fail(f + ".id", "duplicate property id");
      const json& check = t.properties.back().check;
      if (check.contains("workloads")) {
        for (const json& name : check["workloads"]) {
          if (!t.find_workload(name.get<std::string>())) {
            root.fail(f + ".check.workloads", "unknown workload '" + name.get<std::string>() + "'");
          }
        }
      }
    }
  }

  if (root.has("vendor")) {
    const Obj v = root.object("vendor");
    v.only({"file", "what", "libs", "min_fraction"});
    Vendor vendor;
    vendor.file = v.str("file", kMaxNameLength);
    static const std::regex kVendorFile(R"(^[A-Za-z0-9_][A-Za-z0-9_.-]*\.(cu|py)$)");
    if (!std::regex_match(vendor.file, kVendorFile)) v.fail("file", "must be a plain file name ending in .cu or .py");
    try {
      read_task_file(dir, vendor.file);
    } catch (const TaskError& e) {
      v.fail("file", e.what());
    }
    vendor.what = v.str("what", kMaxTitleLength);
    if (v.has("libs")) {
      static const std::set<std::string> kLibs = {"cublas", "cublasLt", "cudnn", "curand"};
      const json& libs = v.array("libs", 8);
      for (std::size_t i = 0; i < libs.size(); ++i) {
        const std::string f = "libs[" + std::to_string(i) + "]";
        if (!libs[i].is_string() || !kLibs.count(libs[i].get<std::string>()))
          v.fail(f, "must be one of cublas cublasLt cudnn curand");
        vendor.libs.push_back(libs[i].get<std::string>());
      }
      if (!vendor.libs.empty() && vendor.file.size() > 3 && vendor.file.substr(vendor.file.size() - 3) == ".py")
        v.fail("libs", "only a vendor.cu links libraries");
    }
    if (v.has("min_fraction")) {
      vendor.min_fraction = v.number("min_fraction");
      if (!(vendor.min_fraction > 0 && vendor.min_fraction <= 1)) v.fail("min_fraction", "must be in (0, 1]");
    }
    t.vendor = vendor;
  }

  for (int layer = 1; layer <= 3; ++layer) t.guidance.push_back(load_guidance(dir, layer));
  t.starter = read_task_file(dir, "starter.cu");
  t.content_hash = detail::content_hash(files);
  return t;
}

Dtype Task::dtype_of(const Arg& arg, const Workload& w) const {
  const auto it = w.dtypes.find(arg.name);
  return it != w.dtypes.end() ? it->second : arg.dtype;
}

const nlohmann::json& Task::init_of(const Arg& arg, const Workload& w) const {
  const auto it = w.inits.find(arg.name);
  return it != w.inits.end() ? it->second : arg.init;
}

const Task* TaskSet::find(std::string_view id) const {
  for (const Task& t : tasks) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

TaskSet load_tasks(const fs::path& root) {
  TaskSet set;
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  if (ec) {
    set.errors.emplace_back(root.string(), "", "cannot list tasks folder: " + ec.message());
    return set;
  }
  std::vector<fs::path> dirs;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) {
      set.errors.emplace_back(root.string(), "", "cannot list tasks folder: " + ec.message());
      break;
    }
    const fs::path p = it->path();
    if (!fs::exists(fs::symlink_status(p / "task.json", ec))) continue;  // not a task folder
    if (fs::is_symlink(it->symlink_status(ec))) {
      set.errors.emplace_back(p.string(), "", "a task folder must not be a symlink");
      continue;
    }
    dirs.push_back(p);
  }
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& d : dirs) {
    try {
      set.tasks.push_back(load_task(d));
    } catch (const TaskError& e) {
      set.errors.push_back(e);
    } catch (const std::exception& e) {  // e.g. bad_alloc on a hostile file: one task, not the server
      set.errors.emplace_back(d.string(), "", e.what());
    }
  }
  std::sort(set.tasks.begin(), set.tasks.end(), [](const Task& a, const Task& b) { return a.id < b.id; });
  return set;
}

}  // namespace d2k::tasks
