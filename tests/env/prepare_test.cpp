// Issue 15 items 3 and 4 (stats): every task is prepared on every GPU in the background; an
// evaluation of a task that is not ready yet waits (parked, its task first), says so in `info`,
// and never fails; `stats` reports per GPU the queue depth, evaluations done, the real busy
// fraction and the preparation's progress. The backend is scripted (no GPU); compiles and the
// ZeroMQ socket are real.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "catch.hpp"
#include "env/episode_log.hpp"
#include "env/prepare.hpp"
#include "server_fixture.hpp"
#ifdef D2K_TEST_HAVE_EVAL
#include "sandbox/eval/calibration.hpp"
#endif

using d2k::Client;
using d2k::env::Preparation;
using d2k::protocol::Value;
using d2k::sandbox::Outcome;
using d2k::test::TestServer;

namespace {

// prepare() blocks until the test opens the task's gate; records the order it was asked in.
class GatedBackend final : public d2k::env::GpuBackend {
 public:
  explicit GatedBackend(int gpus = 1) : gpus_(gpus) {}
  std::vector<d2k::env::GpuInfo> gpus() const override {
    std::vector<d2k::env::GpuInfo> out;
    for (int i = 0; i < gpus_; ++i) out.push_back({i, "Gated GPU", 1024});
    return out;
  }
  void prepare(const d2k::tasks::Task& task, int gpu, const d2k::env::PrepareProgress& progress) override {
    progress("trusted builds");
    std::unique_lock lock(mu_);
    order_.push_back(task.id + "@" + std::to_string(gpu));
    cv_.wait(lock, [&] { return open_all_ || open_.count(task.id) > 0; });
    if (fail_.count(task.id)) throw std::runtime_error("baseline did not build");
  }
  d2k::env::EvaluationReport evaluate(const d2k::env::EvaluationJob& job) override {
    {
      std::lock_guard lock(mu_);
      evaluated_.push_back(job.task->id);
      evaluated_so_.push_back(job.kernel_so);
      // Evaluating a task before its preparation finished is the bug this guards against.
      if (!open_all_ && !open_.count(job.task->id)) unprepared_ = true;
    }
    d2k::env::EvaluationReport r;
    r.outcome = Outcome::ok;
    r.evaluation = {{"status", "ok"}};
    r.reward = 0.5;
    r.gpu_phase_s = 0.25;
    r.timed_s = 0.05;
    return r;
  }
  void cancel_all() override {}
  void prefetch(const d2k::env::EvaluationJob& job) override {
    std::lock_guard lock(mu_);
    prefetched_.push_back(job.kernel_so);
    prefetched_existed_.push_back(std::filesystem::exists(job.kernel_so));
  }
  std::vector<std::filesystem::path> prefetched(std::vector<bool>* existed = nullptr) {
    std::lock_guard lock(mu_);
    if (existed) *existed = prefetched_existed_;
    return prefetched_;
  }
  std::vector<std::filesystem::path> evaluated_files() {
    std::lock_guard lock(mu_);
    return evaluated_so_;
  }
  void open(const std::string& task, bool fail = false) {
    {
      std::lock_guard lock(mu_);
      open_.insert(task);
      if (fail) fail_.insert(task);
    }
    cv_.notify_all();
  }
  void open_all() {
    {
      std::lock_guard lock(mu_);
      open_all_ = true;
    }
    cv_.notify_all();
  }
  std::vector<std::string> order() {
    std::lock_guard lock(mu_);
    return order_;
  }
  bool unprepared() {
    std::lock_guard lock(mu_);
    return unprepared_;
  }
  std::size_t evaluated() {
    std::lock_guard lock(mu_);
    return evaluated_.size();
  }

