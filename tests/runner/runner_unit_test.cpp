// CPU-only tests of the runner's wire, the parent-side comparison and outside bound, the
// calibration cache, and runner processes where no GPU exists.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <vector>

#include "catch.hpp"
#include "sandbox/eval/calibration.hpp"
#include "sandbox/eval/compare.hpp"
#include "sandbox/runner/csr_gen.hpp"
#include "sandbox/eval/evaluator.hpp"
#include "sandbox/eval/frames.hpp"
#include "sandbox/eval/runner_process.hpp"
#include "sandbox/runner/wire.hpp"
#include "tasks/loader/task.hpp"

using namespace d2k::runner;

namespace {
const d2k::tasks::Task& vector_add() {
  static const d2k::tasks::Task t = d2k::tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / "vector_add");
  return t;
}
std::filesystem::path runner_path() { return std::filesystem::path(D2K_BINARY_DIR) / "bin" / "d2k-runner"; }
}  // namespace

// The slot arithmetic below is written for a 1 GiB verify budget (4 samples of 64 Mi floats),
// whatever the default is.
TimingSpec gib_budget() {
  TimingSpec t;
  t.verify_bytes = 1ull << 30;
  return t;
}

TEST_CASE("a job survives the wire and its output layout is aligned", "[runner][wire]") {
  std::vector<const d2k::tasks::Workload*> wls;
  for (const auto& w : vector_add().workloads) wls.push_back(&w);
  const Job job = make_job(vector_add(), wls, {11, 22, 33}, "/x.so", gib_budget());
  REQUIRE(job.workloads.size() == vector_add().workloads.size());
  CHECK(job.entry == "d2k_vector_add");
  CHECK(job.returns_int);
  const auto& w0 = job.workloads[0];
  REQUIRE(w0.args.size() == 4);
  CHECK(w0.args[0].role == ArgRole::input);
  CHECK(w0.args[0].gen.dist == Dist::uniform);
  CHECK(w0.args[1].gen.dist == Dist::normal);
  CHECK(w0.args[2].role == ArgRole::output);
  CHECK(w0.args[2].count == static_cast<std::uint64_t>(vector_add().workloads[0].sizes.at("n")));
  CHECK(w0.args[3].role == ArgRole::scalar);
  CHECK(w0.args[3].dtype == Dtype::i64);
  CHECK(w0.args[3].scalar == static_cast<double>(vector_add().workloads[0].sizes.at("n")));

  const Job back = job_from_json(nlohmann::json::parse(to_json(job).dump()));
  CHECK(to_json(back) == to_json(job));

  const Layout l = output_layout(job);
  // One output per workload per seed, plus one per timed call of a timed workload (odd_1m and
  // single are `timed: false`): the most warm-ups (5) and the samples, up to verify_bytes per
  // workload; every timed call is handed over.
  std::size_t timed = 0, timed_outputs = 0;
  for (std::size_t w = 0; w < job.workloads.size(); ++w) {
    timed += job.workloads[w].time ? 1 : 0;
    timed_outputs += static_cast<std::size_t>(timed_call_slots(job, w));
    CHECK(timed_call_slots(job, w) == (job.workloads[w].time ? timed_slots(job, w) + 5 : 0));
    CHECK((timed_slots(job, w) > 0) == job.workloads[w].time);
  }
  CHECK(timed == 3);
  CHECK(timed_slots(job, 1) == 4);  // 64 Mi floats = 256 MiB of output; 1 GiB of verified outputs
  CHECK(l.slots.size() == job.workloads.size() * 3 + timed_outputs);
  for (const auto& s : l.slots) {
    CHECK(s.offset % 64 == 0);
    CHECK(s.bytes == s.count * 4);
    CHECK(s.offset + s.bytes <= l.total_bytes);
  }
  CHECK(l.find(0, -1, 2) == nullptr);  // odd_1m is untimed
  CHECK(l.find(1, -1, 2) != nullptr);
  CHECK(l.find(1, -9, 2) != nullptr);  // 5 warm-ups + 4 samples
  CHECK(l.find(1, -10, 2) == nullptr);
  CHECK(l.find(0, 3, 2) == nullptr);
  Job untimed = job;
  untimed.timing.enabled = false;
  CHECK(output_layout(untimed).slots.size() == job.workloads.size() * 3);
}

TEST_CASE("make_job keeps a workload's `timed: false` (no timing, no timed output slot)", "[runner][wire][threat]") {
  const auto task = d2k::tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / "prefix_sum");
  std::vector<const d2k::tasks::Workload*> wls;
  std::size_t untimed = 0;
  for (const auto& w : task.workloads) {
    wls.push_back(&w);
    untimed += w.timed ? 0 : 1;
  }
  REQUIRE(untimed > 0);
  const Job job = make_job(task, wls, {5}, "/x.so", TimingSpec{});
  REQUIRE(job.workloads.size() == wls.size());
  for (std::size_t i = 0; i < wls.size(); ++i) {
    CHECK(job.workloads[i].time == wls[i]->timed);
    const Layout l = output_layout(job);
    bool timed_slot = false;
    for (const auto& s : l.slots) timed_slot = timed_slot || (s.workload == i && s.seed_index < 0);
    CHECK(timed_slot == wls[i]->timed);
  }
  CHECK(job_from_json(nlohmann::json::parse(to_json(job).dump())).workloads[0].time == job.workloads[0].time);
}

TEST_CASE("bad jobs and generators get typed errors", "[runner][wire]") {
  try {
    parse_generator({{"dist", "custom"}, {"generator", "x"}});
    FAIL("unknown custom generator accepted");
  } catch (const WireError& e) {
    CHECK(e.code == "generator_unsupported");
  }
  CHECK_THROWS_AS(parse_generator({{"dist", "zipf"}}), WireError);
  CHECK_THROWS_AS(parse_generator({{"dist", "uniform"}, {"low", 2}, {"high", 1}}), WireError);
  CHECK_THROWS_AS(job_from_json(nlohmann::json::parse(R"({"entry":"f"})")), WireError);
  CHECK_THROWS_AS(job_from_json(nlohmann::json::parse(R"({"so_path":"a","entry":"f","seeds":[],"workloads":[]})")),
                  WireError);
  CHECK_THROWS_AS(result_from_json(nlohmann::json::parse(R"({"event":"result"})")), WireError);
  const auto bad_timing = nlohmann::json::parse(
      R"({"status":"ok","workloads":[{"name":"w","timing":{"samples":3,"median_s":-1,"min_s":0}}]})");
  CHECK_THROWS_AS(result_from_json(bad_timing), WireError);
}

