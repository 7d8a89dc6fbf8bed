#include "env/events.hpp"

#include <array>
#include <string_view>

#include "env/log.hpp"
#include "env/recorder.hpp"

namespace d2k::env {

using nlohmann::json;

namespace {

// Every string equal to `secret` (the session id, wherever a request or reply names it) → `shown`.
void replace_id(json& j, const std::string& secret, const std::string& shown) {
  if (j.is_string()) {
    if (j.get_ref<const std::string&>() == secret) j = shown;
  } else if (j.is_structured()) {
    for (auto& item : j) replace_id(item, secret, shown);
  }
}

json placeholder(const json& j) {
  return j.is_string() ? json("<" + std::to_string(j.get_ref<const std::string&>().size()) + " bytes>") : json("<redacted>");
}

// Keys whose string values are, or may quote, agent source.
constexpr std::array<std::string_view, 6> kSourceKeys = {"content", "old", "new", "diff", "log", "message"};

}  // namespace

std::string event_topic(const std::string& owner, const std::string& session) {
  return owner.empty() ? watch_id(session) : owner + ":" + watch_id(session);
}

void strip_source(json& event) {
  if (event.is_array()) {
    for (auto& item : event) strip_source(item);
    return;
  }
  if (!event.is_object()) return;
  for (auto& [key, value] : event.items()) {
    if (key == "files" && value.is_object()) {
      for (auto& [path, content] : value.items()) content = placeholder(content);
    } else if (value.is_string()) {
      for (std::string_view k : kSourceKeys)
        if (key == k) value = placeholder(value);
    } else {
      strip_source(value);
    }
  }
}

Events::Events(zmq::context_t& context, const std::string& endpoint, const std::optional<curve::KeyPair>& server_key,
               const std::string& zap_domain, bool source_without_curve)
    : socket_(context, zmq::socket_type::xpub),
      curve_(server_key.has_value()),
      show_source_(curve_ || source_without_curve) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::sndhwm, 10000);
  socket_.set(zmq::sockopt::xpub_manual, 1);  // subscriptions are the server's to grant (on_subscriptions)
  if (server_key) {
    socket_.set(zmq::sockopt::curve_server, 1);
    socket_.set(zmq::sockopt::curve_secretkey, server_key->secret_key);
    socket_.set(zmq::sockopt::zap_domain, zap_domain);
  }
  try {
    socket_.bind(endpoint);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error("cannot bind the episode events endpoint " + endpoint + ": " + e.what());
  }
  bound_ = socket_.get(zmq::sockopt::last_endpoint);
}

void Events::on_subscriptions() {
  for (;;) {
    zmq::message_t m;
    try {
      if (!socket_.recv(m, zmq::recv_flags::dontwait)) return;
    } catch (const zmq::error_t& e) {
      log_warn(std::string("events: ") + e.what());
      return;
    }
    if (m.size() == 0 || (m.data<char>()[0] != 0 && m.data<char>()[0] != 1)) continue;  // not a (un)subscription
    const bool subscribe = m.data<char>()[0] == 1;
    std::string owner;
    if (curve_) {
      const char* key = nullptr;
      try {
        key = m.gets("User-Id");
      } catch (const zmq::error_t&) {
      }
      if (!key || !*key) continue;  // an unauthenticated subscriber cannot be here; grant nothing
      owner = key;
    }
    // A subscriber's prefix P becomes "<its key>:P": only topics of the sessions it opened match.
    std::string granted = (owner.empty() ? "" : owner + ":") + std::string(m.data<char>() + 1, m.size() - 1);
    try {
      if (subscribe) {
        socket_.set(zmq::sockopt::subscribe, granted);
        watched_ = true;
      } else
        socket_.set(zmq::sockopt::unsubscribe, granted);
    } catch (const zmq::error_t& e) {
      log_warn(std::string("events: subscription not granted: ") + e.what());
    }
  }
}

void Events::publish(const std::string& session, const std::string& owner, const json& event) {
  try {
    const std::string topic = event_topic(owner, session);
    json shown = event;
    replace_id(shown, session, watch_id(session));
    if (!show_source_) strip_source(shown);
    std::vector<std::uint8_t> bytes = json::to_msgpack(shown);
    socket_.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    socket_.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait);
  } catch (const std::exception& e) {
    log_warn(std::string("episode event dropped: ") + e.what());
  }
}

}  // namespace d2k::env
