// The data model shared by the task loader and the runner's wire: names, sizes, generator parsing.
#include "catch.hpp"
#include "tasks/loader/data_model.hpp"

using nlohmann::json;
using namespace d2k::tasks;

namespace {

// The field of the GeneratorError that f throws, "unsupported:" prefixed when it is one;
// "accepted" when it throws nothing.
template <typename F>
std::string error_field(F&& f) {
  try {
    f();
  } catch (const GeneratorError& e) {
    return (e.unsupported ? "unsupported:" : "") + e.field;
  }
  return "accepted";
}

}  // namespace

TEST_CASE("dtypes and roles: one name and size each, parsed back", "[tasks][data_model]") {
  const std::map<std::string, std::size_t> expected = {{"f32", 4}, {"f64", 8}, {"bf16", 2}, {"f16", 2},
                                                       {"i32", 4}, {"i64", 8}, {"u8", 1},   {"u32", 4}};
  std::map<std::string, std::size_t> got;
  for (Dtype d : kDtypes) {
    got[std::string(to_string(d))] = size_of(d);
    CHECK(parse_dtype(to_string(d)) == d);
  }
  CHECK(got == expected);
  CHECK_FALSE(parse_dtype("f8"));
  CHECK(is_float(Dtype::bf16));
  CHECK_FALSE(is_float(Dtype::u32));
  for (Role r : {Role::input, Role::output, Role::scalar}) CHECK(parse_role(to_string(r)) == r);
  CHECK(to_string(Role::output) == "output");
  CHECK_FALSE(parse_role("inout"));
  for (Dist d : {Dist::uniform, Dist::normal, Dist::randint, Dist::constant, Dist::iota, Dist::csr_row_ptr,
                 Dist::csr_col_idx, Dist::zipf_bytes})
    CHECK(parse_dist(to_string(d)) == d);
}

TEST_CASE("generators parse with defaults and name the bad field", "[tasks][data_model]") {
  const Generator u = parse_generator({{"dist", "uniform"}, {"low", -2}, {"high", 3}});
  CHECK(u.dist == Dist::uniform);
  CHECK(u.a == -2);
  CHECK(u.b == 3);
  const Generator n = parse_generator({{"dist", "normal"}});
  CHECK(n.dist == Dist::normal);
  CHECK(n.a == 0);
  CHECK(n.b == 1);
  CHECK(parse_generator(json()).dist == Dist::uniform);
  CHECK(error_field([] { parse_generator({{"dist", "poisson"}}); }) == "dist");
  CHECK(error_field([] { parse_generator({{"dist", "csr_row_ptr"}}); }) == "dist");  // only as custom
  CHECK(error_field([] { parse_generator({{"dist", "uniform"}, {"low", 2}, {"high", 1}}); }) == "high");
  CHECK(error_field([] { parse_generator({{"dist", "normal"}, {"std", "one"}}); }) == "std");
  CHECK(error_field([] { parse_generator({{"dist", "custom"}, {"generator", "x"}}); }) == "unsupported:generator");
  CHECK(error_field([] { parse_generator({{"dist", "custom"}, {"generator", "csr"}}); }) == "params.part");
  const json row_ptr = {{"dist", "custom"}, {"generator", "csr"}, {"params", {{"part", "row_ptr"}}}};
  CHECK(parse_generator(row_ptr).dist == Dist::csr_row_ptr);
  CHECK(is_custom(Dist::csr_row_ptr));
  CHECK_FALSE(is_custom(Dist::randint));
}

TEST_CASE("a custom generator takes its structure from the workload", "[tasks][data_model]") {
  const json col_idx = {{"dist", "custom"}, {"generator", "csr"}, {"params", {{"part", "col_idx"}}}};
  Generator g = parse_generator(col_idx);
  fit_to_workload(g, {{"rows", 10}, {"cols", 20}, {"nnz", 30}}, {{"pattern", "banded"}, {"max_row", 5}});
  CHECK(g.rows == 10);
  CHECK(g.cols == 20);
  CHECK(g.nnz == 30);
  CHECK(g.max_row == 5);
  CHECK(g.pattern == CsrPattern::banded);
  CHECK(required_elements(g) == 30);
  g.dist = Dist::csr_row_ptr;
  CHECK(required_elements(g) == 11);
  CHECK_FALSE(required_elements(parse_generator({{"dist", "randint"}, {"low", 0}, {"high", 9}})));
  auto fit = [&](std::map<std::string, std::int64_t> sizes, json params) {
    return error_field([&] {
      Generator c = parse_generator(col_idx);
      fit_to_workload(c, sizes, params);
    });
  };
  CHECK(fit({{"rows", 10}, {"cols", 10}}, json::object()) == "");  // the generator itself: no nnz size
  CHECK(fit({{"rows", 10}, {"cols", 10}, {"nnz", 101}}, json::object()) == "workload.sizes.nnz");
  CHECK(fit({{"rows", 10}, {"cols", 10}, {"nnz", 50}}, {{"max_row", 4}}) == "workload.sizes.nnz");
  CHECK(fit({{"rows", 10}, {"cols", 10}, {"nnz", 5}}, {{"pattern", "zigzag"}}) == "workload.params.pattern");
  CHECK(fit({{"rows", 10}, {"cols", 10}, {"nnz", 5}}, {{"pattern", 3}}) == "workload.params.pattern");
  CHECK(fit({{"rows", 10}, {"cols", 10}, {"nnz", 5}}, {{"pattern", "power_law"}, {"alpha", 1}}) ==
        "workload.params.alpha");
  Generator z = parse_generator({{"dist", "custom"}, {"generator", "zipf_bytes"}});
  fit_to_workload(z, {{"n", 5}}, {{"zipf_s", 1.5}});
  CHECK(z.a == 1.5);
  CHECK(error_field([&] { fit_to_workload(z, {{"n", 5}}, {{"zipf_s", 17}}); }) == "workload.params.zipf_s");
  CHECK(dtype_mismatch(Dist::csr_col_idx, Dtype::i64) == "csr parts are i32");
  CHECK(dtype_mismatch(Dist::zipf_bytes, Dtype::f32) == "zipf_bytes draws u8 values");
  CHECK_FALSE(dtype_mismatch(Dist::csr_col_idx, Dtype::i32));
  CHECK_FALSE(dtype_mismatch(Dist::uniform, Dtype::bf16));
}