TEST_CASE("comparison finds poison, tolerance breaches and the first bad index", "[runner][compare]") {
  std::vector<float> want = {1.0f, 2.0f, -3.0f, 4.0f};
  std::vector<float> got = want;
  CHECK(compare_tensors(got.data(), want.data(), Dtype::f32, 4, 1e-6, 1e-6).ok());

  got[2] = -3.0f + 1e-3f;
  auto c = compare_tensors(got.data(), want.data(), Dtype::f32, 4, 1e-6, 1e-6);
  CHECK(c.mismatches == 1);
  CHECK(c.first_bad == 2);
  CHECK(c.max_abs == Approx(1e-3).epsilon(1e-2));
  CHECK(compare_tensors(got.data(), want.data(), Dtype::f32, 4, 1e-2, 0).ok());

  std::memset(got.data(), 0xFF, got.size() * sizeof(float));  // the runner's poison
  c = compare_tensors(got.data(), want.data(), Dtype::f32, 4, 1e-6, 1e-6);
  CHECK(c.mismatches == 4);
  CHECK(c.nonfinite == 4);
  CHECK(c.first_bad == 0);

  const std::uint16_t bf16[] = {0x3F80, 0xC000};
  CHECK(element(bf16, Dtype::bf16, 0) == 1.0);
  CHECK(element(bf16, Dtype::bf16, 1) == -2.0);
  const std::uint16_t f16[] = {0x3C00, 0xC000, 0x0001, 0x7C00};
  CHECK(element(f16, Dtype::f16, 0) == 1.0);
  CHECK(element(f16, Dtype::f16, 1) == -2.0);
  CHECK(element(f16, Dtype::f16, 2) == std::ldexp(1.0, -24));
  CHECK(std::isinf(element(f16, Dtype::f16, 3)));

  const std::int32_t ia[] = {1, 2, 3}, ib[] = {1, 2, 4};
  c = compare_tensors(ia, ib, Dtype::i32, 3, 0, 0);
  CHECK(c.mismatches == 1);
  CHECK(c.first_bad == 2);
  CHECK(c.to_json().at("first_bad") == 2);
}

TEST_CASE("the outside bound flags claimed times the parent's clock contradicts", "[runner][bound]") {
  TimingResult t;
  t.samples = 100;
  t.median_s = t.mean_s = 1e-3;
  double outside = 0;
  // Honest: 100 samples of 1 ms kernel + 0.2 ms overhead took 0.12 s.
  CHECK_FALSE(claimed_time_implausible(t, 0.12, 0.2e-3, 2.0, 50e-6, 5e-3, &outside));
  CHECK(outside == Approx(1e-3).epsilon(0.01));
  // Forged: claims 1 µs for kernels that took 1 ms each.
  TimingResult forged = t;
  forged.median_s = forged.mean_s = 1e-6;
  CHECK(claimed_time_implausible(forged, 0.12, 0.2e-3, 2.0, 50e-6, 5e-3, &outside));
  // Inflated sample count: more samples than even empty calls could fit in the phase.
  TimingResult inflated = forged;
  inflated.samples = 100000;
  CHECK(claimed_time_implausible(inflated, 0.12, 0.2e-3, 2.0, 50e-6, 5e-3, nullptr));
  TimingResult none;
  CHECK(claimed_time_implausible(none, 0.12, 0.2e-3, 2.0, 50e-6, 5e-3, nullptr));
}

