#include <climits>
#include <string>

#include "catch.hpp"
#include "contains.hpp"
#include "tasks/loader/task.hpp"

using d2k::tasks::eval_size_expr;
using d2k::tasks::size_expr_symbols;

namespace {
const std::map<std::string, std::int64_t> kVars = {{"n", 10}, {"m", 3}, {"big", INT64_MAX}, {"rows_2", 7}};

std::string error_of(const std::string& expr) {
  try {
    eval_size_expr(expr, kVars);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("size expressions evaluate with C integer semantics", "[tasks][expr]") {
  CHECK(eval_size_expr("12*n", kVars) == 120);
  CHECK(eval_size_expr("n + m * 2", kVars) == 16);
  CHECK(eval_size_expr("(n + m) * 2", kVars) == 26);
  CHECK(eval_size_expr("n - m - 1", kVars) == 6);  // left associative
  CHECK(eval_size_expr("n / m", kVars) == 3);
  CHECK(eval_size_expr("-n / m", kVars) == -3);  // truncation toward zero
  CHECK(eval_size_expr("n % m", kVars) == 1);
  CHECK(eval_size_expr("-n % m", kVars) == -1);
  CHECK(eval_size_expr("--n", kVars) == 10);
  CHECK(eval_size_expr("-(n - 11)", kVars) == 1);
  CHECK(eval_size_expr("  rows_2\t", kVars) == 7);
  CHECK(eval_size_expr("9223372036854775807", kVars) == INT64_MAX);
  CHECK(eval_size_expr("big / 2 * 2 + 1", kVars) == INT64_MAX);
  CHECK(eval_size_expr("((((n))))", kVars) == 10);
}

TEST_CASE("size expression errors are clear invalid_argument", "[tasks][expr]") {
  CHECK_THAT(error_of("n / (m - 3)"), ContainsSubstring("division by zero"));
  CHECK_THAT(error_of("n % 0"), ContainsSubstring("modulo by zero"));
  CHECK_THAT(error_of("k * 2"), ContainsSubstring("unknown identifier 'k'"));
  CHECK_THAT(error_of("big + 1"), ContainsSubstring("overflow"));
  CHECK_THAT(error_of("big * 2"), ContainsSubstring("overflow"));
  CHECK_THAT(error_of("-big - 2"), ContainsSubstring("overflow"));
  CHECK_THAT(error_of("(-big - 1) / -1"), ContainsSubstring("overflow"));
  CHECK_THAT(error_of("-(-big - 1)"), ContainsSubstring("overflow"));
  CHECK_THAT(error_of("9223372036854775808"), ContainsSubstring("overflows int64"));
  CHECK_THAT(error_of(""), ContainsSubstring("empty"));
  CHECK_THAT(error_of("   "), ContainsSubstring("empty"));
  CHECK_THAT(error_of("n +"), ContainsSubstring("unexpected end"));
  CHECK_THAT(error_of("(n"), ContainsSubstring("missing ')'"));
  CHECK_THAT(error_of("n)"), ContainsSubstring("unexpected ')'"));
  CHECK_THAT(error_of("3n"), ContainsSubstring("bad number"));
  CHECK_THAT(error_of("n ^ 2"), ContainsSubstring("unexpected '^'"));
  CHECK_THAT(error_of("n * 1.5"), ContainsSubstring("unexpected '.'"));
  CHECK_THAT(error_of(std::string(300, '1')), ContainsSubstring("longer than"));
  CHECK_THAT(error_of(std::string(40, '(') + "n" + std::string(40, ')')), ContainsSubstring("nested deeper"));
  CHECK_THAT(error_of(std::string(40, '-') + "n"), ContainsSubstring("nested deeper"));
  // The message quotes the expression.
  CHECK_THAT(error_of("k * 2"), ContainsSubstring("\"k * 2\""));
}

TEST_CASE("size_expr_symbols lists identifiers without evaluating", "[tasks][expr]") {
  CHECK(size_expr_symbols("rows * cols + rows / 0") == std::vector<std::string>{"cols", "rows"});
  CHECK(size_expr_symbols("42").empty());
  CHECK_THROWS_AS(size_expr_symbols("rows *"), std::invalid_argument);
}
