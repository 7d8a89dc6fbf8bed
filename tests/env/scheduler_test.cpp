// The worker pools' order (issue 22.6): jobs of one tenant in submission order, tenants served
// round-robin, so a tenant with many jobs queued does not make another's wait behind all of them.
// Orders are counted, not timed.
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "catch.hpp"
#include "env/scheduler.hpp"

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
