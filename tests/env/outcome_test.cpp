// The outcome vocabulary (sandbox/outcome.hpp) and the spec's tables (protocol/PROTOCOL.md
// sections 4, 8 and 9) checked against each other and against the protocol's error codes, so the
// spec cannot drift from what the server sends.
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "protocol/codec.hpp"
#include "sandbox/outcome.hpp"

using d2k::protocol::ErrorCode;
using d2k::sandbox::Outcome;

namespace {

std::string protocol_md() {
  std::ifstream in(std::string(D2K_SOURCE_DIR) + "/protocol/PROTOCOL.md");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The lines of the section whose heading starts with `heading`, up to the next "## ".
std::vector<std::string> section(const std::string& doc, const std::string& heading) {
  std::vector<std::string> out;
  std::istringstream in(doc);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) inside = line.rfind(heading, 0) == 0;
    else if (inside) out.push_back(line);
  }
  REQUIRE_FALSE(out.empty());
  return out;
}

std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::size_t at = row.find('|');
  while (at != std::string::npos) {
    const std::size_t next = row.find('|', at + 1);
    if (next == std::string::npos) break;
    std::string c = row.substr(at + 1, next - at - 1);
    c.erase(0, c.find_first_not_of(' '));
    c.erase(c.find_last_not_of(' ') + 1);
    out.push_back(c);
    at = next;
  }
  return out;
}

// The first `name` in backticks of a cell.
std::string first_code(const std::string& cell) {
  const auto a = cell.find('`');
  const auto b = a == std::string::npos ? a : cell.find('`', a + 1);
  return b == std::string::npos ? std::string() : cell.substr(a + 1, b - a - 1);
}

std::vector<ErrorCode> all_error_codes() {
  std::vector<ErrorCode> out;
  for (int i = 0; i <= static_cast<int>(ErrorCode::internal); ++i) out.push_back(static_cast<ErrorCode>(i));
  return out;
}

std::vector<Outcome> all_outcomes() {
  std::vector<Outcome> out;
  for (int i = 0; i <= static_cast<int>(Outcome::bad_job); ++i) out.push_back(static_cast<Outcome>(i));
  return out;
}

}  // namespace

TEST_CASE("every outcome has one name, and names read back to the same outcome") {
  std::set<std::string_view> names;
  for (Outcome o : all_outcomes()) {
    const std::string_view name = d2k::sandbox::to_string(o);
    CHECK(names.insert(name).second);
    CHECK(d2k::sandbox::outcome_from_string(name) == o);
  }
  CHECK(names.size() == d2k::sandbox::kOutcomeNames.size());
  CHECK_FALSE(d2k::sandbox::outcome_from_string("crashed"));
  CHECK_FALSE(d2k::sandbox::outcome_from_string(""));
  CHECK_FALSE(d2k::sandbox::outcome_from_string("OK"));
  // Wire strings as the runner, the evaluator and the reply have always spelled them.
  CHECK(d2k::sandbox::to_string(Outcome::sandbox_violation) == "sandbox_violation");
  CHECK(d2k::sandbox::to_string(Outcome::internal_error) == "internal_error");
}

