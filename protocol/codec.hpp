// Wire codec of protocol v1: one MessagePack map per ZeroMQ frame, decoded with explicit limits
// into a dynamic value. The one place where protocol errors are typed (see protocol/PROTOCOL.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace d2k::protocol {

using Value = nlohmann::json;

inline constexpr std::uint64_t kVersion = 1;

// The fixed set of error codes (PROTOCOL.md lists each with its meaning and retryability).
enum class ErrorCode {
  bad_request,        // undecodable frame, wrong field type, missing field
  version_mismatch,   // v is not a version this server speaks
  unknown_op,         // op is not one of the ops
  unknown_session,    // no such session (never existed, closed or reaped)
  unknown_task,       // reset names a task the server does not have
  invalid_action,     // an action that is malformed or cannot apply (edit text absent, bad diff)
  path_violation,     // a workspace path that escapes, is absolute, too deep or badly named
  too_large,          // a message, string, file or workspace over its limit
  busy,               // the session already has an action in flight
  capacity,           // the server has no room for another session
  timeout,            // the work did not finish within its deadline
  sandbox_violation,  // the jailed process broke a rule (seccomp kill, forbidden file)
  no_gpu,             // evaluate/submit on a server without a usable GPU
  episode_ended,      // a step on an episode that has already ended
  budget_exhausted,   // the action's own budget (compiles, evaluations) is used up
  shutting_down,      // the server is stopping and takes no new work
  storage_unavailable,  // the server could not write its records durably (disk full): resend, same id
  internal,           // a server bug: reported, never a crash
};

std::string_view to_string(ErrorCode code);
std::optional<ErrorCode> error_code_from_string(std::string_view name);
bool is_retryable(ErrorCode code);  // busy, capacity, timeout, shutting_down, storage_unavailable

// The typed error thrown by decode/validation; `field` names the bad field ("action.path").
struct Error : std::runtime_error {
  Error(ErrorCode c, std::string message, std::string field = {});
  ErrorCode code;
  std::string field;
};

// Explicit limits on what a peer may send. Defaults are what `d2k serve` uses.
struct Limits {
  std::size_t max_message_bytes = 8u << 20;  // one frame
  std::size_t max_depth = 16;                 // nesting of maps/arrays
  std::size_t max_string_bytes = 1u << 20;    // any one string or binary
  std::size_t max_array_items = 4096;
  std::size_t max_map_entries = 4096;
  std::size_t max_total_items = 1u << 18;     // array items + map entries in the whole message
  std::size_t max_file_bytes = 256u << 10;    // one workspace file
  std::size_t max_files = 32;                 // files in a workspace
  std::size_t max_path_bytes = 128;           // one workspace path
  std::size_t max_label_bytes = 256;          // reset's options.label
  // Strings (str and bin) must be well-formed UTF-8, so every decoded value can be written as
  // JSON (episode logs); a client reading a server it trusts may turn this off.
  bool require_utf8 = true;
};

// Bytes → value. Throws Error{bad_request} for anything that is not one well-formed MessagePack
// map within the limits (Error{too_large} for size, count and depth limits), naming what was
// wrong: truncated data, trailing bytes, invalid type bytes, extension types, non-string or
// duplicate map keys, invalid UTF-8. str and bin both become strings; float32/64 become doubles;
// non-negative integers become unsigned, negative ones signed.
Value decode(std::string_view bytes, const Limits& limits);

// The request id of a frame that is not decoded (over max_message_bytes): the unsigned `id` of
// the top-level map, found by walking its entries without decoding them (strings and binaries are
// skipped by their length). nullopt when the frame is not a map, has no unsigned `id`, is
// malformed or truncated before it, or holds more than `max_items` items before it.
std::optional<std::uint64_t> peek_request_id(std::string_view bytes, std::size_t max_items = 1u << 18);

// Value → bytes. Maps, arrays, strings, booleans, null, integers (unsigned when >= 0), doubles.
std::string encode(const Value& value);

// encode(value), and the offset in those bytes where the node `mark` (a pointer into `value`)
// begins; npos when `mark` is not inside `value`. For a reply encoded once and sent many times
// with one field changed in place (observe's clock, overwrite_float64).
struct Marked {
  std::string bytes;
  std::size_t at = std::string::npos;
};
Marked encode_marked(const Value& value, const Value* mark);

// Writes `d` over the float64 (0xcb and 8 bytes, how encode writes every double) at bytes[at];
// false, changing nothing, when there is none there.
bool overwrite_float64(std::string& bytes, std::size_t at, double d);

}  // namespace d2k::protocol