TEST_CASE("the calibration cache stores, finds and survives damage", "[runner][calibration]") {
  const auto dir = std::filesystem::temp_directory_path() / ("d2k-calib-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  CalibrationCache cache(dir / "NVIDIA_H200.json");
  const auto key = CalibrationCache::key("NVIDIA H200", "580.159.04", "nvcc 13.0", "abc");
  CHECK_FALSE(cache.find(key));
  CalibrationEntry e;
  e.baseline = {{"w1", 2e-3}, {"w2", 8e-3}};
  e.experts[3] = {{"w1", 1e-3}, {"w2", 2e-3}};
  e.measured_at = "2026-12-01T00:00:00Z";
  cache.store(key, e);
  const auto hit = cache.find(key);
  REQUIRE(hit);
  CHECK(hit->baseline.at("w2") == 8e-3);
  CHECK(hit->experts.at(3).at("w1") == 1e-3);
  CHECK(CalibrationEntry::geomean(hit->baseline) == Approx(4e-3));
  CHECK_FALSE(cache.find(CalibrationCache::key("NVIDIA H200", "580.159.04", "nvcc 13.0", "other-hash")));
  { std::ofstream(dir / "NVIDIA_H200.json") << "{ not json"; }
  CHECK_FALSE(cache.find(key));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a probe runner answers with or without a GPU", "[runner][process]") {
  auto p = RunnerProcess::start({runner_path(), Mode::probe, -1, false});
  const auto ready = p->wait_ready(std::chrono::seconds(60));
  REQUIRE(ready);
  CHECK(ready->at("event") == "probe");
  CHECK(ready->at("devices").is_array());
  const Exit e = p->wait();
  CHECK(e.exited);
  CHECK(e.status == 0);
}

TEST_CASE("without a GPU the runner fails typed and the evaluator says no_gpu", "[runner][process]") {
  auto probe = RunnerProcess::start({runner_path(), Mode::probe, -1, false});
  const auto ready = probe->wait_ready(std::chrono::seconds(60));
  REQUIRE(ready);
  if (!ready->at("devices").empty()) {
    std::printf("SKIP no-GPU behaviour: this machine has a GPU\n");
    return;
  }
  auto p = RunnerProcess::start({runner_path(), Mode::agent, 0, true});
  CHECK_FALSE(p->wait_ready(std::chrono::seconds(60)));
  CHECK(p->error().find("setup_error") == std::string::npos);  // the message, not the code
  CHECK_FALSE(p->error().empty());
  const Exit e = p->wait();
  CHECK(e.exited);
  CHECK(e.status == 2);

  EvalConfig cfg;
  cfg.state_dir = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "runner-nogpu";
  Evaluator ev(cfg);
  CHECK(ev.gpu_count() == 0);
  EvalRequest r;
  r.task = &vector_add();
  r.so_path = "/nonexistent.so";
  const EvalResult res = ev.evaluate(r);
  CHECK(res.status == d2k::sandbox::Outcome::no_gpu);
  CHECK(res.to_json().at("status") == "no_gpu");
}

namespace {
Generator csr_gen(const char* pattern, std::int64_t rows, std::int64_t cols, std::int64_t nnz, double alpha = 2.0,
                  std::int64_t max_row = 0) {
  nlohmann::json params = {{"pattern", pattern}, {"alpha", alpha}};
  if (max_row > 0) params["max_row"] = max_row;
  return parse_generator({{"dist", "custom"}, {"generator", "csr"}, {"params", {{"part", "row_ptr"}}}},
                         {{"rows", rows}, {"cols", cols}, {"nnz", nnz}}, params);
}

// A CSR structure is valid: exactly nnz entries, non-decreasing row pointers, columns sorted and
// unique within every row and inside [0, cols).
void check_valid(const CsrStructure& s, const Generator& g) {
  REQUIRE(s.row_ptr.size() == static_cast<std::size_t>(g.rows + 1));
  REQUIRE(s.col_idx.size() == static_cast<std::size_t>(g.nnz));
  CHECK(s.row_ptr.front() == 0);
  CHECK(s.row_ptr.back() == g.nnz);
  const std::int64_t cap = g.max_row > 0 ? g.max_row : g.cols;
  bool ok = true;
  for (std::int64_t r = 0; r < g.rows && ok; ++r) {
    const auto b = s.row_ptr[static_cast<std::size_t>(r)], e = s.row_ptr[static_cast<std::size_t>(r + 1)];
    ok = b <= e && e - b <= cap;
    for (auto i = b; i < e && ok; ++i) {
      const auto c = s.col_idx[static_cast<std::size_t>(i)];
      ok = c >= 0 && c < g.cols && (i == b || s.col_idx[static_cast<std::size_t>(i - 1)] < c);
    }
  }
  CHECK(ok);
}
}  // namespace

TEST_CASE("csr generator: exact nnz, sorted unique columns, deterministic, three patterns", "[runner][csr]") {
  for (const char* pattern : {"uniform", "power_law", "banded"}) {
    INFO(pattern);
    const Generator g = csr_gen(pattern, 1001, 777, 20011, 1.7);
    const CsrStructure a = make_csr(g, 42);
    check_valid(a, g);
    const CsrStructure b = make_csr(g, 42);
    CHECK(a.row_ptr == b.row_ptr);
    CHECK(a.col_idx == b.col_idx);
    const CsrStructure c = make_csr(g, 43);
    if (std::string(pattern) != "banded") CHECK(a.col_idx != c.col_idx);  // the seed matters
  }
  // power_law is skewed: its longest row is far above the mean; uniform stays near it.
  auto longest = [](const CsrStructure& s) {
    std::int32_t m = 0;
    for (std::size_t r = 0; r + 1 < s.row_ptr.size(); ++r) m = std::max(m, s.row_ptr[r + 1] - s.row_ptr[r]);
    return m;
  };
  const CsrStructure pl = make_csr(csr_gen("power_law", 20000, 20000, 400000, 1.8), 7);
  const CsrStructure un = make_csr(csr_gen("uniform", 20000, 20000, 400000), 7);
  CHECK(longest(pl) > 20 * 20);
  CHECK(longest(un) < 3 * 20);
  // banded: contiguous columns around the diagonal.
  const CsrStructure bd = make_csr(csr_gen("banded", 100, 100, 500), 1);
  for (std::size_t r = 0; r < 100; ++r) {
    const auto b = bd.row_ptr[r], e = bd.row_ptr[r + 1];
    CHECK(bd.col_idx[static_cast<std::size_t>(e - 1)] - bd.col_idx[static_cast<std::size_t>(b)] == e - b - 1);
    CHECK(std::abs(bd.col_idx[static_cast<std::size_t>(b)] + (e - b) / 2 - static_cast<std::int64_t>(r)) <= 3);
  }
  // A long build reports progress (the runner turns it into heartbeats).
  int beats = 0;
  const Generator big = csr_gen("uniform", 300000, 1000, 600000);
  check_valid(make_csr(big, 5, [&] { ++beats; }), big);
  CHECK(beats == 300000 / 65536);
  // Dense rows and the row cap.
  const Generator full = csr_gen("uniform", 10, 10, 100);
  check_valid(make_csr(full, 3), full);
  const Generator capped = csr_gen("power_law", 500, 1000, 5000, 1.3, 40);
  const CsrStructure cs = make_csr(capped, 9);
  check_valid(cs, capped);
  CHECK(longest(cs) <= 40);
}

TEST_CASE("custom generators reject what they cannot make", "[runner][csr]") {
  auto code = [](auto&& f) {
    try {
      f();
    } catch (const WireError& e) {
      return e.code;
    }
    return std::string("accepted");
  };
  const nlohmann::json row_ptr = {{"dist", "custom"}, {"generator", "csr"}, {"params", {{"part", "row_ptr"}}}};
  CHECK(code([&] { parse_generator(row_ptr); }) == "generator_unsupported");  // no workload
  CHECK(code([&] { csr_gen("uniform", 10, 10, 101); }) == "bad_job");        // more than rows x cols
  CHECK(code([&] { csr_gen("zigzag", 10, 10, 10); }) == "bad_job");
  CHECK(code([&] { csr_gen("power_law", 10, 10, 10, 1.0); }) == "bad_job");
  CHECK(code([&] { csr_gen("uniform", 10, 10, 50, 2.0, 4); }) == "bad_job");  // cap 4 x 10 rows < 50
  CHECK(code([&] { parse_generator(row_ptr, {{"rows", 5}, {"cols", 5}}, nlohmann::json::object()); }) == "bad_job");
  const nlohmann::json zipf = {{"dist", "custom"}, {"generator", "zipf_bytes"}};
  CHECK(code([&] { parse_generator(zipf, {{"n", 5}}, {{"zipf_s", -1}}); }) == "bad_job");
  const Generator z = parse_generator(zipf, {{"n", 5}}, {{"zipf_s", 1.5}});
  CHECK(z.dist == Dist::zipf_bytes);
  CHECK(z.a == 1.5);
  // A csr part of the wrong length is refused by the runner's job parser.
  Job job;
  job.so_path = "x.so";
  job.entry = "f";
  job.seeds = {1};
  WireWorkload w;
  w.name = "w";
  WireArg a;
  a.dtype = Dtype::i32;
  a.count = 7;
  a.gen = csr_gen("uniform", 10, 10, 20);
  w.args.push_back(a);
  job.workloads.push_back(w);
  CHECK(code([&] { job_from_json(to_json(job)); }) == "bad_job");
  job.workloads[0].args[0].count = 11;
  CHECK(job_from_json(to_json(job)).workloads[0].args[0].gen.nnz == 20);
}

// ---- issue 23, class 4: the parent's frame checks ---------------------------------------------
namespace {
struct Frames {
  d2k::runner::FrameChecker checker;
  std::uint64_t seq = 1;
  explicit Frames(const Job& job) : checker(job) { REQUIRE(checker.ready({{"event", "ready"}, {"seq", 0}}) == ""); }
  std::string send(nlohmann::json j) {
    if (!j.contains("seq")) j["seq"] = seq;
    ++seq;
    return checker.accept(j);
  }
};
Job two_workload_job() {
  // odd_1m (untimed) and pow2_64m (timed), two seeds each.
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[0], &vector_add().workloads[1]};
  return make_job(vector_add(), wls, {1, 2}, "/x.so", gib_budget());
}
// The sequence an honest runner sends for two_workload_job().
std::vector<nlohmann::json> honest_frames() {
  return {{{"event", "call"}, {"workload", 0}, {"seed", 0}}, {{"event", "call"}, {"workload", 0}, {"seed", 1}},
          {{"event", "heartbeat"}},
          {{"event", "call"}, {"workload", 1}, {"seed", 0}}, {{"event", "call"}, {"workload", 1}, {"seed", 1}},
          {{"event", "timing_ready"}, {"workload", 1}}, {{"event", "heartbeat"}},
          {{"event", "timing_end"}, {"workload", 1}, {"samples", 4}}};
}
}  // namespace

