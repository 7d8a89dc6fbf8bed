// Typed requests (envelope, reset, step, observe/close) and the reply builders, over the wire
// bytes where it matters: every request is encoded, decoded and parsed as the server does.
#include <set>
#include <string>

#include "catch.hpp"
#include "protocol/messages.hpp"

// Substring matcher under both Catch2 v2 (Debian) and v3 (the GPU machine).
#if __has_include(<catch2/catch_all.hpp>)
inline auto Contains(const std::string& text) { return Catch::Matchers::ContainsSubstring(text); }
#else
inline auto Contains(const std::string& text) { return Catch::Matchers::Contains(text); }
#endif

using namespace d2k::protocol;

namespace {

Value request(const std::string& op, Value fields = Value::object()) {
  fields["v"] = 1;
  fields["id"] = 7;
  fields["op"] = op;
  return fields;
}

// What the server does with a frame: decode, then read the envelope.
Envelope wire(const Value& req) { return parse_envelope(decode(encode(req), Limits{})); }

template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no protocol::Error thrown");
  throw std::logic_error("unreachable");
}

void check_error(const Error& e, ErrorCode code, const std::string& field) {
  INFO("message: " << e.what());
  CHECK(to_string(e.code) == to_string(code));
  CHECK(e.field == field);
  CHECK(std::string(e.what()).size() > 10);
}

Value step_with(Value action) { return request("step", {{"session", "s-1"}, {"action", std::move(action)}}); }

}  // namespace

TEST_CASE("error codes: names round-trip, retryable set is fixed") {
  const ErrorCode all[] = {ErrorCode::bad_request, ErrorCode::version_mismatch, ErrorCode::unknown_op,
                           ErrorCode::unknown_session, ErrorCode::unknown_task, ErrorCode::invalid_action,
                           ErrorCode::path_violation, ErrorCode::too_large, ErrorCode::busy, ErrorCode::capacity,
                           ErrorCode::timeout, ErrorCode::sandbox_violation, ErrorCode::no_gpu,
                           ErrorCode::episode_ended, ErrorCode::budget_exhausted, ErrorCode::shutting_down,
                           ErrorCode::storage_unavailable, ErrorCode::internal};
  std::set<std::string_view> names;
  for (ErrorCode c : all) {
    names.insert(to_string(c));
    REQUIRE(error_code_from_string(to_string(c)).has_value());
    CHECK(*error_code_from_string(to_string(c)) == c);
  }
  CHECK(names.size() == 18);
  CHECK(to_string(ErrorCode::invalid_action) == "invalid_action");
  CHECK_FALSE(error_code_from_string("nope").has_value());
  for (ErrorCode c : all) {
    bool expected = c == ErrorCode::busy || c == ErrorCode::capacity || c == ErrorCode::timeout ||
                    c == ErrorCode::shutting_down || c == ErrorCode::storage_unavailable;
    CHECK(is_retryable(c) == expected);
  }
}

TEST_CASE("envelope: a valid request of every op") {
  for (const char* op : {"hello", "list_tasks", "reset", "step", "observe", "close", "stats"}) {
    CHECK(is_known_op(op));
    Envelope e = wire(request(op, {{"extra", "ignored"}}));
    CHECK(e.id == 7);
    CHECK(e.op == op);
    CHECK(e.body["extra"] == "ignored");
  }
  CHECK_FALSE(is_known_op("Hello"));
}

