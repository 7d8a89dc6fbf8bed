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

TEST_CASE("byte budgets: per session and in all, never a session's latest step reply, freed on close") {
  // Issue 22.3: 16 replies of a 2 MiB workspace held ~30 MiB per session, with no bound in all.
  ReplyCache cache(16, 100, /*session_bytes=*/250, /*total_bytes=*/600);
  const std::string big(100, 'x');
  for (std::uint64_t id = 1; id <= 5; ++id) cache.remember("s1", id, bytes(big));
  CHECK(cache.bytes() == 200);  // 250 per session: two of 100 bytes
  CHECK(cache.find("s1", 3) == nullptr);
  CHECK(cache.find("s1", 4));
  CHECK(cache.find("s1", 5));
  // One reply over the session budget stays: a client that lost it can still retry it.
  cache.remember("s2", 1, bytes(std::string(400, 'y')));
  REQUIRE(cache.find("s2", 1));
  CHECK(cache.bytes() == 600);
  // Over the total: s1 (stepped least recently) loses its older reply, never its latest.
  cache.remember("s3", 1, bytes(big));
  CHECK(cache.bytes() <= 600);
  CHECK(cache.find("s1", 4) == nullptr);
  CHECK(cache.find("s1", 5));
  CHECK(cache.find("s2", 1));
  CHECK(cache.find("s3", 1));
  // Reset/close replies count too, and go first.
  cache.remember_global("g1", bytes(big));
  CHECK(cache.bytes() <= 600 + 100);
  cache.forget_session("s1");
  cache.forget_session("s2");
  cache.forget_session("s3");
  CHECK(cache.sessions() == 0);
  CHECK(cache.bytes() == cache.global_size() * 100);
}
