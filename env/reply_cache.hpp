// The retry caches (PROTOCOL.md section 6): a retried request id gets the reply it got the first
// time, byte-identical, and its work never runs twice. `step` replies are kept per session (the
// last N of each); `reset` and `close` replies in one global LRU, keyed by who may retry them.
// Both are bounded in bytes too (issue 22.3: a full workspace makes every reply megabytes): a
// session holds at most `session_bytes` of step replies and the whole cache at most `total_bytes`;
// over either, the oldest replies go first, except each session's latest step reply (the one a
// client that lost its reply retries), which stays until the session goes.
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
  static constexpr std::size_t kUnbounded = static_cast<std::size_t>(-1);
  ReplyCache(std::size_t per_session, std::size_t global, std::size_t session_bytes = kUnbounded,
             std::size_t total_bytes = kUnbounded)
      : per_session_(per_session), global_(global), session_bytes_(session_bytes), total_bytes_(total_bytes) {}

  // Step replies of one session; the oldest go once it holds `per_session` or `session_bytes`.
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
  std::size_t bytes() const { return bytes_; }  // held now, all caches together

 private:
  struct SessionReplies {
    std::deque<std::pair<std::uint64_t, ReplyBytes>> replies;  // oldest first
    std::size_t bytes = 0;
  };
  void drop_oldest(SessionReplies& s);
  void trim_total(const std::string& keep_session);

  std::size_t per_session_, global_, session_bytes_, total_bytes_;
  std::size_t bytes_ = 0;
  std::unordered_map<std::string, SessionReplies> by_session_;
  std::list<std::string> session_order_;  // sessions by their latest step reply, least recent first
  std::unordered_map<std::string, std::list<std::string>::iterator> session_pos_;
  std::list<std::pair<std::string, ReplyBytes>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

}  // namespace d2k::env