TEST_CASE("envelope: each malformed field gives its own code and field") {
  check_error(error_of([] { parse_envelope(Value::array({1})); }), ErrorCode::bad_request, "");
  Value r = request("hello");
  r.erase("id");
  check_error(error_of([&] { wire(r); }), ErrorCode::bad_request, "id");
  r["id"] = "7";
  check_error(error_of([&] { wire(r); }), ErrorCode::bad_request, "id");
  r["id"] = -3;
  check_error(error_of([&] { wire(r); }), ErrorCode::bad_request, "id");
  r["id"] = 0;
  check_error(error_of([&] { wire(r); }), ErrorCode::bad_request, "id");
  r["id"] = 1.0;
  check_error(error_of([&] { wire(r); }), ErrorCode::bad_request, "id");
  r["id"] = 18446744073709551615ull;
  CHECK(wire(r).id == 18446744073709551615ull);

  Value v = request("hello");
  v.erase("v");
  check_error(error_of([&] { wire(v); }), ErrorCode::version_mismatch, "v");
  v["v"] = 2;
  Error two = error_of([&] { wire(v); });
  check_error(two, ErrorCode::version_mismatch, "v");
  CHECK_THAT(two.what(), Contains("version 1"));
  v["v"] = "1";
  check_error(error_of([&] { wire(v); }), ErrorCode::version_mismatch, "v");

  Value o = request("hello");
  o.erase("op");
  check_error(error_of([&] { wire(o); }), ErrorCode::bad_request, "op");
  o["op"] = 3;
  check_error(error_of([&] { wire(o); }), ErrorCode::bad_request, "op");
  o["op"] = "dance";
  Error unknown = error_of([&] { wire(o); });
  check_error(unknown, ErrorCode::unknown_op, "op");
  CHECK_THAT(unknown.what(), Contains("'dance'"));
}

TEST_CASE("reset: full request, defaults, nil optionals, unknown fields ignored") {
  ResetRequest r = parse_reset(
      wire(request("reset", {{"task", "vector_add"},
                             {"layer", 2},
                             {"seed", 99},
                             {"future_field", {1, 2}},
                             {"options",
                              {{"max_steps", 10},
                               {"max_compiles", 0},
                               {"max_evaluations", 3},
                               {"wall_seconds", 30.5},
                               {"label", "agent-7"},
                               {"unknown", true}}}})),
      Limits{});
  CHECK(r.task == "vector_add");
  CHECK(r.layer == 2);
  CHECK(r.seed == 99u);
  CHECK(r.options.max_steps == 10u);
  CHECK(r.options.max_compiles == 0u);
  CHECK(r.options.max_evaluations == 3u);
  CHECK(r.options.wall_seconds == 30.5);
  CHECK(r.label == "agent-7");

  ResetRequest d = parse_reset(wire(request("reset", {{"task", "t"}, {"layer", 0}, {"seed", nullptr}})), Limits{});
  CHECK_FALSE(d.seed.has_value());
  CHECK_FALSE(d.options.max_steps.has_value());
  CHECK_FALSE(d.options.wall_seconds.has_value());
  CHECK(d.label.empty());
  // wall_seconds may be an integer.
  CHECK(parse_reset(wire(request("reset", {{"task", "t"}, {"layer", 3}, {"options", {{"wall_seconds", 5}}}})), Limits{})
            .options.wall_seconds == 5.0);
}

TEST_CASE("reset: wrong types and ranges name the field") {
  auto bad = [](Value fields, const std::string& field, ErrorCode code = ErrorCode::bad_request) {
    INFO("fields: " << fields.dump());
    check_error(error_of([&] { parse_reset(wire(request("reset", fields)), Limits{}); }), code, field);
  };
  bad({{"layer", 0}}, "task");
  bad({{"task", 5}, {"layer", 0}}, "task");
  bad({{"task", ""}, {"layer", 0}}, "task");
  bad({{"task", "t"}}, "layer");
  bad({{"task", "t"}, {"layer", -1}}, "layer");
  bad({{"task", "t"}, {"layer", 4}}, "layer");
  bad({{"task", "t"}, {"layer", "1"}}, "layer");
  bad({{"task", "t"}, {"layer", 1.0}}, "layer");
  bad({{"task", "t"}, {"layer", 0}, {"seed", -1}}, "seed");
  bad({{"task", "t"}, {"layer", 0}, {"seed", "x"}}, "seed");
  bad({{"task", "t"}, {"layer", 0}, {"options", "fast"}}, "options");
  bad({{"task", "t"}, {"layer", 0}, {"options", {{"max_steps", 0}}}}, "options.max_steps");
  bad({{"task", "t"}, {"layer", 0}, {"options", {{"max_steps", "10"}}}}, "options.max_steps");
  bad({{"task", "t"}, {"layer", 0}, {"options", {{"max_steps", 4294967296ull}}}}, "options.max_steps");
  bad({{"task", "t"}, {"layer", 0}, {"options", {{"max_compiles", -2}}}}, "options.max_compiles");
  bad({{"task", "t"}, {"layer", 0}, {"options", {{"max_evaluations", 1.5}}}}, "options.max_evaluations");
  bad({{"task", "t"}, {"layer", 0}, {"options", {{"wall_seconds", 0}}}}, "options.wall_seconds");
  bad({{"task", "t"}, {"layer", 0}, {"options", {{"wall_seconds", "1"}}}}, "options.wall_seconds");
  bad({{"task", "t"}, {"layer", 0}, {"options", {{"label", 3}}}}, "options.label");
  bad({{"task", "t"}, {"layer", 0}, {"options", {{"label", std::string(257, 'x')}}}}, "options.label",
      ErrorCode::too_large);
}

