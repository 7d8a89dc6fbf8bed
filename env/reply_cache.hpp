// The retry caches (PROTOCOL.md section 6): a retried request id gets the reply it got the first
// time, byte-identical, and its work never runs twice. `step` replies are kept per session (the
// last N of each); `reset` and `close` replies in one global LRU, keyed by who may retry them.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "env/route.hpp"

namespace d2k::env {

using ReplyBytes = std::shared_ptr<const std::string>;  // an encoded reply

class ReplyCache {
 public:
  ReplyCache(std::size_t per_session, std::size_t global) : per_session_(per_session), global_(global) {}

  // Step replies of one session; the oldest go once it holds `per_session`.
  void remember(const std::string& session, std::uint64_t id, ReplyBytes reply);
  ReplyBytes find(const std::string& session, std::uint64_t id) const;
  void forget_session(const std::string& session);  // the session is gone, and its replies with it

  // `reset` is retried by the same client (routing identity), `close` by anyone naming the session.
  static std::string reset_key(const Route& route, std::uint64_t id);
  static std::string close_key(const std::string& session, std::uint64_t id);
  void remember_global(const std::string& key, ReplyBytes reply);
  ReplyBytes find_global(const std::string& key) const;

  std::size_t sessions() const { return by_session_.size(); }
  std::size_t global_size() const { return lru_.size(); }

 private:
  std::size_t per_session_, global_;
  std::unordered_map<std::string, std::deque<std::pair<std::uint64_t, ReplyBytes>>> by_session_;
  std::list<std::pair<std::string, ReplyBytes>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

}  // namespace d2k::env
