// d2k::Client: the C++ client of protocol v1 over a ZeroMQ DEALER socket. Used by the CLI, the
// tests and the benches. Error replies become ClientError here, in one place.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <zmq.hpp>

#include "protocol/codec.hpp"
#include "protocol/curve.hpp"

namespace d2k {

struct ClientError : std::runtime_error {
  ClientError(protocol::ErrorCode c, const std::string& message, bool retry, std::string bad_field);
  protocol::ErrorCode code;
  bool retryable;
  std::string field;
};

class Client {
 public:
  struct Options {
    std::chrono::milliseconds timeout{120000};  // per attempt
    int retries = 2;                            // resends of the same request id after a timeout
    // CURVE (a server that serves beyond loopback, or any server with keys): the server's public key
    // and this client's pair. Unset: taken from D2K_SERVER_KEY / D2K_CLIENT_KEY when those are set
    // (curve::client_keys_from_env), else none (plain ZeroMQ).
    std::optional<curve::ClientKeys> curve;
    bool curve_from_env = true;
  };

  explicit Client(const std::string& endpoint);
  Client(const std::string& endpoint, Options options);

  // Sends {v:1, id, op, ...fields} and returns the ok reply. Throws ClientError for an error reply
  // (and ErrorCode::timeout when no reply came after all retries).
  protocol::Value call(std::string_view op, protocol::Value fields = protocol::Value::object());

  protocol::Value hello() { return call("hello"); }
  protocol::Value list_tasks() { return call("list_tasks"); }
  protocol::Value reset(const std::string& task, int layer, std::optional<std::uint64_t> seed = std::nullopt,
                        protocol::Value options = protocol::Value::object());
  protocol::Value step(const std::string& session, protocol::Value action);
  protocol::Value observe(const std::string& session);
  protocol::Value close(const std::string& session);
  protocol::Value stats() { return call("stats"); }

  // Sends raw bytes as one frame and returns the decoded reply (for malformed-input tests).
  protocol::Value raw(std::string_view bytes);
  // Sends a request with a caller-chosen id (for retry tests).
  protocol::Value call_with_id(std::uint64_t id, std::string_view op, protocol::Value fields);

  std::uint64_t last_id() const { return next_id_ - 1; }

 private:
  protocol::Value exchange(std::uint64_t id, const std::string& bytes);
  // Throws ClientError{too_large} before sending a request over the server's hello.limits (a
  // frame far over the limit is dropped by the server without a reply; waiting would hang).
  void check_limits(std::string_view op, const protocol::Value& request, std::size_t bytes);

  Options options_;
  zmq::context_t context_{1};
  zmq::socket_t socket_;
  std::uint64_t next_id_;  // starts at a random value: ids of clients sharing a session must not collide
  protocol::Limits limits_;
  std::optional<protocol::Value> server_limits_;  // hello.limits, asked for on first need
};

}  // namespace d2k