TEST_CASE("frames: the honest sequence passes and is complete", "[runner][frames][threat]") {
  Frames f(two_workload_job());
  for (const auto& j : honest_frames()) CHECK(f.send(j) == "");
  CHECK(f.checker.all_done());
  CHECK(f.checker.calls() == 4);
  CHECK(f.checker.announced_samples(1) == 4);
  CHECK(f.checker.announced_samples(0) == -1);
  CHECK(f.send({{"event", "result"}}) == "");
  CHECK(f.checker.result_seen());
  CHECK(f.send({{"event", "heartbeat"}}) != "");  // data after the result
}

TEST_CASE("frames: the ready frame must be frame 0", "[runner][frames][threat]") {
  d2k::runner::FrameChecker c(two_workload_job());
  CHECK(c.ready({{"event", "ready"}}) != "");
  CHECK(c.ready({{"event", "ready"}, {"seq", 3}}) != "");
}

TEST_CASE("frames: duplicates, gaps, forgeries and out-of-order frames are refused", "[runner][frames][threat]") {
  const auto honest = honest_frames();
  SECTION("a forged timing_ready with the right number makes the genuine one a duplicate") {
    Frames f(two_workload_job());
    for (std::size_t i = 0; i < 5; ++i) REQUIRE(f.send(honest[i]) == "");
    CHECK(f.send({{"event", "timing_ready"}, {"workload", 1}}) == "");  // the forgery, well-numbered
    nlohmann::json genuine = honest[5];
    genuine["seq"] = f.seq - 1;  // the runner's own counter did not move
    CHECK(f.checker.accept(genuine) != "");
  }
  SECTION("a gap") {
    Frames f(two_workload_job());
    REQUIRE(f.send(honest[0]) == "");
    nlohmann::json j = honest[1];
    j["seq"] = 5;
    CHECK(f.checker.accept(j).find("gap") != std::string::npos);
  }
  SECTION("a frame without a number") {
    d2k::runner::FrameChecker c(two_workload_job());
    REQUIRE(c.ready({{"event", "ready"}, {"seq", 0}}) == "");
    CHECK(c.accept(honest[0]) != "");
  }
  SECTION("calls out of order, a timing for an untimed workload, timing_end first, unknown events") {
    {
      Frames f(two_workload_job());
      CHECK(f.send({{"event", "call"}, {"workload", 0}, {"seed", 1}}) != "");
    }
    {
      Frames f(two_workload_job());
      REQUIRE(f.send(honest[0]) == "");
      REQUIRE(f.send(honest[1]) == "");
      CHECK(f.send({{"event", "timing_ready"}, {"workload", 0}}) != "");  // odd_1m is untimed
    }
    {
      Frames f(two_workload_job());
      for (std::size_t i = 0; i < 5; ++i) REQUIRE(f.send(honest[i]) == "");
      CHECK(f.send({{"event", "timing_end"}, {"workload", 1}, {"samples", 3}}) != "");
    }
    {
      Frames f(two_workload_job());
      CHECK(f.send({{"event", "timing_ready"}, {"workload", 1}}) != "");  // before any call
    }
    {
      Frames f(two_workload_job());
      CHECK(f.send({{"event", "bogus"}}) != "");
    }
  }
  SECTION("an early result is allowed (a failing kernel) but then incomplete") {
    Frames f(two_workload_job());
    REQUIRE(f.send(honest[0]) == "");
    CHECK(f.send({{"event", "result"}}) == "");
    CHECK_FALSE(f.checker.all_done());
  }
}