TEST_CASE("step: every action type parses from the wire") {
  Limits limits;
  auto action_of = [&](Value a) { return parse_step(wire(step_with(std::move(a))), limits); };

  StepRequest w = action_of({{"type", "write_file"}, {"path", "kernel.cu"}, {"content", "x"}});
  CHECK(w.session == "s-1");
  REQUIRE(std::holds_alternative<WriteFile>(w.action));
  CHECK(std::get<WriteFile>(w.action).path == "kernel.cu");
  CHECK(std::get<WriteFile>(w.action).content == "x");
  CHECK(action_name(w.action) == "write_file");

  StepRequest e = action_of({{"type", "edit"}, {"path", "k.cu"}, {"old", "a"}, {"new", ""}});
  REQUIRE(std::holds_alternative<Edit>(e.action));
  CHECK(std::get<Edit>(e.action).old_text == "a");
  CHECK(std::get<Edit>(e.action).new_text.empty());
  CHECK(action_name(e.action) == "edit");

  StepRequest p = action_of({{"type", "patch"}, {"diff", "--- a/k.cu\n+++ b/k.cu\n"}});
  REQUIRE(std::holds_alternative<Patch>(p.action));
  CHECK(std::get<Patch>(p.action).diff == "--- a/k.cu\n+++ b/k.cu\n");
  CHECK(action_name(p.action) == "patch");

  CHECK(action_name(action_of({{"type", "compile"}}).action) == "compile");
  CHECK(action_name(action_of({{"type", "evaluate"}, {"ignored", 1}}).action) == "evaluate");
  CHECK(action_name(action_of({{"type", "submit"}}).action) == "submit");

  // A content exactly at the file limit is accepted.
  CHECK_NOTHROW(action_of({{"type", "write_file"}, {"path", "k.cu"}, {"content", std::string(limits.max_file_bytes, 'a')}}));
}

