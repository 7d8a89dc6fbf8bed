#include "env/reply_cache.hpp"

namespace d2k::env {

void ReplyCache::remember(const std::string& session, std::uint64_t id, ReplyBytes reply) {
  auto& replies = by_session_[session];
  replies.emplace_back(id, std::move(reply));
  while (replies.size() > per_session_) replies.pop_front();
}

ReplyBytes ReplyCache::find(const std::string& session, std::uint64_t id) const {
  auto it = by_session_.find(session);
  if (it == by_session_.end()) return nullptr;
  for (const auto& [rid, bytes] : it->second)
    if (rid == id) return bytes;
  return nullptr;
}

void ReplyCache::forget_session(const std::string& session) { by_session_.erase(session); }

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
  if (auto old = index_.find(key); old != index_.end()) lru_.erase(old->second);
  lru_.emplace_front(key, std::move(reply));
  index_[key] = lru_.begin();
  while (lru_.size() > global_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

ReplyBytes ReplyCache::find_global(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : it->second->second;
}

}  // namespace d2k::env
