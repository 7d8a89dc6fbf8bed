// CPU-only tests of the GPU-resident evaluation's pieces (docs/timing-protocol.md, "GPU-resident
// outputs"): descriptor passing over the runners' slots socket, the wire's slot roles, tolerances
// and checks, and the frame order of a slot owner. The GPU half is in gpu_resident_gpu_test.cpp.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "catch.hpp"
#include "sandbox/eval/evaluator.hpp"
#include "sandbox/eval/frames.hpp"
#include "sandbox/eval/runner_process.hpp"
#include "sandbox/runner/fd_pass.hpp"
#include "sandbox/runner/wire.hpp"
#include "tasks/loader/task.hpp"

using namespace d2k::runner;

namespace {
const d2k::tasks::Task& vector_add() {
  static const d2k::tasks::Task t = d2k::tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / "vector_add");
  return t;
}
std::string code(const std::function<void()>& f) {
  try {
    f();
  } catch (const WireError& e) {
    return e.code;
  }
  return "";
}
struct Pair {
  int a = -1, b = -1;
  Pair() { REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, &a) == 0); }
  ~Pair() {
    ::close(a);
    ::close(b);
  }
};
}  // namespace

TEST_CASE("gpu-resident: a descriptor crosses the slots socket and still names the same file", "[runner][resident]") {
  Pair p;
  const int mfd = memfd_create("slots-test", MFD_CLOEXEC);
  REQUIRE(mfd >= 0);
  REQUIRE(::write(mfd, "slots", 5) == 5);
  CHECK(send_fd(p.a, mfd) == "");
  ::close(mfd);  // the message in flight keeps the file alive
  std::string err;
  const int got = recv_fd(p.b, 1000, err);
  REQUIRE(got >= 0);
  CHECK(err.empty());
  char buf[8] = {};
  CHECK(::pread(got, buf, 5, 0) == 5);
  CHECK(std::string(buf) == "slots");
  CHECK((fcntl(got, F_GETFD) & FD_CLOEXEC) != 0);  // never leaks into a child
  ::close(got);
}

TEST_CASE("gpu-resident: recv_fd refuses a message without a descriptor, a closed peer and silence", "[runner][resident]") {
  {
    Pair p;
    REQUIRE(::send(p.a, "x", 1, 0) == 1);
    std::string err;
    CHECK(recv_fd(p.b, 1000, err) == -1);
    CHECK(err.find("without a descriptor") != std::string::npos);
  }
  {
    Pair p;
    std::string err;
    CHECK(recv_fd(p.b, 50, err) == -1);
    CHECK(err.find("in time") != std::string::npos);
    ::close(p.a);
    p.a = -1;
    CHECK(recv_fd(p.b, 1000, err) == -1);
    CHECK(err.find("closed") != std::string::npos);
  }
}

TEST_CASE("gpu-resident: slot roles, sizes and tolerances survive the wire; bad ones are typed", "[runner][resident][wire]") {
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[0]};
  Job job = make_job(vector_add(), wls, {1, 2}, "/x.so", TimingSpec{});
  CHECK(job_from_json(to_json(job)).gpu_slots == SlotsRole::none);
  job.gpu_slots = SlotsRole::owner;
  job.tolerances["f32"] = Tolerance{1e-6, 1e-5};
  Job back = job_from_json(to_json(job));
  CHECK(back.gpu_slots == SlotsRole::owner);
  REQUIRE(back.tolerances.count("f32") == 1);
  CHECK(back.tolerances["f32"].atol == 1e-6);
  CHECK(back.tolerances["f32"].rtol == 1e-5);
  job.gpu_slots = SlotsRole::user;
  job.gpu_slots_bytes = 0;
  CHECK(code([&] { job_from_json(to_json(job)); }) == "bad_job");  // a user must know what to map
  job.gpu_slots_bytes = 2ull << 20;
  CHECK(job_from_json(to_json(job)).gpu_slots_bytes == 2ull << 20);
  auto j = to_json(job);
  j["gpu_slots"] = "thief";
  CHECK(code([&] { job_from_json(j); }) == "bad_job");
  j = to_json(job);
  j["tolerances"] = {{"f32", {{"atol", -1}, {"rtol", 0}}}};
  CHECK(code([&] { job_from_json(j); }) == "bad_job");
}

