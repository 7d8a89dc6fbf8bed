// The worker pools' order (issue 22.6): jobs of one tenant in submission order, tenants served
// round-robin, so a tenant with many jobs queued does not make another's wait behind all of them.
// The episode-log sync threads take sessions the same way. Orders are counted, not timed.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "catch.hpp"
#include "env/log_sync.hpp"
#include "env/scheduler.hpp"

using d2k::env::LogFile;
using d2k::env::LogSyncer;
using d2k::env::WorkerPool;

namespace {

// Holds the pool's one worker until opened, and writes down what ran in which order.
struct Recorder {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = false, blocked = false;
  std::vector<std::string> ran;
  void block() {
    std::unique_lock lock(mutex);
    blocked = true;
    changed.notify_all();
    changed.wait(lock, [&] { return open; });
  }
  bool wait_blocked() {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(60), [&] { return blocked; });
  }
  void release() {
    std::lock_guard lock(mutex);
    open = true;
    changed.notify_all();
  }
  bool wait_ran(std::size_t n) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(60), [&] { return ran.size() >= n; });
  }
  void note(const std::string& what) {
    std::lock_guard lock(mutex);
    ran.push_back(what);
    changed.notify_all();
  }
};

}  // namespace

TEST_CASE("a worker pool serves tenants round-robin, each tenant's jobs in order", "[tenants][fair]") {
  Recorder r;
  WorkerPool pool("test", 1, nullptr);
  pool.submit([&] { r.block(); }, "flood");
  REQUIRE(r.wait_blocked());  // the one worker is busy: everything below queues
  for (int i = 0; i < 6; ++i) pool.submit([&r, i] { r.note("flood" + std::to_string(i)); }, "flood");
  pool.submit([&] { r.note("victim0"); }, "victim");
  pool.submit([&] { r.note("victim1"); }, "victim");
  pool.submit([&] { r.note("third0"); }, "third");
  CHECK(pool.queued() == 9);
  r.release();
  REQUIRE(r.wait_ran(9));
  // In submission order the victim's first job would be 7th, behind all six of the flood's.
  const std::vector<std::string> want = {"flood0", "victim0", "third0", "flood1", "victim1",
                                         "flood2", "flood3",  "flood4", "flood5"};
  CHECK(r.ran == want);
  CHECK(pool.queued() == 0);
}

TEST_CASE("a worker pool without tenants keeps submission order", "[tenants]") {
  Recorder r;
  WorkerPool pool("test", 1, nullptr);
  pool.submit([&] { r.block(); });
  REQUIRE(r.wait_blocked());
  for (int i = 0; i < 5; ++i) pool.submit([&r, i] { r.note(std::to_string(i)); });
  r.release();
  REQUIRE(r.wait_ran(5));
  CHECK(r.ran == std::vector<std::string>{"0", "1", "2", "3", "4"});
}

TEST_CASE("the log-sync threads take sessions round-robin between tenants", "[tenants][fair]") {
  // Issue 22.6: a session's replies wait for its log's fdatasync; with one client's many sessions
  // all waiting for a sync thread, another client's session waited behind every one of them.
  std::string tmpl = (std::filesystem::temp_directory_path() / "d2k-sync-order-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()));
  const std::filesystem::path dir = tmpl;
  const int fd = ::open((dir / "log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  auto file = std::make_shared<LogFile>(fd);
  Recorder r;
  std::atomic<int> done{0};
  {
    LogSyncer syncer(
        1, [&](const std::string&, std::uint64_t, int) { ++done; },
        [&](const std::string& session) {
          if (session == "first") r.block();
          else r.note(session);
        });
    syncer.request("first", file, 1, "flood");
    REQUIRE(r.wait_blocked());  // the one sync thread is busy: the rest wait for it
    for (int i = 0; i < 5; ++i) syncer.request("flood" + std::to_string(i), file, 1, "flood");
    syncer.request("victim", file, 1, "victim");
    syncer.request("flood0", file, 2, "flood");  // folded into flood0's queued sync, not queued again
    r.release();
    REQUIRE(r.wait_ran(6));
    CHECK(r.ran == std::vector<std::string>{"flood0", "victim", "flood1", "flood2", "flood3", "flood4"});
  }
  CHECK(done.load() == 7);
  std::filesystem::remove_all(dir);
}