 private:
  int gpus_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> open_, fail_;
  bool open_all_ = false;
  bool unprepared_ = false;
  std::vector<std::string> order_, evaluated_;
  std::vector<std::filesystem::path> prefetched_, evaluated_so_;
  std::vector<bool> prefetched_existed_;
};

// prepare() goes through two stages, "build" then "calibration": at each it calls progress (a
// stage boundary where preparation may give way), then records "task/stage" and blocks until the
// test opens that gate. evaluate() blocks while the test holds the GPU (hold_gpu).
class StagedBackend final : public d2k::env::GpuBackend {
 public:
  std::vector<d2k::env::GpuInfo> gpus() const override { return {{0, "Staged GPU", 1024}}; }
  void prepare(const d2k::tasks::Task& task, int gpu, const d2k::env::PrepareProgress& progress) override {
    (void)gpu;
    for (const char* stage : {"build", "calibration"}) {
      progress(stage);
      const std::string key = task.id + "/" + stage;
      std::unique_lock lock(mu_);
      reached_.push_back(key);
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_all_ || open_.count(key) > 0; });
    }
  }
  d2k::env::EvaluationReport evaluate(const d2k::env::EvaluationJob& job) override {
    std::unique_lock lock(mu_);
    evaluating_.push_back(job.task->id);
    cv_.notify_all();
    cv_.wait(lock, [&] { return !hold_gpu_; });
    d2k::env::EvaluationReport r;
    r.outcome = Outcome::ok;
    r.evaluation = {{"status", "ok"}};
    r.reward = 0.5;
    return r;
  }
  void cancel_all() override {}
  void open(const std::string& key) {
    {
      std::lock_guard lock(mu_);
      open_.insert(key);
    }
    cv_.notify_all();
  }
  void open_all() {
    {
      std::lock_guard lock(mu_);
      open_all_ = true;
    }
    cv_.notify_all();
  }
  void hold_gpu(bool hold) {
    {
      std::lock_guard lock(mu_);
      hold_gpu_ = hold;
    }
    cv_.notify_all();
  }
  std::vector<std::string> reached() {
    std::lock_guard lock(mu_);
    return reached_;
  }
  std::size_t evaluating() {
    std::lock_guard lock(mu_);
    return evaluating_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> open_;
  bool open_all_ = false, hold_gpu_ = false;
  std::vector<std::string> reached_, evaluating_;
};

// Polls `pred` for up to a minute (a loaded CI machine); false when it never held.
template <class Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 1200; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

d2k::tasks::Task fake_task(const std::string& id) {
  d2k::tasks::Task t;
  t.id = id;
  return t;
}

}  // namespace

TEST_CASE("preparation parks an evaluation, prepares its task first and releases it", "[prepare]") {
  auto backend = std::make_shared<GatedBackend>();
  const d2k::tasks::Task a = fake_task("a"), b = fake_task("b"), c = fake_task("c");
  Preparation prep(backend, {&a, &b, &c}, 1);
  CHECK(prep.state(0, "c") == Preparation::State::pending);
  // Before start(): nothing is prepared, so an evaluation of c is parked.
  std::atomic<int> ran{0};
  std::atomic<double> waited{-1};
  CHECK(prep.when_ready(0, c, "s1", [&](double w) {
    waited = w;
    ++ran;
  }));
  CHECK(prep.parked(0) == 1);
  auto info = prep.waiting("s1");
  REQUIRE(info);
  CHECK((*info)["state"] == "waiting_for_preparation");
  CHECK((*info)["task"] == "c");
  CHECK((*info)["stage"] == "queued for preparation");
  CHECK_FALSE(prep.waiting("nobody"));

  prep.start();
  // c has a waiter: it is prepared before a and b.
  REQUIRE(eventually([&] { return !backend->order().empty(); }));
  CHECK(backend->order().front() == "c@0");
  REQUIRE(eventually([&] { return prep.waiting("s1") && (*prep.waiting("s1"))["stage"] == "trusted builds"; }));
  CHECK(prep.progress(0)["current"] == "c");
  CHECK(ran == 0);
  backend->open("c");
  REQUIRE(eventually([&] { return ran == 1; }));
  CHECK(waited > 0);
  CHECK(prep.state(0, "c") == Preparation::State::ready);
  CHECK_FALSE(prep.waiting("s1"));
  // A ready task runs its continuation at once, on the caller's thread.
  CHECK_FALSE(prep.when_ready(0, c, "s2", [&](double w) {
    CHECK(w == 0);
    ++ran;
  }));
  CHECK(ran == 2);

  // A failed preparation releases its evaluations too (the backend does inline what it lacks).
  REQUIRE(eventually([&] { return backend->order().size() == 2; }));
  CHECK(backend->order()[1] == "a@0");
  CHECK(prep.when_ready(0, a, "s3", [&](double) { ++ran; }));
  backend->open("a", /*fail=*/true);
  REQUIRE(eventually([&] { return ran == 3; }));
  CHECK(prep.state(0, "a") == Preparation::State::failed);
  auto p = prep.progress(0);
  CHECK(p["tasks"] == 3);
  CHECK(p["ready"] == 1);
  CHECK(p["failed"] == 1);
  CHECK(p["errors"]["a"] == "baseline did not build");
  CHECK(p["done"] == false);
  CHECK_FALSE(prep.done());

  backend->open("b");
  CHECK(prep.wait_done(std::chrono::minutes(1)));
  CHECK(prep.progress(0)["done"] == true);
  CHECK(prep.progress(0)["pending"] == 0);
  prep.stop();
}