TEST_CASE("step: wrong session and action shapes name the field") {
  Limits limits;
  auto bad = [&](Value req, ErrorCode code, const std::string& field) {
    INFO("request: " << req.dump().substr(0, 200));
    check_error(error_of([&] { parse_step(wire(req), limits); }), code, field);
  };
  bad(request("step", {{"action", {{"type", "compile"}}}}), ErrorCode::bad_request, "session");
  bad(request("step", {{"session", 12}, {"action", {{"type", "compile"}}}}), ErrorCode::bad_request, "session");
  bad(request("step", {{"session", ""}, {"action", {{"type", "compile"}}}}), ErrorCode::bad_request, "session");
  bad(request("step", {{"session", "s"}}), ErrorCode::invalid_action, "action");
  bad(step_with("compile"), ErrorCode::invalid_action, "action");
  bad(step_with(Value::array({"compile"})), ErrorCode::invalid_action, "action");
  bad(step_with(Value::object()), ErrorCode::invalid_action, "action.type");
  bad(step_with({{"type", 1}}), ErrorCode::invalid_action, "action.type");
  Error unknown = error_of([&] { parse_step(wire(step_with({{"type", "rm_rf"}})), limits); });
  check_error(unknown, ErrorCode::invalid_action, "action.type");
  CHECK_THAT(unknown.what(), Contains("write_file, edit, patch, compile, evaluate, submit"));

  bad(step_with({{"type", "write_file"}, {"content", "x"}}), ErrorCode::invalid_action, "action.path");
  bad(step_with({{"type", "write_file"}, {"path", 3}, {"content", "x"}}), ErrorCode::invalid_action, "action.path");
  bad(step_with({{"type", "write_file"}, {"path", "k.cu"}}), ErrorCode::invalid_action, "action.content");
  bad(step_with({{"type", "write_file"}, {"path", "k.cu"}, {"content", {1}}}), ErrorCode::invalid_action,
      "action.content");
  bad(step_with({{"type", "write_file"}, {"path", "k.cu"}, {"content", std::string(limits.max_file_bytes + 1, 'a')}}),
      ErrorCode::too_large, "action.content");
  bad(step_with({{"type", "edit"}, {"path", "k.cu"}, {"new", "b"}}), ErrorCode::invalid_action, "action.old");
  bad(step_with({{"type", "edit"}, {"path", "k.cu"}, {"old", "a"}, {"new", false}}), ErrorCode::invalid_action,
      "action.new");
  bad(step_with({{"type", "edit"}, {"path", "k.cu"}, {"old", "a"}, {"new", std::string(limits.max_file_bytes + 1, 'b')}}),
      ErrorCode::too_large, "action.new");
  bad(step_with({{"type", "patch"}}), ErrorCode::invalid_action, "action.diff");
  bad(step_with({{"type", "patch"}, {"diff", nullptr}}), ErrorCode::invalid_action, "action.diff");
}

TEST_CASE("observe/close: the session field") {
  CHECK(parse_session(wire(request("observe", {{"session", "abc"}}))) == "abc");
  CHECK(parse_session(wire(request("close", {{"session", "abc"}}))) == "abc");
  check_error(error_of([] { parse_session(wire(request("close"))); }), ErrorCode::bad_request, "session");
  check_error(error_of([] { parse_session(wire(request("observe", {{"session", {{"id", 1}}}}))); }),
              ErrorCode::bad_request, "session");
}

