// cancel_all_jails(): a running jail dies at once, later jails are refused. Final for the
// process, hence its own test binary.
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <future>

#include "catch.hpp"
#include "helpers.hpp"
#include "sandbox/jail.hpp"

using namespace d2k::sandbox;
using d2k::sandbox::testing::shell;
using d2k::sandbox::testing::TempDir;

TEST_CASE("cancel_all_jails kills running jails and refuses new ones", "[jail][cancel]") {
  TempDir dir;
  int watch = inotify_init1(IN_CLOEXEC);
  REQUIRE(watch >= 0);
  REQUIRE(inotify_add_watch(watch, dir.path().c_str(), IN_CLOSE_WRITE) >= 0);

  auto spec = shell("echo up > /flag/ready; exec sleep 100");
  spec.mounts = {{dir.path(), "/flag", true}};
  spec.deadline = std::chrono::seconds(50);
  auto running = std::async(std::launch::async, [&] { return run_jailed(spec); });

  // The jail wrote /flag/ready: it is registered and running.
  pollfd p{watch, POLLIN, 0};
  REQUIRE(poll(&p, 1, 20000) == 1);
  close(watch);

  const auto t0 = std::chrono::steady_clock::now();
  cancel_all_jails();
  JailOutcome out = running.get();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  CHECK(out.started);
  CHECK(out.signal == SIGKILL);
  CHECK_FALSE(out.timed_out);

  JailOutcome later = run_jailed(shell("echo never"));
  CHECK_FALSE(later.started);
  CHECK(later.setup_error == "cancelled");
  CHECK(later.output.empty());
}
