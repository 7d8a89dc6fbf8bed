#include "protocol/client.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <random>
#include <thread>
#include <utility>

#include "protocol/messages.hpp"

namespace d2k {

using protocol::ErrorCode;
using protocol::Value;

ClientError::ClientError(ErrorCode c, const std::string& message, bool retry, std::string bad_field)
    : std::runtime_error(std::string(protocol::to_string(c)) + ": " + message),
      code(c),
      retryable(retry),
      field(std::move(bad_field)) {}

Client::Client(const std::string& endpoint) : Client(endpoint, Options{}) {}

Client::Client(const std::string& endpoint, Options options)
    : options_(options),
      socket_(context_, zmq::socket_type::dealer),
      next_id_((std::random_device{}() % (1u << 30)) * 1024 + 1) {
  socket_.set(zmq::sockopt::linger, 0);
  limits_.max_message_bytes = 256u << 20;  // replies carry whole workspaces and logs
  limits_.max_string_bytes = 64u << 20;
  limits_.max_depth = 64;
  limits_.max_total_items = 1u << 24;
  limits_.max_array_items = 1u << 20;
  limits_.max_map_entries = 1u << 20;
  if (!options_.curve && options_.curve_from_env) options_.curve = curve::client_keys_from_env();
  if (options_.curve) curve::make_client(socket_.handle(), *options_.curve);
  socket_.connect(endpoint);
}

Value Client::exchange(std::uint64_t id, const std::string& bytes) {
  for (int attempt = 0; attempt <= options_.retries; ++attempt) {
    socket_.send(zmq::buffer(bytes), zmq::send_flags::none);
    auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      // A blocking receive bounded by the time left (not zmq_poll and then a receive: that is two
      // more system calls and a wake-up per reply, a tenth of a small round trip).
      socket_.set(zmq::sockopt::rcvtimeo, static_cast<int>(std::min<std::chrono::milliseconds::rep>(
                                               left.count(), std::numeric_limits<int>::max())));
      zmq::message_t msg;
      if (!socket_.recv(msg, zmq::recv_flags::none)) continue;  // timed out: the deadline decides
      Value reply = protocol::decode(std::string_view(static_cast<const char*>(msg.data()), msg.size()), limits_);
      auto rid = reply.find("id");
      // A reply to an earlier attempt of another request (e.g. after a timeout) is dropped.
      if (id != 0 && rid != reply.end() && rid->is_number_unsigned() && rid->get<std::uint64_t>() != id) continue;
      return reply;
    }
  }
  throw ClientError(ErrorCode::timeout, "no reply after " + std::to_string(options_.retries + 1) + " attempts",
                    true, "");
}

namespace {

// Requests up to this size go out without asking for the server's limits (far below any).
constexpr std::size_t kPrecheckBytes = 64u << 10;

// The longest string in a request: {bytes, field path}.
std::pair<std::size_t, std::string> longest_string(const Value& v, const std::string& path) {
  if (v.is_string()) return {v.get_ref<const std::string&>().size(), path};
  if (v.is_binary()) return {v.get_binary().size(), path};
  std::pair<std::size_t, std::string> best{0, ""};
  if (v.is_object()) {
    for (const auto& [key, item] : v.items()) {
      auto found = longest_string(item, path.empty() ? key : path + "." + key);
      if (found.first > best.first) best = std::move(found);
    }
  } else if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      auto found = longest_string(v[i], path + "[" + std::to_string(i) + "]");
      if (found.first > best.first) best = std::move(found);
    }
  }
  return best;
}

}  // namespace

void Client::check_limits(std::string_view op, const Value& request, std::size_t bytes) {
  if (bytes <= kPrecheckBytes || op == "hello") return;
  if (!server_limits_) {
    Value hello = call("hello");
    server_limits_ = hello.contains("limits") && hello["limits"].is_object() ? hello["limits"] : Value::object();
  }
  const protocol::Limits defaults;
  const auto max_message = server_limits_->value("max_message_bytes", defaults.max_message_bytes);
  if (bytes > max_message)
    throw ClientError(ErrorCode::too_large,
                      "the " + std::string(op) + " request is " + std::to_string(bytes) +
                          " bytes; the server takes at most " + std::to_string(max_message) +
                          " (hello.limits.max_message_bytes); nothing was sent",
                      false, "");
  const auto max_string = server_limits_->value("max_string_bytes", defaults.max_string_bytes);
  auto [size, field] = longest_string(request, "");
  if (size > max_string)
    throw ClientError(ErrorCode::too_large,
                      field + " is " + std::to_string(size) + " bytes; one string may be at most " +
                          std::to_string(max_string) + " (hello.limits.max_string_bytes); nothing was sent",
                      false, field);
}

Value Client::call_with_id(std::uint64_t id, std::string_view op, Value fields) {
  Value request = fields.is_object() ? std::move(fields) : Value::object();
  request["v"] = protocol::kVersion;
  request["id"] = id;
  request["op"] = std::string(op);
  std::string bytes = protocol::encode(request);
  check_limits(op, request, bytes.size());
  Value reply = exchange(id, bytes);
  // storage_unavailable: the server holds the result until it can log it; the same request with
  // the same id gets it then (PROTOCOL.md section 4). Resend, backing off, for up to one timeout.
  const auto give_up = std::chrono::steady_clock::now() + options_.timeout;
  for (auto pause = std::chrono::milliseconds(100);
       !reply.value("ok", false) && reply.contains("error") && reply["error"].is_object() &&
       reply["error"].value("code", "") == "storage_unavailable" && std::chrono::steady_clock::now() + pause < give_up;
       pause = std::min(pause * 2, std::chrono::milliseconds(5000))) {
    std::this_thread::sleep_for(pause);
    reply = exchange(id, bytes);
  }
  if (reply.value("ok", false)) return reply;
  const Value& e = reply.contains("error") ? reply["error"] : Value::object();
  auto code = protocol::error_code_from_string(e.value("code", "internal")).value_or(ErrorCode::internal);
  throw ClientError(code, e.value("message", "error reply without a message"), e.value("retryable", false),
                    e.value("field", ""));
}

Value Client::call(std::string_view op, Value fields) { return call_with_id(next_id_++, op, std::move(fields)); }

Value Client::reset(const std::string& task, int layer, std::optional<std::uint64_t> seed, Value options) {
  Value f = {{"task", task}, {"layer", layer}};
  if (seed) f["seed"] = *seed;
  if (options.is_object() && !options.empty()) f["options"] = std::move(options);
  return call("reset", std::move(f));
}

Value Client::step(const std::string& session, Value action) {
  return call("step", {{"session", session}, {"action", std::move(action)}});
}

Value Client::observe(const std::string& session) { return call("observe", {{"session", session}}); }

Value Client::close(const std::string& session) { return call("close", {{"session", session}}); }

Value Client::raw(std::string_view bytes) { return exchange(0, std::string(bytes)); }

}  // namespace d2k