TEST_CASE("ok replies: every op's reply shape survives the wire") {
  Value observation = {
      {"task",
       {{"id", "vector_add"}, {"title", "Vector add"}, {"category", "elementwise"}, {"statement", "z = x + y"},
        {"signature", "int d2k_vector_add(...)"}, {"entry", "d2k_vector_add"}, {"main_file", "kernel.cu"},
        {"workloads", Value::array({{{"name", "small"}, {"sizes", {{"n", 1024}}}}})}}},
      {"layer", 1},
      {"guidance", Value::array({{{"layer", 1}, {"title", "Algorithm"}, {"text", "grid-stride"}}})},
      {"files", {{"kernel.cu", "// starter\n"}}},
      {"last",
       {{"action", "compile"},
        {"ok", false},
        {"compile",
         {{"ok", false}, {"cached", false}, {"seconds", 1.25}, {"exit_status", 1}, {"timed_out", false},
          {"diagnostics", Value::array({{{"file", "kernel.cu"}, {"line", 3}, {"column", 7}, {"severity", "error"},
                                         {"message", "expected ';'"}}})},
          {"log", "kernel.cu(3): error"}, {"log_truncated", false}}}}},
      {"budget",
       {{"steps_used", 1}, {"max_steps", 50}, {"compiles_used", 1}, {"max_compiles", 20}, {"evaluations_used", 0},
        {"max_evaluations", 10}, {"seconds_used", 2.5}, {"wall_seconds", 1800.0}}},
      {"step", 1},
      {"done", false},
      {"end_reason", nullptr}};
  Value info = {{"end_reason", nullptr}, {"layer", 1}, {"task", "vector_add"}};
  std::vector<Value> replies = {
      {{"server", "d2k-gym"}, {"version", "0.1.0"}, {"protocol", {1}}, {"gpus", Value::array()},
       {"toolchain", {{"nvcc", "13.0"}, {"host_compiler", "g++ 12"}}},
       {"limits", {{"max_message_bytes", 8388608}, {"max_depth", 16}}}, {"config", {{"max_sessions", 64}}}},
      {{"tasks", Value::array({{{"id", "vector_add"}, {"title", "Vector add"}, {"category", "elementwise"},
                                {"layers", {0, 1, 2, 3}}, {"workloads", 2}}})}},
      {{"session", "s-1"}, {"observation", observation}, {"info", info}},
      {{"observation", observation}, {"reward", -0.1}, {"terminated", false}, {"truncated", false}, {"info", info}},
      {{"observation", observation}, {"info", info}},
      {{"session", "s-1"}, {"end_reason", "closed"}, {"steps", 1}},
      {{"uptime_s", 12.5}, {"sessions", {{"active", 1}, {"ended", 0}, {"total_opened", 1}}}, {"requests", 9},
       {"errors", 0}, {"in_flight", 0}, {"compile", {{"workers", 2}, {"queued", 0}}}, {"gpus", Value::array()}},
  };
  for (const Value& fields : replies) {
    Value reply = make_ok_reply(12, fields);
    CHECK(reply["v"] == 1);
    CHECK(reply["id"] == 12);
    CHECK(reply["ok"] == true);
    Value back = decode(encode(reply), Limits{});
    CHECK(back == reply);
    CHECK(encode(back) == encode(reply));
  }
  CHECK(make_ok_reply(3) == Value({{"v", 1}, {"id", 3}, {"ok", true}}));
  CHECK_THROWS_AS(make_ok_reply(3, Value::array()), Error);
}

TEST_CASE("error replies: shape, nil id, field only when known, retryable, safe message") {
  Value r = make_error_reply(9, Error(ErrorCode::invalid_action, "unknown action type 'x'", "action.type"));
  CHECK(r["v"] == 1);
  CHECK(r["id"] == 9);
  CHECK(r["ok"] == false);
  CHECK(r["error"]["code"] == "invalid_action");
  CHECK(r["error"]["message"] == "unknown action type 'x'");
  CHECK(r["error"]["retryable"] == false);
  CHECK(r["error"]["field"] == "action.type");
  CHECK(decode(encode(r), Limits{}) == r);

  Value n = make_error_reply(std::nullopt, Error(ErrorCode::bad_request, "truncated MessagePack"));
  REQUIRE(n.contains("id"));
  CHECK(n["id"].is_null());
  CHECK_FALSE(n["error"].contains("field"));
  CHECK(decode(encode(n), Limits{})["id"].is_null());

  CHECK(make_error_reply(1, Error(ErrorCode::busy, "in flight"))["error"]["retryable"] == true);
  CHECK(make_error_reply(1, Error(ErrorCode::shutting_down, "bye"))["error"]["retryable"] == true);

  // A message carrying invalid UTF-8 or megabytes of text stays decodable and bounded.
  std::string ugly = "bad \xff\xfe bytes " + std::string(100000, 'x');
  Value u = make_error_reply(1, Error(ErrorCode::internal, ugly));
  std::string msg = u["error"]["message"];
  CHECK(msg.size() <= 2048);
  CHECK(msg.rfind("bad ?? bytes", 0) == 0);
  CHECK_NOTHROW(decode(encode(u), Limits{}));

  // The errors the codec raises become replies the same way.
  try {
    decode(std::string("\x81\xa1", 2), Limits{});
    FAIL("decoded a truncated map");
  } catch (const Error& e) {
    Value t = make_error_reply(std::nullopt, e);
    CHECK(t["error"]["code"] == "bad_request");
    CHECK_THAT(t["error"]["message"].get<std::string>(), Contains("truncated"));
  }
}
