// Typed requests of protocol v1 and the two reply shapes. Validation names the bad field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "protocol/codec.hpp"

namespace d2k::protocol {

// Every request: {v:1, id:<uint>, op:<str>, ...op fields}.
struct Envelope {
  std::uint64_t id = 0;
  std::string op;
  Value body;  // the whole request map
};

// Throws Error: bad_request (not a map, id missing/not uint, op not a string),
// version_mismatch (v missing or not 1), unknown_op (op not in the list below).
Envelope parse_envelope(const Value& request);

// Ops: hello, list_tasks, reset, step, observe, close, stats.
bool is_known_op(std::string_view op);

struct BudgetOptions {  // unset = server default; the server clamps to its configured maximum
  std::optional<std::uint32_t> max_steps;
  std::optional<std::uint32_t> max_compiles;
  std::optional<std::uint32_t> max_evaluations;
  std::optional<double> wall_seconds;
};

struct ResetRequest {
  std::string task;
  int layer = 0;                     // 0..3
  std::optional<std::uint64_t> seed;
  BudgetOptions options;             // from `options`
  std::string label;                 // options.label: free text, e.g. the agent/model name
};
ResetRequest parse_reset(const Envelope& request, const Limits& limits);

struct WriteFile { std::string path; std::string content; };
struct Edit { std::string path; std::string old_text; std::string new_text; };  // wire: old, new
struct Patch { std::string diff; };
struct Compile {};
struct Evaluate {};
struct Submit {};
// The agent's tools (PROTOCOL.md section "Tools"): each compiles the workspace first. Names from
// fixed lists (sections, sanitizer tools) are checked by sandbox/tools, which owns the lists.
struct Profile {
  std::string workload;               // a visible workload; empty: the largest
  std::vector<std::string> sections;  // empty: every section
};
struct Sanitize {
  std::string workload;               // empty: the smallest visible workload
  std::string tool = "memcheck";      // memcheck | racecheck | initcheck | synccheck
};
struct Disassemble {
  std::string kernel;                 // substring of a kernel's name; empty: every kernel
  bool sass = true;
  bool ptx = false;
  std::optional<std::uint32_t> max_bytes;  // listing text in the reply; the server caps it
};
using Action = std::variant<WriteFile, Edit, Patch, Compile, Evaluate, Submit, Profile, Sanitize, Disassemble>;
bool is_tool(const Action& action);    // profile, sanitize, disassemble
std::string_view action_name(const Action& action);  // "write_file", "edit", ...

struct StepRequest {
  std::string session;
  Action action;
};
// Throws Error{bad_request} for a missing/mistyped session, Error{invalid_action} for an action
// that is not a map, has an unknown type or mistyped fields, Error{too_large} for content over
// max_file_bytes. Path *semantics* (escapes etc.) are the workspace's to check.
StepRequest parse_step(const Envelope& request, const Limits& limits);

// observe / close: {session:<str>}.
std::string parse_session(const Envelope& request);

// {v:1, id, ok:true, ...fields}
Value make_ok_reply(std::uint64_t id, Value fields = Value::object());
// {v:1, id (nil when the request had none), ok:false, error:{code, message, retryable, field?}}
Value make_error_reply(std::optional<std::uint64_t> id, const Error& error);

}  // namespace d2k::protocol