TEST_CASE("release hands parked evaluations on and stops preparing", "[prepare]") {
  auto backend = std::make_shared<GatedBackend>(2);
  const d2k::tasks::Task a = fake_task("a"), b = fake_task("b");
  Preparation prep(backend, {&a, &b}, 2);
  std::atomic<int> ran{0};
  CHECK(prep.when_ready(1, b, "s", [&](double) { ++ran; }));
  CHECK(prep.parked(1) == 1);
  CHECK(prep.parked(0) == 0);
  prep.release();
  CHECK(ran == 1);
  CHECK(prep.parked(1) == 0);
  prep.start();  // after release: nothing starts
  CHECK_FALSE(prep.when_ready(0, a, "t", [&](double) { ++ran; }));
  CHECK(ran == 2);
  CHECK(backend->order().empty());
  prep.stop();
}

TEST_CASE("a task under way that nobody waits for gives way at its next stage", "[prepare]") {
  auto backend = std::make_shared<StagedBackend>();
  const d2k::tasks::Task a = fake_task("a"), b = fake_task("b"), c = fake_task("c");
  Preparation prep(backend, {&a, &b, &c}, 1);
  prep.start();
  REQUIRE(eventually([&] { return backend->reached().size() == 1; }));
  CHECK(backend->reached()[0] == "a/build");
  std::atomic<int> ran{0};
  CHECK(prep.when_ready(0, c, "s1", [&](double) { ++ran; }));
  // a's next stage boundary: c has a waiter, a has none, so a gives way before its calibration.
  backend->open("a/build");
  REQUIRE(eventually([&] { return backend->reached().size() == 2; }));
  CHECK(backend->reached()[1] == "c/build");
  CHECK(prep.state(0, "a") == Preparation::State::pending);
  CHECK(prep.progress(0)["yields"] == 1);
  CHECK(prep.progress(0)["current"] == "c");
  backend->open("c/build");
  backend->open("c/calibration");
  REQUIRE(eventually([&] { return ran == 1; }));
  CHECK(prep.state(0, "c") == Preparation::State::ready);
  // a is taken up again from its first stage, then b.
  backend->open_all();
  REQUIRE(prep.wait_done(std::chrono::minutes(1)));
  CHECK(backend->reached() == std::vector<std::string>{"a/build", "c/build", "c/calibration", "a/build",
                                                       "a/calibration", "b/build", "b/calibration"});
  CHECK(prep.progress(0)["ready"] == 3);
  prep.stop();
}

TEST_CASE("a stop does not wait for the task under way: it stops at its next stage, unprepared", "[prepare]") {
  auto backend = std::make_shared<StagedBackend>();
  const d2k::tasks::Task a = fake_task("a"), b = fake_task("b");
  Preparation prep(backend, {&a, &b}, 1);
  prep.start();
  REQUIRE(eventually([&] { return backend->reached().size() == 1; }));
  CHECK(backend->reached()[0] == "a/build");
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    prep.stop();  // releases, then joins the preparation thread
    stopped = true;
  });
  // The build under way is not interrupted (the backend's own step), but nothing after it runs:
  // the calibration stage is never reached, b never starts.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(stopped);  // still in a's build
  backend->open("a/build");
  REQUIRE(eventually([&] { return stopped.load(); }));
  stopper.join();
  CHECK(backend->reached() == std::vector<std::string>{"a/build"});
  CHECK(prep.state(0, "a") == Preparation::State::pending);
  CHECK(prep.state(0, "b") == Preparation::State::pending);
  CHECK(prep.progress(0)["ready"] == 0);
}