TEST_CASE("frames: a timing_end may not announce more samples than were handed over", "[runner][frames][threat]") {
  const auto honest = honest_frames();
  Frames f(two_workload_job());
  for (std::size_t i = 0; i < 7; ++i) REQUIRE(f.send(honest[i]) == "");
  CHECK(f.send({{"event", "timing_end"}, {"workload", 1}, {"samples", 5}}) != "");  // 4 slots
}

// ---- issue 23, classes 1, 2, 11: timed inputs and verified outputs ----------------------------
TEST_CASE("timed calls get distinct seeds from the parent's key; sample counts follow the verify budget",
          "[runner][wire][threat]") {
  std::set<std::uint64_t> seen;
  for (std::uint64_t key : {1ull, 2ull, 0xDEADBEEFull})
    for (std::uint64_t i = 0; i < 1000; ++i) seen.insert(timed_seed(key, i));
  CHECK(seen.size() == 3000);  // no two calls of an evaluation share an input set
  CHECK(timed_seed(7, 3) == timed_seed(7, 3));  // the reference replays the same inputs

  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[1]};  // 64 Mi floats
  Job job = make_job(vector_add(), wls, {1}, "/x.so", gib_budget());
  CHECK(timed_slots(job, 0) == 4);
  job.timing.verify_bytes = 1;  // never fewer than min(min_samples, 3) samples
  CHECK(timed_slots(job, 0) == 3);
  job.timing.verify_bytes = 1ull << 40;  // the batch budget caps them: 16 GiB / 768 MiB - 5 warm-ups at most
  CHECK(timed_slots(job, 0) == 16);
  job.timing.batch_bytes = 1ull << 50;  // never more than max_samples
  CHECK(timed_slots(job, 0) == job.timing.max_samples);
  job.timing.enabled = false;
  CHECK(timed_slots(job, 0) == 0);
  // The reference's replay: exactly the candidate's announced samples, under the same indices.
  job.workloads[0].replay_key = 99;
  job.workloads[0].replay_samples = 7;
  CHECK(timed_slots(job, 0) == 7);
  const Layout l = output_layout(job);
  CHECK(l.find(0, -7, 2) != nullptr);
  CHECK(l.find(0, -8, 2) == nullptr);
  const Job back = job_from_json(nlohmann::json::parse(to_json(job).dump()));
  CHECK(back.workloads[0].replay_key == 99);
  CHECK(back.workloads[0].replay_samples == 7);
  CHECK(back.timing.verify_bytes == job.timing.verify_bytes);
}

TEST_CASE("the tight bound: a claim below 95% of the parent's clock, less overheads and slack, is flagged",
          "[runner][bound][threat]") {
  const ParentBound b;  // 0.95; slack 2 ms + per call (50 % of the overhead + 20 us) + 10 % of the batch
  TimingResult t;
  t.samples = 200;
  t.median_s = t.mean_s = 1e-3;  // 1 ms kernels
  const double o = 0.05e-3;      // trusted per-call overhead (the empty sample: flush, syncs)
  const double batch = 20e-3;    // trusted batch: inputs and poisoned outputs of every call, hand-over
  double unexplained = 0;
  // Honest: 200 × (1 ms + 0.3 ms) + the batch, plus some jitter.
  CHECK_FALSE(claim_below_parent_clock(t, 200 * (1e-3 + o) + batch + 1e-3, o, batch, b, &unexplained));
  CHECK(unexplained == 0);
  // Honest, with per-call overheads 40 % and a batch 8 % above the reference's: inside the slack.
  CHECK_FALSE(claim_below_parent_clock(t, 200 * (1e-3 + 1.4 * o) + 1.08 * batch, o, batch, b, nullptr));
  // Claims 85 % of the real time: flagged (the slack is 2 ms + 200 × 45 us + 2 ms of 200 ms).
  TimingResult low = t;
  low.median_s = low.mean_s = 0.85e-3;
  CHECK(claim_below_parent_clock(low, 200 * (1e-3 + o) + batch, o, batch, b, &unexplained));
  CHECK(unexplained > 0);
  // Whatever the sample count: 3 samples of a 100 ms kernel claimed at 90 %.
  TimingResult few;
  few.samples = 3;
  few.median_s = few.mean_s = 90e-3;
  CHECK(claim_below_parent_clock(few, 3 * (100e-3 + o) + batch, o, batch, b, nullptr));
  few.median_s = few.mean_s = 99e-3;  // 99 %: fine
  CHECK_FALSE(claim_below_parent_clock(few, 3 * (100e-3 + o) + batch, o, batch, b, nullptr));
  // Nothing claimed, a window the parent never saw open, a negative batch.
  CHECK(claim_below_parent_clock(TimingResult{}, 1.0, o, batch, b, nullptr));
  CHECK(claim_below_parent_clock(t, -1.0, o, batch, b, nullptr));
  CHECK(claim_below_parent_clock(t, 1.0, o, -1.0, b, nullptr));
}

TEST_CASE("the tight bound with the batch: the per-call slack of a memory-bound call is its flush, not its inputs",
          "[runner][bound][threat]") {
  // A memory-bound 1 ms kernel (about 4 GiB of traffic) over 20 timed calls: making one call's
  // inputs and handing its outputs over takes about 2 ms, the empty sample (flush, syncs) 40 us.
  const int calls = 20;
  const double kernel = 1e-3, o = 40e-6, batch = calls * 2e-3;
  const double window = calls * (kernel + o) + batch;
  // Before the batch (issue 23 item 1): inputs and hand-over inside each call's overhead, 100 % of
  // it as slack, 50 us per call, 5 ms per phase: the bound flagged nothing at all here.
  ParentBound old;
  old.overhead_rel_slack = 1.0;
  old.batch_rel_slack = 0;
  old.call_slack_s = 50e-6;
  old.fixed_slack_s = 5e-3;
  CHECK(flag_below_fraction(calls, window, o + batch / calls, 0, old) == 0);
  // With the batch: the flush per call, the batch once, each with its own relative slack.
  const ParentBound b;
  const double f = flag_below_fraction(calls, window, o, batch, b);
  CHECK(f > 0.3);  // 0.31: the batch slack is a quarter of B (the host path's hand-over noise)
  CHECK(f < 0.95);
  TimingResult honest;
  honest.samples = calls;
  honest.median_s = honest.mean_s = kernel;
  CHECK_FALSE(claim_below_parent_clock(honest, window + 0.5e-3, o, batch, b, nullptr));
  TimingResult just_below = honest;
  just_below.median_s = just_below.mean_s = kernel * (f - 0.02);
  CHECK(claim_below_parent_clock(just_below, window, o, batch, b, nullptr));
  TimingResult just_above = honest;
  just_above.median_s = just_above.mean_s = kernel * (f + 0.02);
  CHECK_FALSE(claim_below_parent_clock(just_above, window, o, batch, b, nullptr));
  // The slack is the sum of its parts.
  CHECK(bound_slack_s(calls, o, batch, b) ==
        Approx(b.fixed_slack_s + calls * (b.overhead_rel_slack * o + b.call_slack_s) + b.batch_rel_slack * batch));
  // A window that holds less than the trusted overheads leaves no call time: nothing to flag by.
  CHECK(flag_below_fraction(calls, batch / 2, o, batch, b) == 0);
}