TEST_CASE("gpu-resident: an owner's checks travel in its result, non-finite values included", "[runner][resident][wire]") {
  RunnerResult r;
  WorkloadResult w;
  w.name = "odd_1m";
  TensorCheck c;
  c.seed_index = -3;
  c.count = 100;
  c.mismatches = 2;
  c.nonfinite = 1;
  c.max_abs = INFINITY;
  c.max_rel = 0.5;
  c.first_bad = 7;
  c.first_bad_got = std::nan("");
  c.first_bad_want = 1.25;
  c.arg_index = 2;
  w.checks.push_back(c);
  r.workloads.push_back(w);
  const RunnerResult back = result_from_json(to_json(r));
  REQUIRE(back.workloads.size() == 1);
  REQUIRE(back.workloads[0].checks.size() == 1);
  const TensorCheck& b = back.workloads[0].checks[0];
  CHECK(b.seed_index == -3);
  CHECK(b.count == 100);
  CHECK(b.mismatches == 2);
  CHECK(b.nonfinite == 1);
  CHECK(std::isinf(b.max_abs));
  CHECK(b.max_rel == 0.5);
  CHECK(b.first_bad == 7);
  CHECK(std::isnan(b.first_bad_got));
  CHECK(b.first_bad_want == 1.25);
  CHECK(b.arg_index == 2);
  CHECK_FALSE(b.ok());
  // Counts that cannot be are refused.
  auto j = to_json(r);
  j["workloads"][0]["checks"][0]["mismatches"] = 101;
  CHECK(code([&] { result_from_json(j); }) == "bad_result");
  j = to_json(r);
  j["workloads"][0]["checks"][0]["max_abs"] = "lots";
  CHECK(code([&] { result_from_json(j); }) == "bad_result");
}

TEST_CASE("gpu-resident: an owner sends slots before any call and never a timing frame", "[runner][resident][frames]") {
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[0], &vector_add().workloads[1]};
  Job job = make_job(vector_add(), wls, {1}, "/ref.so", TimingSpec{});
  job.gpu_slots = SlotsRole::owner;  // keeps the candidate's timing spec (same layout)
  auto checker = [&] {
    FrameChecker c(job);
    REQUIRE(c.ready({{"event", "ready"}, {"seq", 0}}) == "");
    return c;
  };
  {
    FrameChecker c = checker();
    CHECK(c.accept({{"event", "slots"}, {"bytes", 1 << 21}, {"seq", 1}}) == "");
    CHECK(c.accept({{"event", "call"}, {"workload", 0}, {"seed", 0}, {"seq", 2}}) == "");
    CHECK(c.accept({{"event", "call"}, {"workload", 1}, {"seed", 0}, {"seq", 3}}) == "");
    CHECK(c.all_done());  // no timing phase for an owner, although its job's workload 1 is timed
    CHECK(c.accept({{"event", "result"}, {"seq", 4}}) == "");
  }
  {
    FrameChecker c = checker();
    CHECK(c.accept({{"event", "call"}, {"workload", 0}, {"seed", 0}, {"seq", 1}}) != "");  // slots first
  }
  {
    FrameChecker c = checker();
    CHECK(c.accept({{"event", "result"}, {"seq", 1}}) == "");  // a failing owner may end at once
  }
  {
    Job cand = job;
    cand.gpu_slots = SlotsRole::user;
    FrameChecker c(cand);
    REQUIRE(c.ready({{"event", "ready"}, {"seq", 0}}) == "");
    CHECK(c.accept({{"event", "slots"}, {"bytes", 1}, {"seq", 1}}) != "");  // only an owner sends slots
  }
}

TEST_CASE("gpu-resident: the switch is on by default, with the tight bound; the host path keeps the looser one",
          "[runner][resident]") {
  // On since the owner's phase snapshot closed the output rewrite there (docs/threat-model.md) and
  // the H200 flagged no honest kernel on it (2026-12-02 10:15Z, 10:22Z).
  const EvalConfig c;
  CHECK(c.gpu_resident);
  CHECK(c.bound.batch_rel_slack == 0.25);
  CHECK(c.host_bound.batch_rel_slack == 0.5);
}

TEST_CASE("gpu-resident: a pool's wait_started waits for spares still starting, bounded by its deadline", "[runner][resident][process]") {
  // A stand-in runner: says ready on fd 3 after 0.3 s of "start-up", then idles.
  const auto dir = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "resident-pool";
  std::filesystem::create_directories(dir);
  const auto script = dir / "slow-ready.sh";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\nsleep 0.3\necho '{\"event\":\"ready\",\"seq\":0}' >&3\nsleep 30\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  RunnerPool pool({script, Mode::trusted, -1, false}, 2);
  // Too short a deadline: a start-up is still in flight.
  CHECK_FALSE(pool.wait_started(std::chrono::steady_clock::now() + std::chrono::milliseconds(50)));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(pool.wait_started(t0 + std::chrono::seconds(30)));
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(150));  // it did wait
  // Held with spares ready: nothing more starts, and nothing is in flight.
  pool.hold(true);
  CHECK(pool.wait_started(std::chrono::steady_clock::now() + std::chrono::milliseconds(50)));
  pool.hold(false);
}
