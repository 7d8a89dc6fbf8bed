// The retry caches: per-session step replies (the last N), the global reset/close LRU.
#include "catch.hpp"
#include "env/reply_cache.hpp"

using d2k::env::ReplyBytes;
using d2k::env::ReplyCache;

namespace {
ReplyBytes bytes(const std::string& s) { return std::make_shared<const std::string>(s); }
}  // namespace

TEST_CASE("a session keeps its last N step replies, by request id") {
  ReplyCache cache(3, 10);
  for (std::uint64_t id = 1; id <= 4; ++id) cache.remember("s1", id, bytes("reply " + std::to_string(id)));
  CHECK(cache.find("s1", 1) == nullptr);  // the oldest went
  REQUIRE(cache.find("s1", 2));
  CHECK(*cache.find("s1", 2) == "reply 2");
  CHECK(*cache.find("s1", 4) == "reply 4");
  CHECK(cache.find("s2", 4) == nullptr);  // ids are per session
  cache.remember("s2", 4, bytes("other"));
  CHECK(*cache.find("s2", 4) == "other");
  CHECK(*cache.find("s1", 4) == "reply 4");
  CHECK(cache.sessions() == 2);
  cache.forget_session("s1");
  CHECK(cache.find("s1", 4) == nullptr);
  CHECK(cache.sessions() == 1);
}

TEST_CASE("the global cache keeps the most recent reset/close replies") {
  ReplyCache cache(16, 2);
  cache.remember_global("a", bytes("A"));
  cache.remember_global("b", bytes("B"));
  cache.remember_global("c", bytes("C"));
  CHECK(cache.find_global("a") == nullptr);
  CHECK(*cache.find_global("b") == "B");
  CHECK(*cache.find_global("c") == "C");
  cache.remember_global("c", bytes("C2"));  // one entry per key
  CHECK(cache.global_size() == 2);
  CHECK(*cache.find_global("c") == "C2");
  cache.remember_global("d", bytes("D"));
  CHECK(cache.find_global("b") == nullptr);
  CHECK(*cache.find_global("c") == "C2");
}

TEST_CASE("reset keys are per routing identity, close keys per session") {
  const auto k1 = ReplyCache::reset_key({"ab", "c"}, 7);
  CHECK(k1 != ReplyCache::reset_key({"a", "bc"}, 7));  // frame boundaries count
  CHECK(k1 != ReplyCache::reset_key({"ab", "c"}, 8));
  CHECK(k1 == ReplyCache::reset_key({"ab", "c"}, 7));
  CHECK(ReplyCache::close_key("s1", 7) != ReplyCache::close_key("s2", 7));
  CHECK(ReplyCache::close_key("s1", 7) != k1);
}