TEST_CASE("a reference batch measured longer than the candidate's whole window does not flag an honest claim",
          "[runner][bound][threat]") {
  // H200, 2026-12-02 02:22Z: the reference's batch (0.18-0.21 s, then holding its allocations) was
  // longer than the candidate's whole window (0.09-0.15 s); the "more calls than room" test ran on
  // the window less the batch (negative) and flagged every honest kernel.
  TimingResult honest;
  honest.samples = 13;  // warm-ups and samples
  honest.median_s = honest.mean_s = 20e-6;
  const double window = 0.12, batch = 0.2, o = 60e-6;
  const double after_batch = window - batch * 1.1;
  CHECK(claimed_time_implausible(honest, after_batch, o, 2.0, 50e-6, 5e-3, nullptr));  // the old room test
  CHECK_FALSE(claimed_time_implausible(honest, after_batch, o, 2.0, 50e-6, 5e-3, nullptr, window));
  CHECK_FALSE(claim_below_parent_clock(honest, window, o, batch, ParentBound{}, nullptr));
  // The room test itself still bites on the whole window: 13 calls of 200 us overhead in 0.1 ms.
  CHECK(claimed_time_implausible(honest, after_batch, 200e-6, 2.0, 50e-6, 5e-3, nullptr, 0.1e-3));
}

TEST_CASE("the host path keeps main's slack: a hand-over 35 % slower than the reference's is not flagged there",
          "[runner][bound][threat]") {
  // H200, 2026-12-02 07:56Z (threat-v3, host path): softmax's L3 on attn16k_f32 and `honest` on
  // odd_49k were flagged because the candidate's device-to-host hand-over, inside its window, took
  // more than 1.25 x the reference's. Here: 30 calls of 61 us, a 0.5 ms empty sample, the
  // reference's batch 1.0 s and the candidate's own 1.35 s.
  TimingResult honest;
  honest.samples = 30;
  honest.median_s = honest.mean_s = 61e-6;
  const double o = 0.5e-3, ref_batch = 1.0, cand_batch = 1.35;
  const double window = cand_batch + honest.samples * (o + honest.mean_s);
  const ParentBound tight;                       // the resident path's
  const ParentBound host = ParentBound::host();  // the host path's: main's 50 % of the hand-over
  CHECK(claim_below_parent_clock(honest, window, o, ref_batch, tight, nullptr));
  CHECK_FALSE(claim_below_parent_clock(honest, window, o, ref_batch, host, nullptr));
  // The host bound is main's, in the batch's terms: 5 ms + calls x (50 % of o + 50 us) + 50 % of B
  // is main's 5 ms + calls x (50 % of o' + 50 us) with o' = o + B / calls.
  CHECK(bound_slack_s(30, o, ref_batch, host) ==
        Approx(5e-3 + 30 * (0.5 * (o + ref_batch / 30) + 50e-6)));
  CHECK(host.fraction == tight.fraction);
  CHECK(host.median_of_mean == tight.median_of_mean);
  // It still bites where the work is long against the hand-over: 3 calls of 100 ms claimed at 80 %.
  TimingResult forged;
  forged.samples = 3;
  forged.median_s = forged.mean_s = 80e-3;
  CHECK(claim_below_parent_clock(forged, 3 * (100e-3 + o) + 20e-3, o, 20e-3, host, nullptr));
}

TEST_CASE("only flags that rest on the parent's clock alone are confirmed by a fresh run", "[runner][bound][threat]") {
  // H200, 2026-12-02 07:51Z: honest_two_streams flagged on a timed n = 1 workload (17.9 ms
  // unexplained) while a vendor.py of a killed `d2k verify-tasks` was still timing on the GPU; the
  // same control passed twice at 07:56Z. A clock flag is re-run; evidence is not.
  EvalResult r;
  r.status = d2k::sandbox::Outcome::flagged;
  r.flags = {"time_below_outside_bound"};
  CHECK(flag_needs_confirmation(r));
  r.flags = {"tail_beyond_bound"};
  CHECK(flag_needs_confirmation(r));
  r.flags = {"forged_result_channel"};
  CHECK_FALSE(flag_needs_confirmation(r));
  r.flags = {"outputs_rewritten"};
  CHECK_FALSE(flag_needs_confirmation(r));
  r.flags = {"time_below_outside_bound", "background_thread"};  // evidence beside the clock: stands
  CHECK_FALSE(flag_needs_confirmation(r));
  r.flags = {};
  CHECK_FALSE(flag_needs_confirmation(r));  // flagged without a reason: not a clock flag
  r.status = d2k::sandbox::Outcome::ok;
  r.flags = {"throttled"};
  CHECK_FALSE(flag_needs_confirmation(r));
  EvalConfig cfg;
  CHECK(cfg.clock_flag_retries == 1);
  CHECK(cfg.bound.batch_rel_slack < cfg.host_bound.batch_rel_slack);
}