TEST_CASE("while the GPU's queue has work, only tasks somebody waits for are prepared", "[prepare]") {
  auto backend = std::make_shared<StagedBackend>();
  const d2k::tasks::Task a = fake_task("a"), b = fake_task("b");
  Preparation prep(backend, {&a, &b}, 1);
  std::atomic<bool> busy{true};
  prep.set_busy([&](int gpu) { return gpu == 0 && busy.load(); });
  prep.start();
  // Busy from the start: nothing starts (checked after a while; a bug would start a at once).
  REQUIRE(eventually([&] { return prep.progress(0)["paused"] == true; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(backend->reached().empty());
  busy = false;
  REQUIRE(eventually([&] { return backend->reached().size() == 1; }));
  CHECK(prep.progress(0)["paused"] == false);
  // The queue gets work while a is under way: a pauses at its next stage boundary, in place.
  busy = true;
  backend->open("a/build");
  REQUIRE(eventually([&] {
    auto p = prep.progress(0);
    return p["paused"] == true && p["stage"] == "calibration";
  }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(backend->reached().size() == 1);
  CHECK(prep.progress(0)["yields"] == 0);  // paused, not given up
  // Somebody now waits for a: it goes on although the queue is busy.
  std::atomic<int> ran{0};
  CHECK(prep.when_ready(0, a, "s", [&](double) { ++ran; }));
  REQUIRE(eventually([&] { return backend->reached().size() == 2; }));
  CHECK(backend->reached()[1] == "a/calibration");
  backend->open("a/calibration");
  REQUIRE(eventually([&] { return ran == 1; }));
  // b: nobody waits for it and the queue is still busy.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(backend->reached().size() == 2);
  busy = false;
  backend->open_all();
  REQUIRE(prep.wait_done(std::chrono::minutes(1)));
  CHECK(backend->reached().size() == 4);
  prep.stop();
}

TEST_CASE("through the server: the task under way gives way to a parked evaluation, and waits while it runs",
          "[server][prepare][slow]") {
  auto gpu = std::make_shared<StagedBackend>();
  TestServer srv(d2k::test::test_config(), gpu);
  Client c(srv.endpoint);
  REQUIRE(eventually([&] { return !gpu->reached().empty(); }));
  const std::string first = gpu->reached()[0].substr(0, gpu->reached()[0].find('/'));
  const std::string task = "vector_add";
  REQUIRE(first != task);
  const std::string s = c.reset(task, 1, 7)["session"].get<std::string>();
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", d2k::test::kGoodKernel}});
  Value reply;
  std::thread stepper([&] {
    Client c2(srv.endpoint);
    reply = c2.step(s, {{"type", "evaluate"}});
  });
  REQUIRE(eventually([&] { return c.stats()["gpus"][0]["waiting_for_preparation"] == 1; }));
  // The first task is at its build; at its next stage boundary it gives way.
  gpu->open(first + "/build");
  REQUIRE(eventually([&] { return gpu->reached().size() >= 2; }));
  CHECK(gpu->reached()[1] == task + "/build");
  CHECK(c.stats()["gpus"][0]["preparation"]["yields"] == 1);
  // vector_add gets ready; its evaluation runs and holds the GPU.
  gpu->hold_gpu(true);
  gpu->open(task + "/build");
  gpu->open(task + "/calibration");
  REQUIRE(eventually([&] { return gpu->evaluating() == 1; }));
  // While it runs, the first task (nobody waits for it) does not start again.
  REQUIRE(eventually([&] { return c.stats()["gpus"][0]["preparation"]["paused"] == true; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(gpu->reached().size() == 3);
  gpu->hold_gpu(false);
  stepper.join();
  CHECK(reply["observation"]["last"]["ok"] == true);
  CHECK(reply["info"]["queue"]["state"] == "ran_after_preparation");
  // The GPU is idle again: preparation takes the first task up again.
  REQUIRE(eventually([&] { return gpu->reached().size() >= 4; }));
  CHECK(gpu->reached()[3] == first + "/build");
  gpu->open_all();
  REQUIRE(eventually([&] { return c.stats()["gpus"][0]["preparation"]["done"] == true; }));
}

TEST_CASE("an evaluation before its task is ready waits, says so in info and in stats, then runs",
          "[server][prepare][slow]") {
  auto gpu = std::make_shared<GatedBackend>();
  const d2k::env::Config config = d2k::test::test_config();
  TestServer srv(config, gpu);
  Client c(srv.endpoint);
  // Preparation is under way and stuck on the first task (the gate is shut).
  REQUIRE(eventually([&] { return !gpu->order().empty(); }));
  Value st = c.stats();
  REQUIRE(st["gpus"].size() == 1);
  const auto& prep0 = st["gpus"][0]["preparation"];
  CHECK(prep0["tasks"].get<std::size_t>() >= 2);
  CHECK(prep0["ready"] == 0);
  CHECK(prep0["done"] == false);
  CHECK(prep0["current"].is_string());
  CHECK(prep0["stage"] == "trusted builds");

  // vector_add is not the task being prepared (the tasks are prepared in the catalogue's order),
  // so it must jump the queue when asked for.
  const std::string first = gpu->order().front().substr(0, gpu->order().front().find('@'));
  const std::string task = "vector_add";
  REQUIRE(first != task);
  const std::string s = c.reset(task, 1, 7)["session"].get<std::string>();
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", d2k::test::kGoodKernel}});

  Value reply;
  std::thread stepper([&] {
    Client c2(srv.endpoint);
    reply = c2.step(s, {{"type", "evaluate"}});
  });
  // The compile lands, the evaluation is parked: observe and stats say so.
  REQUIRE(eventually([&] {
    Value o = c.observe(s);
    return o["info"].contains("queue") && o["info"]["queue"]["state"] == "waiting_for_preparation";
  }));
  Value o = c.observe(s);
  const std::uint64_t queued_id = c.last_id();
  CHECK(o["info"]["queue"]["task"] == task);
  CHECK(o["info"]["queue"]["gpu"] == 0);
  // Logged as sent, queue entry included (a reply that is not the cached one: no shared patch).
  bool logged = false;
  for (const auto& x : d2k::env::read_episode_log(config.log_dir / (s + ".d2klog")).exchanges)
    if (x.request.value("op", "") == "observe" && x.request["id"] == queued_id) {
      CHECK(x.reply == o);
      logged = true;
    }
  CHECK(logged);
  st = c.stats();
  CHECK(st["gpus"][0]["waiting_for_preparation"] == 1);
  CHECK(st["gpus"][0]["queue_depth"] == 1);
  CHECK(st["gpus"][0]["evaluations"] == 0);
  CHECK(gpu->evaluated() == 0);
  // Its CPU work was started while it waits: the backend was handed the built kernel (issue 15
  // target 2: a cold evaluate's property checks start at the compile's end).
  std::vector<bool> existed;
  REQUIRE(gpu->prefetched(&existed).size() == 1);
  CHECK(existed[0]);

  // The first task finishes; the parked task is prepared next (ahead of the configured order).
  gpu->open(first);
  REQUIRE(eventually([&] { return gpu->order().size() >= 2; }));
  CHECK(gpu->order()[1] == task + "@0");
  gpu->open(task);
  stepper.join();
  CHECK(reply["observation"]["last"]["ok"] == true);
  CHECK(reply["reward"] == 0.5);
  CHECK(reply["info"]["queue"]["state"] == "ran_after_preparation");
  CHECK(reply["info"]["queue"]["waited_for_preparation_s"].get<double>() > 0);
  CHECK_FALSE(gpu->unprepared());
  REQUIRE(gpu->evaluated_files().size() == 1);
  CHECK(gpu->evaluated_files()[0] == gpu->prefetched()[0]);
  CHECK_FALSE(c.observe(s)["info"].contains("queue"));

  st = c.stats();
  const auto& g = st["gpus"][0];
  CHECK(g["evaluations"] == 1);
  CHECK(g["waiting_for_preparation"] == 0);
  CHECK(g["queue_depth"] == 0);
  // The real busy fraction comes from the backend's runner time (0.25 s), not queue occupancy.
  const double uptime = st["uptime_s"].get<double>();
  CHECK(g["busy_fraction"].get<double>() == Approx(std::min(1.0, 0.25 / uptime)).epsilon(0.2));
  CHECK(g["timed_fraction"].get<double>() < g["busy_fraction"].get<double>());
  CHECK(g.contains("queue_occupancy"));
  CHECK(g["preparation"]["ready"].get<int>() == 2);
  gpu->open_all();
  REQUIRE(eventually([&] { return c.stats()["gpus"][0]["preparation"]["done"] == true; }));
}

TEST_CASE("a server stopping with an evaluation parked still answers it", "[server][prepare][slow]") {
  auto gpu = std::make_shared<GatedBackend>();
  auto srv = std::make_unique<TestServer>(d2k::test::test_config(), gpu);
  Client c(srv->endpoint);
  REQUIRE(eventually([&] { return !gpu->order().empty(); }));
  REQUIRE(gpu->order().front() != "vector_add@0");
  const std::string s = c.reset("vector_add", 1, 7)["session"].get<std::string>();
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", d2k::test::kGoodKernel}});
  Value reply;
  std::thread stepper([&] {
    Client c2(srv->endpoint);
    reply = c2.step(s, {{"type", "evaluate"}});
  });
  REQUIRE(eventually([&] { return c.stats()["gpus"][0]["waiting_for_preparation"] == 1; }));
  // Stopping releases the parked evaluation (it runs); the task being prepared finishes first.
  std::thread stopper([&] { srv->stop(); });
  stepper.join();
  CHECK(reply["observation"]["last"]["ok"] == true);
  gpu->open_all();
  stopper.join();
}

TEST_CASE("--no-prepare: nothing is prepared and evaluations run at once", "[server][prepare][slow]") {
  auto gpu = std::make_shared<GatedBackend>();
  d2k::env::Config cfg = d2k::test::test_config();
  cfg.prepare = false;
  TestServer srv(cfg, gpu);
  Client c(srv.endpoint);
  const std::string s = c.reset("vector_add", 1, 7)["session"].get<std::string>();
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", d2k::test::kGoodKernel}});
  Value r = c.step(s, {{"type", "evaluate"}});
  CHECK(r["observation"]["last"]["ok"] == true);
  CHECK_FALSE(r["info"].contains("queue"));
  CHECK(gpu->order().empty());
  Value st = c.stats();
  CHECK(st["gpus"][0]["preparation"].is_null());
  CHECK(st["gpus"][0]["evaluations"] == 1);
}

#ifdef D2K_TEST_HAVE_EVAL
TEST_CASE("the calibration cache parses its file once, and again only when it changed", "[prepare][calibration]") {
  const auto dir = d2k::test::temp_dir("d2k-calib-memo");
  const auto file = dir / "GPU.json";
  d2k::runner::CalibrationCache cache(file), other(file);
  d2k::runner::CalibrationEntry e;
  e.baseline = {{"w", 2e-3}};
  e.experts[3] = {{"w", 1e-3}};
  cache.store("k1", e);
  for (int i = 0; i < 5; ++i) REQUIRE(cache.find("k1"));
  CHECK(cache.loads() == 1);
  CHECK_FALSE(cache.find("k2"));
  CHECK(cache.loads() == 1);
  // Another process (here another cache on the same file) adds an entry: it is seen.
  e.baseline = {{"w", 3e-3}};
  other.store("k2", e);
  auto hit = cache.find("k2");
  REQUIRE(hit);
  CHECK(hit->baseline.at("w") == 3e-3);
  CHECK(cache.loads() == 2);
  { std::ofstream(file, std::ios::trunc) << "{ damaged"; }
  CHECK_FALSE(cache.find("k1"));
  std::filesystem::remove_all(dir);
}
#endif

TEST_CASE("d2k calibrate names what it cannot do", "[prepare][cli]") {
  const auto bad = d2k::test::run_command(d2k::test::d2k_binary() + " calibrate --task no_such_task");
  CHECK(bad.status == 2);
  CHECK(bad.out.find("no task 'no_such_task'") != std::string::npos);
  if (!std::filesystem::exists("/dev/nvidia0") && !std::filesystem::exists("/dev/nvidiactl")) {
    const auto state = d2k::test::temp_dir("d2k-calibrate");
    const auto r = d2k::test::run_command(d2k::test::d2k_binary() + " calibrate --state-dir " + state.string());
    CHECK(r.status == 2);
    CHECK(r.out.find("no GPU to calibrate on") != std::string::npos);
    std::filesystem::remove_all(state);
  }
}

namespace {

// evaluate_gpu() counts GPU parts; their finish blocks until the test opens the gate, as if
// cuobjdump took long. Without the split (the whole evaluation on the GPU's queue thread) a second
// evaluation's GPU part could not start while the first one's finish is held.
class SplitBackend final : public d2k::env::GpuBackend {
 public:
  std::vector<d2k::env::GpuInfo> gpus() const override { return {{0, "Split GPU", 1024}}; }
  d2k::env::EvaluationReport evaluate(const d2k::env::EvaluationJob& job) override { return evaluate_gpu(job).finish(); }
  d2k::env::GpuStage evaluate_gpu(const d2k::env::EvaluationJob& job) override {
    (void)job;
    {
      std::lock_guard lock(mu_);
      ++gpu_parts_;
    }
    cv_.notify_all();
    d2k::env::GpuStage stage;
    stage.gpu_phase_s = 0.25;
    stage.timed_s = 0.05;
    stage.finish = [this] {
      std::unique_lock lock(mu_);
      ++finishing_;
      cv_.wait(lock, [&] { return open_; });
      d2k::env::EvaluationReport r;
      r.outcome = Outcome::ok;
      r.evaluation = {{"status", "ok"}, {"properties", {{"checked", true}}}};
      r.reward = 0.75;
      return r;
    };
    return stage;
  }
  void cancel_all() override {}
  void open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  int gpu_parts() {
    std::lock_guard lock(mu_);
    return gpu_parts_;
  }
  int finishing() {
    std::lock_guard lock(mu_);
    return finishing_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int gpu_parts_ = 0, finishing_ = 0;
};

}  // namespace

TEST_CASE("an evaluation's CPU half runs off the GPU's queue: the next timed run starts meanwhile",
          "[server][prepare][slow]") {
  auto gpu = std::make_shared<SplitBackend>();
  d2k::env::Config cfg = d2k::test::test_config();
  cfg.prepare = false;
  TestServer srv(cfg, gpu);
  Client c(srv.endpoint);
  std::vector<std::string> sessions;
  for (int i = 0; i < 2; ++i) {
    sessions.push_back(c.reset("vector_add", 1, 7 + i)["session"].get<std::string>());
    c.step(sessions.back(), {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", d2k::test::kGoodKernel}});
  }
  Value replies[2];
  std::thread first([&] {
    Client c2(srv.endpoint);
    replies[0] = c2.step(sessions[0], {{"type", "evaluate"}});
  });
  REQUIRE(eventually([&] { return gpu->finishing() == 1; }));
  std::thread second([&] {
    Client c3(srv.endpoint);
    replies[1] = c3.step(sessions[1], {{"type", "evaluate"}});
  });
  // The first evaluation's finish is held; the GPU's queue is free for the second's GPU part.
  REQUIRE(eventually([&] { return gpu->gpu_parts() == 2; }));
  Value st = c.stats();
  CHECK(st["gpus"][0]["evaluations"] == 2);
  CHECK(st["gpus"][0]["busy_s"].get<double>() == Approx(0.5));
  CHECK(st["finishing"]["running"].get<int>() >= 1);
  gpu->open();
  first.join();
  second.join();
  for (const auto& r : replies) {
    CHECK(r["observation"]["last"]["ok"] == true);
    CHECK(r["observation"]["last"]["evaluation"]["properties"]["checked"] == true);
    CHECK(r["reward"].get<double>() == Approx(0.75));
  }
}
