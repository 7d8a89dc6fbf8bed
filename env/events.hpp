// Live episode events for `d2k watch` (issue 22.2), on an XPUB socket whose subscriptions the server
// grants itself (ZMQ_XPUB_MANUAL): what a subscriber asks for is read with the subscriber's CURVE key
// (the message property "User-Id" that the server's ZAP handler set) and granted only within the
// sessions that key opened. Topics: the session's watch id without CURVE; "<owner key>:<watch id>"
// with it, so a subscription "abcd" from key K becomes "K:abcd" and matches K's sessions only.
// The session id never goes out. Without CURVE every subscriber is unauthenticated: events carry no
// agent source then (strip_source) unless the operator says so (`events_source`, a single-user
// host). Used only by the server loop thread.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "protocol/curve.hpp"

namespace d2k::env {

class Events {
 public:
  // Binds `endpoint` in `context`. With `server_key`, the socket is a CURVE server in ZAP domain
  // `zap_domain` (the server's ZAP handler must be bound in the same context). Throws
  // std::runtime_error when the endpoint cannot be bound.
  Events(zmq::context_t& context, const std::string& endpoint, const std::optional<curve::KeyPair>& server_key,
         const std::string& zap_domain, bool source_without_curve = false);
  const std::string& endpoint() const { return bound_; }
  // For the loop's poll: readable when subscriptions arrived.
  void* handle() { return socket_.handle(); }
  // Grants the subscriptions that arrived (each within its subscriber's own sessions).
  void on_subscriptions();
  // Whether a subscription was ever granted: until then no event can reach anyone. (It stays true:
  // an unsubscription names a prefix, not who sent it, so counting them could silence a watcher.)
  bool watched() const { return watched_; }
  // Publishes an event of `session`, which `owner` opened ("" without CURVE). Never throws.
  void publish(const std::string& session, const std::string& owner, const nlohmann::json& event);

 private:
  zmq::socket_t socket_;
  bool curve_ = false;
  bool show_source_ = false;  // whole events (CURVE: to the key that opened the session; else events_source)
  bool watched_ = false;      // a subscription was granted (watched())
  std::string bound_;
};

// The topic of `session`'s events: its watch id, after "<owner>:" when it has an owner.
std::string event_topic(const std::string& owner, const std::string& session);
// Replaces agent source in an event (file contents, edit and patch text, compiler logs and
// messages) by "<N bytes>": what an unauthenticated subscriber may see.
void strip_source(nlohmann::json& event);

}  // namespace d2k::env