TEST_CASE("resident snapshot: agent GPU work that delays the owner's copy past timing_end is charged to the window",
          "[runner][bound][threat]") {
  // The owner copies a phase's timed slots into its own memory when timing_end arrives (the agent
  // runner frozen). Agent work queued before the freeze runs ahead of that copy on the GPU: what the
  // snapshot took beyond the copy's own time and the allowance for the pipe hops is charged.
  const ParentBound b;
  CHECK(snapshot_charge_s(0.4e-3, 0.2e-3, b) == 0);          // an honest snapshot: nothing
  CHECK(snapshot_charge_s(5.2e-3, 0.2e-3, b) == Approx(4e-3));  // 5 ms of deferred work: 4 ms charged
  CHECK(snapshot_charge_s(0.1e-3, 3.0, b) == 0);             // never negative
  CHECK(snapshot_charge_s(0.1e-3, -1.0, b) == 0);
  CHECK(snapshot_charge_s(std::numeric_limits<double>::infinity(), 0, b) == 0);
  // Charged work counts against the claim like any other: 20 calls of 1 ms, claimed honestly, and
  // 20 ms of the calls' work deferred past timing_end: the window grows by it and the claim is flagged.
  TimingResult claim;
  claim.samples = 20;
  claim.median_s = claim.mean_s = 0.1e-3;  // the calls returned at once: 0.1 ms each
  const double o = 40e-6, batch = 5e-3;
  const double window = 20 * (0.1e-3 + o) + batch;
  CHECK_FALSE(claim_below_parent_clock(claim, window, o, batch, b, nullptr));
  CHECK(claim_below_parent_clock(claim, window + snapshot_charge_s(20e-3 + 0.3e-3, 0.3e-3, b), o, batch, b, nullptr));
}

TEST_CASE("work shifting: the workload's time is the claimed median raised to the parent's per-call floor",
          "[runner][bound][threat]") {
  // 20 timed calls of a 1 ms kernel; the batch (every call's inputs) exists before the first call,
  // so a kernel can do the work of two calls in half of them and none in the others: its mean stays
  // honest (the tight bound passes) while its median is about zero.
  const int calls = 20;
  const double kernel = 1e-3, o = 40e-6, batch = 10e-3;
  const double window = calls * (kernel + o) + batch;
  const ParentBound b;
  TimingResult shifted;
  shifted.samples = calls;
  shifted.mean_s = kernel;
  shifted.median_s = 1e-6;
  CHECK_FALSE(claim_below_parent_clock(shifted, window, o, batch, b, nullptr));
  const double floor = parent_floor_per_call_s(calls, window, o, batch, b);
  CHECK(floor > 0.65 * kernel);  // the claim's time becomes at least this (the evaluator: max(median, floor))
  CHECK(floor < kernel);        // an honest median is never raised above the kernel's real time
  // No call time in the window: no floor.
  CHECK(parent_floor_per_call_s(calls, batch / 2, o, batch, b) == 0);
  CHECK(parent_floor_per_call_s(0, window, o, batch, b) == 0);
}

TEST_CASE("the phase snapshot's keyed hash: file and buffer agree; a changed byte or key changes it",
          "[runner][threat]") {
  const auto path = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "keyed-hash.bin";
  std::filesystem::create_directories(path.parent_path());
  // Larger than one 8 MiB chunk, with a tail that is not a multiple of 32 bytes, at an offset.
  std::vector<char> data((9u << 20) + 45);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  {
    std::ofstream f(path, std::ios::binary);
    f.write("0123456789", 10);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  const std::uint64_t key = 0x1234567890abcdefull;
  const std::uint64_t h = keyed_hash(data.data(), data.size(), key);
  CHECK(keyed_hash_fd(fd, 10, data.size(), key) == h);
  CHECK(keyed_hash(data.data(), data.size(), key + 1) != h);
  for (std::size_t at : {std::size_t{0}, std::size_t{31}, std::size_t{8u << 20}, data.size() - 1}) {
    std::vector<char> changed = data;
    changed[at] ^= 1;
    CHECK(keyed_hash(changed.data(), changed.size(), key) != h);
  }
  CHECK_THROWS(keyed_hash_fd(fd, 10, data.size() + 1, key));  // shorter than the layout
  ::close(fd);
}

TEST_CASE("freeze: a frozen runner writes nothing to its output file until it is thawed", "[runner][process][threat]") {
  // The output-rewrite defence takes a timed phase's outputs with the runner frozen. A stand-in
  // runner that, once ready, rewrites the first bytes of its output file (fd 4) as fast as it can.
  const auto dir = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "freeze";
  std::filesystem::create_directories(dir);
  const auto script = dir / "scribbler.sh";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\necho '{\"event\":\"ready\",\"seq\":0}' >&3\n"
         "i=0\nwhile :; do i=$((i+1)); printf '%012d' \"$i\" 1<>/proc/self/fd/4; done\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  auto p = RunnerProcess::start({script, Mode::trusted, -1, false});
  REQUIRE(p->wait_ready(std::chrono::seconds(10)));
  auto head = [&] {
    char buf[12] = {};
    const ssize_t n = ::pread(p->output_fd(), buf, sizeof buf, 0);
    return n == static_cast<ssize_t>(sizeof buf) ? std::string(buf, sizeof buf) : std::string();
  };
  auto changes_within = [&](std::chrono::milliseconds limit) {
    const std::string first = head();
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (head() != first && !head().empty()) return true;
      ::usleep(1000);
    }
    return false;
  };
  REQUIRE(changes_within(std::chrono::seconds(10)));  // it scribbles
  CHECK(p->freeze(std::chrono::milliseconds(2000)) >= 0);
  CHECK_FALSE(changes_within(std::chrono::milliseconds(300)));  // frozen: not one write
  p->thaw();
  CHECK(changes_within(std::chrono::seconds(10)));  // and on again
  p->kill();
  p->wait();
}

