// The tool actions on the wire (protocol/messages.hpp): typed fields, defaults, typed refusals.
#include "catch.hpp"
#include "protocol/messages.hpp"

using namespace d2k::protocol;

namespace {

Action parse(Value action) {
  Value req = {{"v", 1}, {"id", 1}, {"op", "step"}, {"session", "s"}, {"action", std::move(action)}};
  return parse_step(parse_envelope(req), Limits{}).action;
}

ErrorCode code_of(Value action, std::string* field = nullptr) {
  try {
    parse(std::move(action));
  } catch (const Error& e) {
    if (field) *field = e.field;
    return e.code;
  }
  return ErrorCode::internal;
}

}  // namespace

TEST_CASE("profile, sanitize and disassemble parse with their defaults", "[tools][protocol]") {
  const Action p = parse({{"type", "profile"}, {"workload", "pow2_64m"}, {"sections", {"memory", "occupancy"}}});
  REQUIRE(std::holds_alternative<Profile>(p));
  CHECK(std::get<Profile>(p).workload == "pow2_64m");
  CHECK(std::get<Profile>(p).sections == std::vector<std::string>{"memory", "occupancy"});
  CHECK(action_name(p) == "profile");
  CHECK(is_tool(p));
  CHECK(std::get<Profile>(parse({{"type", "profile"}})).sections.empty());

  const Action z = parse({{"type", "sanitize"}});
  CHECK(std::get<Sanitize>(z).tool == "memcheck");
  CHECK(std::get<Sanitize>(parse({{"type", "sanitize"}, {"tool", "racecheck"}})).tool == "racecheck");

  const Action d = parse({{"type", "disassemble"}, {"kernel", "add"}, {"ptx", true}, {"max_bytes", 4096}});
  const auto& dd = std::get<Disassemble>(d);
  CHECK(dd.kernel == "add");
  CHECK(dd.sass);
  CHECK(dd.ptx);
  CHECK(dd.max_bytes == 4096u);
  CHECK_FALSE(is_tool(parse({{"type", "evaluate"}})));
}

TEST_CASE("mistyped tool fields are invalid_action naming the field", "[tools][protocol]") {
  std::string field;
  CHECK(code_of({{"type", "profile"}, {"sections", "memory"}}, &field) == ErrorCode::invalid_action);
  CHECK(field == "action.sections");
  CHECK(code_of({{"type", "profile"}, {"sections", {1, 2}}}, &field) == ErrorCode::invalid_action);
  CHECK(code_of({{"type", "profile"}, {"workload", 3}}, &field) == ErrorCode::invalid_action);
  CHECK(field == "action.workload");
  CHECK(code_of({{"type", "disassemble"}, {"ptx", "yes"}}, &field) == ErrorCode::invalid_action);
  CHECK(field == "action.ptx");
  CHECK(code_of({{"type", "disassemble"}, {"max_bytes", 0}}, &field) == ErrorCode::invalid_action);
  CHECK(code_of({{"type", "sanitize"}, {"tool", std::string(100, 'x')}}, &field) == ErrorCode::too_large);
  Value many = Value::array();
  for (int i = 0; i < 17; ++i) many.push_back("memory");
  CHECK(code_of({{"type", "profile"}, {"sections", many}}, &field) == ErrorCode::invalid_action);
}
