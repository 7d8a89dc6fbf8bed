#include "env/reply_cache.hpp"

namespace d2k::env {

void ReplyCache::drop_oldest(SessionReplies& s) {
  bytes_ -= s.replies.front().second->size();
  s.bytes -= s.replies.front().second->size();
  s.replies.pop_front();
}

void ReplyCache::remember(const std::string& session, std::uint64_t id, ReplyBytes reply) {
  auto& s = by_session_[session];
  s.bytes += reply->size();
  bytes_ += reply->size();
  s.replies.emplace_back(id, std::move(reply));
  while (s.replies.size() > per_session_ || (s.replies.size() > 1 && s.bytes > session_bytes_)) drop_oldest(s);
  if (auto pos = session_pos_.find(session); pos != session_pos_.end()) session_order_.erase(pos->second);
  session_pos_[session] = session_order_.insert(session_order_.end(), session);
  trim_total(session);
}

// Over the total: the oldest reset/close replies go first, then the older step replies of the
// sessions least recently stepped; never a session's latest step reply.
void ReplyCache::trim_total(const std::string& keep_session) {
  while (bytes_ > total_bytes_ && !lru_.empty()) {
    bytes_ -= lru_.back().second->size();
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  for (auto it = session_order_.begin(); bytes_ > total_bytes_ && it != session_order_.end(); ++it) {
    if (*it == keep_session) continue;
    auto& s = by_session_.at(*it);
    while (bytes_ > total_bytes_ && s.replies.size() > 1) drop_oldest(s);
  }
  if (bytes_ > total_bytes_) {
    auto& s = by_session_.at(keep_session);
    while (bytes_ > total_bytes_ && s.replies.size() > 1) drop_oldest(s);
  }
}

ReplyBytes ReplyCache::find(const std::string& session, std::uint64_t id) const {
  auto it = by_session_.find(session);
  if (it == by_session_.end()) return nullptr;
  for (const auto& [rid, bytes] : it->second.replies)
    if (rid == id) return bytes;
  return nullptr;
}

void ReplyCache::forget_session(const std::string& session) {
  auto it = by_session_.find(session);
  if (it == by_session_.end()) return;
  bytes_ -= it->second.bytes;
  by_session_.erase(it);
  if (auto pos = session_pos_.find(session); pos != session_pos_.end()) {
    session_order_.erase(pos->second);
    session_pos_.erase(pos);
  }
}

std::string ReplyCache::reset_key(const Route& route, std::uint64_t id) {
  std::string key = "c";
  for (const auto& f : route) {  // length-prefixed, so no two routes give one key
    key += std::to_string(f.size());
    key += ':';
    key += f;
  }
  return key + "#" + std::to_string(id);
}

std::string ReplyCache::close_key(const std::string& session, std::uint64_t id) {
  return "x" + session + "#" + std::to_string(id);
}

void ReplyCache::remember_global(const std::string& key, ReplyBytes reply) {
  if (auto old = index_.find(key); old != index_.end()) {
    bytes_ -= old->second->second->size();
    lru_.erase(old->second);
  }
  bytes_ += reply->size();
  lru_.emplace_front(key, std::move(reply));
  index_[key] = lru_.begin();
  while (lru_.size() > global_) {
    bytes_ -= lru_.back().second->size();
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  // The reply just stored stays even when it alone is over the budget (a retry needs it).
  while (bytes_ > total_bytes_ && lru_.size() > 1) {
    bytes_ -= lru_.back().second->size();
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  if (bytes_ > total_bytes_) {
    for (auto it = session_order_.begin(); bytes_ > total_bytes_ && it != session_order_.end(); ++it) {
      auto& s = by_session_.at(*it);
      while (bytes_ > total_bytes_ && s.replies.size() > 1) drop_oldest(s);
    }
  }
}

ReplyBytes ReplyCache::find_global(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : it->second->second;
}

}  // namespace d2k::env