TEST_CASE("the runner's kinds fold into the evaluator's, the evaluator's into a step's") {
  using d2k::sandbox::evaluator_outcome_of_runner;
  using d2k::sandbox::is_step_outcome;
  using d2k::sandbox::step_outcome_of_evaluation;
  CHECK(evaluator_outcome_of_runner(Outcome::entry_error) == Outcome::runtime_error);
  CHECK(evaluator_outcome_of_runner(Outcome::load_error) == Outcome::runtime_error);
  CHECK(evaluator_outcome_of_runner(Outcome::setup_error) == Outcome::internal_error);
  CHECK(evaluator_outcome_of_runner(Outcome::bad_job) == Outcome::internal_error);
  CHECK(evaluator_outcome_of_runner(Outcome::flagged) == Outcome::flagged);
  CHECK(evaluator_outcome_of_runner(Outcome::runtime_error) == Outcome::runtime_error);
  std::set<std::string_view> steps;
  for (Outcome o : all_outcomes()) {
    CHECK(is_step_outcome(step_outcome_of_evaluation(o)));
    if (is_step_outcome(o)) {
      CHECK(step_outcome_of_evaluation(o) == o);
      steps.insert(d2k::sandbox::to_string(o));
    } else {
      CHECK(step_outcome_of_evaluation(o) == Outcome::runtime_error);
    }
  }
  CHECK(steps == std::set<std::string_view>{"ok", "compile_error", "incorrect", "runtime_error", "timeout",
                                            "sandbox_violation", "flagged"});
}

TEST_CASE("PROTOCOL.md section 4 lists exactly the protocol's error codes, with their retryability") {
  std::set<std::string> listed;
  for (const auto& line : section(protocol_md(), "## 4.")) {
    const auto c = cells(line);
    if (c.size() < 4 || c[0].empty() || c[0][0] != '`') continue;
    const std::string code = first_code(c[0]);
    INFO(code);
    CHECK(listed.insert(code).second);
    const auto parsed = d2k::protocol::error_code_from_string(code);
    REQUIRE(parsed);
    CHECK((c[1].find("yes") != std::string::npos) == d2k::protocol::is_retryable(*parsed));
  }
  std::set<std::string> expected;
  for (ErrorCode e : all_error_codes()) expected.insert(std::string(d2k::protocol::to_string(e)));
  CHECK(listed == expected);
}

TEST_CASE("PROTOCOL.md section 8 names every failed step's code, each an error code or a step outcome") {
  std::set<std::string> listed;
  bool in_table = false;
  for (const auto& line : section(protocol_md(), "## 8.")) {
    if (line.find("`last.error.code`") != std::string::npos) {  // the header row
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (line.empty()) break;
    const auto c = cells(line);
    if (c.size() < 3 || c[2].empty() || c[2][0] != '`') continue;
    listed.insert(first_code(c[2]));
  }
  REQUIRE_FALSE(listed.empty());
  for (const auto& code : listed) {
    INFO(code);
    const auto outcome = d2k::sandbox::outcome_from_string(code);
    CHECK((d2k::protocol::error_code_from_string(code) || (outcome && d2k::sandbox::is_step_outcome(*outcome))));
  }
  // Every way a step can fail is in the table: the step outcomes (all but ok) and the server's
  // own failure while evaluating.
  for (Outcome o : all_outcomes())
    if (d2k::sandbox::is_step_outcome(o) && o != Outcome::ok) CHECK(listed.count(std::string(d2k::sandbox::to_string(o))));
  CHECK(listed.count(std::string(d2k::protocol::to_string(ErrorCode::internal))));
}

TEST_CASE("PROTOCOL.md section 9 lists the evaluation statuses a reply carries") {
  std::string row;
  for (const auto& line : section(protocol_md(), "## 9."))
    if (line.rfind("| `last.evaluation?`", 0) == 0) row = line;
  REQUIRE_FALSE(row.empty());
  const auto open = row.find("`status` (");
  REQUIRE(open != std::string::npos);
  const std::string list = row.substr(open + 10, row.find(')', open) - open - 10);
  std::set<std::string> listed;
  for (std::size_t a = list.find('`'); a != std::string::npos; a = list.find('`', list.find('`', a + 1) + 1))
    listed.insert(list.substr(a + 1, list.find('`', a + 1) - a - 1));
  std::set<std::string> expected;  // an evaluation's statuses: the step outcomes after a compile
  for (Outcome o : all_outcomes())
    if (d2k::sandbox::is_step_outcome(o) && o != Outcome::compile_error) expected.insert(std::string(d2k::sandbox::to_string(o)));
  CHECK(listed == expected);
}
