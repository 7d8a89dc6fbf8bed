// The session table: ids, GPU slots, open/closing lookups, idle selection, counters.
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include <atomic>

#include "catch.hpp"
#include "env/session_table.hpp"
#include "protocol/codec.hpp"

using d2k::env::Episode;
using d2k::env::SessionTable;

namespace {

const d2k::tasks::TaskSet& task_set() {
  static const d2k::tasks::TaskSet set = d2k::tasks::load_tasks(D2K_TASKS_DIR);
  return set;
}

std::unique_ptr<Episode> episode(const std::string& id) {
  const d2k::tasks::Task* task = task_set().find("vector_add");
  REQUIRE(task);
  return std::make_unique<Episode>(id, *task, 1, 7, d2k::env::Budget{}, "", d2k::env::Workspace::Limits{});
}

// getrandom(2) seen by this test binary: the executable's definition is the one the server code
// links against, so a test can see whether ids come from the kernel's CSPRNG. Pass-through unless
// `script` is set, then it hands out `script` and counts the calls.
std::atomic<int> getrandom_calls{0};
const unsigned char* script = nullptr;

}  // namespace

extern "C" ssize_t getrandom(void* buf, size_t len, unsigned flags) {
  if (script) {
    ++getrandom_calls;
    std::memcpy(buf, script, len);
    script += len;
    return static_cast<ssize_t>(len);
  }
  return ::syscall(SYS_getrandom, buf, len, flags);
}

TEST_CASE("ids are 128 bits read from getrandom(2), nothing derived from earlier ids") {
  // Issue 22.1: ids were two outputs of one mt19937_64, rebuildable from ~150 earlier ids. Each id
  // must be exactly the 16 bytes the kernel's CSPRNG gave for it, so no id is a function of others.
  SessionTable table(0);
  unsigned char bytes[32];
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
  script = bytes;
  getrandom_calls = 0;
  const std::string a = table.new_id(), b = table.new_id();
  script = nullptr;
  CHECK(getrandom_calls == 2);
  CHECK(a == "0b30557a9fc4e90e33587da2c7ec1136");
  CHECK(b == "5b80a5caef14395e83a8cdf2173c6186");
}

TEST_CASE("new ids are 32 hex digits and distinct") {
  SessionTable table(0);
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = table.new_id();
    CHECK(id.size() == 32);
    CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(seen.insert(id).second);
  }
}

TEST_CASE("sessions go to the GPU with the fewest, and free their slot when erased") {
  SessionTable table(2);
  auto& a = table.open(episode("a"));
  auto& b = table.open(episode("b"));
  CHECK(a.gpu == 0);
  CHECK(b.gpu == 1);
  CHECK(table.gpu_sessions(0) == 1);
  CHECK(table.gpu_sessions(1) == 1);
  CHECK(table.open(episode("c")).gpu == 0);
  CHECK(table.erase("a", "closed"));
  CHECK(table.gpu_sessions(0) == 1);
  CHECK(table.open(episode("d")).gpu == 0);  // 0 and 1 both hold one: the first wins
  CHECK(table.open(episode("e")).gpu == 1);
  CHECK_FALSE(table.erase("a", "closed"));  // already gone
  CHECK(table.size() == 4);
  CHECK(table.opened() == 5);
  CHECK(table.ended() == 1);
  CHECK(table.end_reasons().at("closed") == 1);
}

TEST_CASE("without GPUs every session has slot 0") {
  SessionTable table(0);
  CHECK(table.open(episode("a")).gpu == 0);
  CHECK(table.open(episode("b")).gpu == 0);
  CHECK(table.erase("a", "idle_timeout"));
}

TEST_CASE("a closing session is found, but not for a new request") {
  SessionTable table(0);
  table.open(episode("a")).closing = true;
  CHECK(table.find("a") != nullptr);
  CHECK(table.find("zz") == nullptr);
  for (const char* id : {"a", "zz"}) {
    try {
      table.find_open(id);
      FAIL("expected unknown_session");
    } catch (const d2k::protocol::Error& e) {
      CHECK(e.code == d2k::protocol::ErrorCode::unknown_session);
      CHECK(e.field == "session");
    }
  }
  table.open(episode("b"));
  CHECK(table.find_open("b").episode->id() == "b");
}

TEST_CASE("idle: past the limit and nothing in flight") {
  SessionTable table(0);
  table.open(episode("a"));
  table.open(episode("b")).in_flight = 5;
  table.open(episode("c")).episode->end("submitted");
  const auto now = Episode::Clock::now();
  CHECK(table.idle(now, std::chrono::hours(1)).empty());
  auto idle = table.idle(now + std::chrono::hours(2), std::chrono::hours(1));
  std::sort(idle.begin(), idle.end());
  CHECK(idle == std::vector<std::string>{"a", "c"});
  CHECK(table.count_active() == 2);
}