TEST_CASE("class 1: the warm-up count is not in the job; the parent draws it per phase", "[runner][wire][threat]") {
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[1]};
  const Job job = make_job(vector_add(), wls, {1}, "/x.so", TimingSpec{});
  const nlohmann::json j = to_json(job);
  CHECK_FALSE(j.at("timing").contains("warmup"));  // only the most a key may ask for
  CHECK(j.at("timing").at("max_warmup") == 5);
  const Job runner_side = job_from_json(j);
  CHECK(runner_side.timing.warmup == 0);  // the runner learns the count with the key only
  CHECK(warmup_range(runner_side.timing) == std::make_pair(1, 5));
  // The same layout on both ends: the most warm-ups' slots before the samples'.
  CHECK(timed_call_slots(job, 0) == timed_slots(job, 0) + 5);
  CHECK(timed_call_slots(runner_side, 0) == timed_call_slots(job, 0));
  CHECK(output_layout(runner_side).total_bytes == output_layout(job).total_bytes);
  // Draws cover the range [2, 5] for the default 3 and nothing outside it.
  std::set<int> seen;
  for (std::uint64_t r = 0; r < 64; ++r) {
    const int w = draw_warmup(TimingSpec{}, r * 0x9E3779B97F4A7C15ull);
    CHECK(w >= 2);
    CHECK(w <= 5);
    seen.insert(w);
  }
  CHECK(seen.size() == 4);
  TimingSpec none;
  none.warmup = 0;
  CHECK(warmup_range(none) == std::make_pair(1, 2));
  nlohmann::json bad = j;
  bad["timing"]["max_warmup"] = -3;
  CHECK_THROWS_AS(job_from_json(bad), WireError);
}

TEST_CASE("the tail after the last timed call is bounded by the reference's end", "[runner][bound][threat]") {
  const ParentBound b;  // 0.25 s + 3 × the reference's result-to-reap
  CHECK(tail_allowance_s(0.05, b) == Approx(0.25 + 3 * 0.05));
  CHECK(tail_allowance_s(-1.0, b) == Approx(0.25));  // a clock step never lowers it below the constant
  // H200, 2026-12-01: honest tails of 0.06-0.15 s; a handler spinning 90 % of the time multiplies it.
  CHECK(0.15 <= tail_allowance_s(0.03, b));
  CHECK(10 * 0.06 > tail_allowance_s(0.03, b));
}

TEST_CASE("class 13: launches of every correctness call are merged; a call that differs shows its launch",
          "[runner][wire][threat]") {
  LaunchRecord a;
  a.kernel = "k";
  a.grid_x = 132;
  a.block_x = 256;
  LaunchRecord big = a;
  big.grid_x = 65536;  // sized to the machine on one call only
  const std::vector<LaunchRecord> first = {a, a};  // two identical launches per call
  std::vector<LaunchRecord> merged = first;
  merge_call_launches(merged, first, {a, a});  // the same call again: nothing added, the count stays
  CHECK(merged.size() == 2);
  merge_call_launches(merged, first, {a, big});  // a call that differs: its new launch is seen
  REQUIRE(merged.size() == 3);
  CHECK(same_launch(merged[2], big));
  merge_call_launches(merged, first, {big});  // already listed
  CHECK(merged.size() == 3);
  CHECK_FALSE(same_launch(a, big));
  std::vector<LaunchRecord> full(kMaxLaunchRecords, a);
  merge_call_launches(full, first, {big});  // never beyond the wire's cap
  CHECK(full.size() == kMaxLaunchRecords);
}

TEST_CASE("the timed batch: calls capped by the batch budget, the replay makes the same batch", "[runner][wire][threat]") {
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[1]};  // 64 Mi floats: 768 MiB per call
  Job job = make_job(vector_add(), wls, {1}, "/x.so", TimingSpec{});
  CHECK(call_bytes(job.workloads[0]) == 3 * (64ull << 20) * 4);
  CHECK(timed_slots(job, 0) == 12);  // 3 GiB of outputs / 256 MiB
  job.timing.batch_bytes = 8ull << 30;  // 10 calls' inputs and outputs fit: at most 5 warm-ups + 5 samples
  CHECK(timed_slots(job, 0) == 5);
  job.timing.batch_bytes = 1;  // never below the floor
  CHECK(timed_slots(job, 0) == 3);
  job.workloads[0].replay_key = 5;
  job.workloads[0].replay_samples = 3;
  job.workloads[0].replay_batch = 6;
  const Job back = job_from_json(nlohmann::json::parse(to_json(job).dump()));
  CHECK(back.workloads[0].replay_batch == 6);
  CHECK(back.timing.batch_bytes == 1);
  nlohmann::json bad = to_json(job);
  bad["workloads"][0]["replay_batch"] = -1;
  CHECK_THROWS_AS(job_from_json(bad), WireError);
  // The reference's batch times survive the wire and are checked.
  RunnerResult r;
  WorkloadResult w;
  w.name = "x";
  w.batch_in_s = 0.25;
  w.batch_out_s = 0.5;
  r.workloads.push_back(w);
  const RunnerResult rb = result_from_json(to_json(r));
  CHECK(rb.workloads[0].batch_in_s == 0.25);
  CHECK(rb.workloads[0].batch_out_s == 0.5);
  nlohmann::json rj = to_json(r);
  rj["workloads"][0]["batch_in_s"] = -1.0;
  CHECK_THROWS_AS(result_from_json(rj), WireError);
}

// ---- issue 23, class 15: each evaluation's GPU time budgeted from the task --------------------
TEST_CASE("the candidate's GPU budget comes from the task's reference time, capped by the job timeout",
          "[runner][budget][threat]") {
  EvalConfig cfg;  // factor 20, constant 30 s, job_timeout_s 300
  std::vector<const d2k::tasks::Workload*> wls = {&vector_add().workloads[0], &vector_add().workloads[1]};
  Job job = make_job(vector_add(), wls, {1, 2}, "/x.so", TimingSpec{});  // one timed workload
  CHECK(candidate_budget_s(cfg, job, std::nullopt) == cfg.job_timeout_s);  // no reference run yet
  // 0.5 s of reference: 20 × 0.5 + 30 + 2 × 2 s (one timed workload's time cap) = 44 s.
  CHECK(candidate_budget_s(cfg, job, 0.5) == Approx(44.0));
  job.timing.enabled = false;
  CHECK(candidate_budget_s(cfg, job, 0.5) == Approx(40.0));
  CHECK(candidate_budget_s(cfg, job, 1000.0) == cfg.job_timeout_s);  // never above the timeout
}
