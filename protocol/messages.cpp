#include "protocol/messages.hpp"

#include <array>
#include <cmath>
#include <limits>

#include "protocol/detail/utf8.hpp"

namespace d2k::protocol {

namespace {

constexpr std::array<std::string_view, 7> kOps{"hello", "list_tasks", "reset", "step", "observe", "close", "stats"};
constexpr std::string_view kActionTypes =
    "write_file, edit, patch, compile, evaluate, submit, profile, sanitize, disassemble";
constexpr std::size_t kMaxErrorMessageBytes = 2048;

std::string type_name(const Value& v) {
  switch (v.type()) {
    case Value::value_t::null: return "nil";
    case Value::value_t::boolean: return "a boolean";
    case Value::value_t::number_integer:
    case Value::value_t::number_unsigned: return "an integer";
    case Value::value_t::number_float: return "a float";
    case Value::value_t::string: return "a string";
    case Value::value_t::binary: return "binary";
    case Value::value_t::array: return "an array";
    case Value::value_t::object: return "a map";
    case Value::value_t::discarded: break;
  }
  return "an unknown type";
}

// The member `key` of map `obj`, or nullptr when absent or nil (optional fields may be sent as nil).
const Value* member(const Value& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

[[noreturn]] void fail(ErrorCode code, const std::string& field, const std::string& what) {
  throw Error(code, "'" + field + "' " + what, field);
}

std::string require_string(const Value& obj, std::string_view key, const std::string& field, ErrorCode code) {
  const Value* v = member(obj, key);
  if (!v) fail(code, field, "is missing (a string)");
  if (!v->is_string()) fail(code, field, "must be a string, not " + type_name(*v));
  return v->get<std::string>();
}

// Integers arrive unsigned when >= 0; values built in C++ may be signed, so accept both.
bool as_uint(const Value& v, std::uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<std::uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {
    out = static_cast<std::uint64_t>(v.get<std::int64_t>());
    return true;
  }
  return false;
}

std::optional<std::uint32_t> optional_u32(const Value& obj, std::string_view key, const std::string& field,
                                          std::uint32_t min) {
  const Value* v = member(obj, key);
  if (!v) return std::nullopt;
  std::uint64_t n = 0;
  if (!as_uint(*v, n)) fail(ErrorCode::bad_request, field, "must be a non-negative integer, not " + type_name(*v));
  if (n < min) fail(ErrorCode::bad_request, field, "must be at least " + std::to_string(min));
  if (n > std::numeric_limits<std::uint32_t>::max())
    fail(ErrorCode::bad_request, field, "must be at most " + std::to_string(std::numeric_limits<std::uint32_t>::max()));
  return static_cast<std::uint32_t>(n);
}

void check_size(const std::string& s, std::size_t limit, const std::string& field) {
  if (s.size() > limit)
    throw Error(ErrorCode::too_large,
                "'" + field + "' is " + std::to_string(s.size()) + " bytes; the limit is " + std::to_string(limit),
                field);
}

Action parse_action(const Value& body, const Limits& limits) {
  const Value* a = member(body, "action");
  if (!a) fail(ErrorCode::invalid_action, "action", "is missing (a map with a 'type')");
  if (!a->is_object()) fail(ErrorCode::invalid_action, "action", "must be a map, not " + type_name(*a));
  const std::string type = require_string(*a, "type", "action.type", ErrorCode::invalid_action);
  auto text = [&](std::string_view key) {
    const std::string field = "action." + std::string(key);
    std::string s = require_string(*a, key, field, ErrorCode::invalid_action);
    return s;
  };
  if (type == "write_file") {
    WriteFile w{text("path"), text("content")};
    check_size(w.content, limits.max_file_bytes, "action.content");
    return w;
  }
  if (type == "edit") {
    Edit e{text("path"), text("old"), text("new")};
    check_size(e.old_text, limits.max_file_bytes, "action.old");
    check_size(e.new_text, limits.max_file_bytes, "action.new");
    return e;
  }
  if (type == "patch") return Patch{text("diff")};
  if (type == "compile") return Compile{};
  if (type == "evaluate") return Evaluate{};
  if (type == "submit") return Submit{};
  auto optional_text = [&](std::string_view key, std::size_t limit) {
    const std::string field = "action." + std::string(key);
    if (!member(*a, key)) return std::string();
    std::string s = require_string(*a, key, field, ErrorCode::invalid_action);
    check_size(s, limit, field);
    return s;
  };
  auto optional_bool = [&](std::string_view key, bool fallback) {
    const Value* v = member(*a, key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(ErrorCode::invalid_action, "action." + std::string(key), "must be a boolean, not " + type_name(*v));
    return v->get<bool>();
  };
  if (type == "profile") {
    Profile p{optional_text("workload", 256), {}};
    if (const Value* sections = member(*a, "sections")) {
      if (!sections->is_array()) fail(ErrorCode::invalid_action, "action.sections", "must be an array of strings, not " + type_name(*sections));
      if (sections->size() > 16) fail(ErrorCode::invalid_action, "action.sections", "has more than 16 entries");
      for (const Value& v : *sections) {
        if (!v.is_string()) fail(ErrorCode::invalid_action, "action.sections", "must hold strings, not " + type_name(v));
        check_size(v.get<std::string>(), 64, "action.sections");
        p.sections.push_back(v.get<std::string>());
      }
    }
    return p;
  }
  if (type == "sanitize") {
    Sanitize z{optional_text("workload", 256), optional_text("tool", 64)};
    if (z.tool.empty()) z.tool = "memcheck";
    return z;
  }
  if (type == "disassemble") {
    Disassemble d{optional_text("kernel", 1024), optional_bool("sass", true), optional_bool("ptx", false), {}};
    if (const Value* v = member(*a, "max_bytes")) {
      std::uint64_t n = 0;
      if (!as_uint(*v, n) || n == 0 || n > std::numeric_limits<std::uint32_t>::max())
        fail(ErrorCode::invalid_action, "action.max_bytes", "must be a positive integer (bytes of listing text)");
      d.max_bytes = static_cast<std::uint32_t>(n);
    }
    return d;
  }
  throw Error(ErrorCode::invalid_action,
              "unknown action type '" + detail::sanitize_utf8(type, 64) + "'; the types are " + std::string(kActionTypes),
              "action.type");
}

}  // namespace

bool is_known_op(std::string_view op) {
  for (auto known : kOps)
    if (known == op) return true;
  return false;
}

Envelope parse_envelope(const Value& request) {
  if (!request.is_object()) throw Error(ErrorCode::bad_request, "a request must be a map, not " + type_name(request));
  Envelope env;
  const Value* id = member(request, "id");
  if (!id) fail(ErrorCode::bad_request, "id", "is missing (an unsigned integer >= 1, fresh for each request)");
  if (!as_uint(*id, env.id)) fail(ErrorCode::bad_request, "id", "must be an unsigned integer, not " + type_name(*id));
  if (env.id == 0) fail(ErrorCode::bad_request, "id", "must be at least 1");

  const Value* v = member(request, "v");
  std::uint64_t version = 0;
  if (!v) fail(ErrorCode::version_mismatch, "v", "is missing; this server speaks protocol version 1 (send v: 1)");
  if (!as_uint(*v, version) || version != kVersion)
    fail(ErrorCode::version_mismatch, "v",
         "is " + (v->is_number() ? v->dump() : type_name(*v)) + "; this server speaks protocol version 1");

  const Value* op = member(request, "op");
  if (!op) fail(ErrorCode::bad_request, "op", "is missing (a string)");
  if (!op->is_string()) fail(ErrorCode::bad_request, "op", "must be a string, not " + type_name(*op));
  env.op = op->get<std::string>();
  if (!is_known_op(env.op))
    throw Error(ErrorCode::unknown_op,
                "unknown op '" + detail::sanitize_utf8(env.op, 64) +
                    "'; the ops are hello, list_tasks, reset, step, observe, close, stats",
                "op");
  if (env.op == "hello")  // hello's one field (section 7.1): only its type is checked
    if (const Value* client = member(request, "client"); client && !client->is_string())
      fail(ErrorCode::bad_request, "client", "must be a string (the client's name and version), not " + type_name(*client));
  env.body = request;
  return env;
}

ResetRequest parse_reset(const Envelope& request, const Limits& limits) {
  const Value& body = request.body;
  ResetRequest r;
  r.task = require_string(body, "task", "task", ErrorCode::bad_request);
  if (r.task.empty()) fail(ErrorCode::bad_request, "task", "is empty; list_tasks lists the task ids");

  const Value* layer = member(body, "layer");
  if (!layer) fail(ErrorCode::bad_request, "layer", "is missing (an integer 0..3)");
  std::uint64_t l = 0;
  bool integral = as_uint(*layer, l);
  if (!integral && !layer->is_number_integer())
    fail(ErrorCode::bad_request, "layer", "must be an integer 0..3, not " + type_name(*layer));
  if (!integral || l > 3) fail(ErrorCode::bad_request, "layer", "must be 0, 1, 2 or 3, not " + layer->dump());
  r.layer = static_cast<int>(l);

  if (const Value* seed = member(body, "seed")) {
    std::uint64_t s = 0;
    if (!as_uint(*seed, s)) fail(ErrorCode::bad_request, "seed", "must be an unsigned integer, not " + type_name(*seed));
    r.seed = s;
  }

  if (const Value* options = member(body, "options")) {
    if (!options->is_object()) fail(ErrorCode::bad_request, "options", "must be a map, not " + type_name(*options));
    r.options.max_steps = optional_u32(*options, "max_steps", "options.max_steps", 1);
    r.options.max_compiles = optional_u32(*options, "max_compiles", "options.max_compiles", 0);
    r.options.max_evaluations = optional_u32(*options, "max_evaluations", "options.max_evaluations", 0);
    if (const Value* w = member(*options, "wall_seconds")) {
      if (!w->is_number()) fail(ErrorCode::bad_request, "options.wall_seconds", "must be a number, not " + type_name(*w));
      double seconds = w->get<double>();
      if (!std::isfinite(seconds) || seconds <= 0)
        fail(ErrorCode::bad_request, "options.wall_seconds", "must be a finite number above 0");
      r.options.wall_seconds = seconds;
    }
    if (member(*options, "label")) {
      r.label = require_string(*options, "label", "options.label", ErrorCode::bad_request);
      check_size(r.label, limits.max_label_bytes, "options.label");
    }
  }
  return r;
}

std::string_view action_name(const Action& action) {
  struct Name {
    std::string_view operator()(const WriteFile&) const { return "write_file"; }
    std::string_view operator()(const Edit&) const { return "edit"; }
    std::string_view operator()(const Patch&) const { return "patch"; }
    std::string_view operator()(const Compile&) const { return "compile"; }
    std::string_view operator()(const Evaluate&) const { return "evaluate"; }
    std::string_view operator()(const Submit&) const { return "submit"; }
    std::string_view operator()(const Profile&) const { return "profile"; }
    std::string_view operator()(const Sanitize&) const { return "sanitize"; }
    std::string_view operator()(const Disassemble&) const { return "disassemble"; }
  };
  return std::visit(Name{}, action);
}

bool is_tool(const Action& action) {
  return std::holds_alternative<Profile>(action) || std::holds_alternative<Sanitize>(action) ||
         std::holds_alternative<Disassemble>(action);
}

StepRequest parse_step(const Envelope& request, const Limits& limits) {
  StepRequest r;
  r.session = parse_session(request);
  r.action = parse_action(request.body, limits);
  return r;
}

std::string parse_session(const Envelope& request) {
  std::string session = require_string(request.body, "session", "session", ErrorCode::bad_request);
  if (session.empty()) fail(ErrorCode::bad_request, "session", "is empty; reset returns a session id");
  return session;
}

Value make_ok_reply(std::uint64_t id, Value fields) {
  if (fields.is_null()) fields = Value::object();
  if (!fields.is_object())
    throw Error(ErrorCode::internal, "reply fields must be a map, not " + type_name(fields));
  fields["v"] = kVersion;
  fields["id"] = id;
  fields["ok"] = true;
  return fields;
}

Value make_error_reply(std::optional<std::uint64_t> id, const Error& error) {
  Value e = {{"code", std::string(to_string(error.code))},
             {"message", detail::sanitize_utf8(error.what(), kMaxErrorMessageBytes)},
             {"retryable", is_retryable(error.code)}};
  if (!error.field.empty()) e["field"] = detail::sanitize_utf8(error.field, 256);
  Value reply = {{"v", kVersion}, {"ok", false}, {"error", std::move(e)}};
  reply["id"] = id ? Value(*id) : Value(nullptr);
  return reply;
}

}  // namespace d2k::protocol
