// GPU tests of the evaluation core on tasks/vector_add: the task's own kernels (reference,
// baseline, experts) evaluate ok with timing and are never flagged; calibration caches their
// times; a kernel built by the sandboxed compiler evaluates in an agent runner.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "catch.hpp"
#include "gpu_support.hpp"
#include "sandbox/compiler.hpp"

using d2k::runner::EvalRequest;
using d2k::runner::EvalResult;
using d2k::runner::WorkloadSet;

namespace {
EvalResult eval_so(const std::filesystem::path& so, bool trusted) {
  EvalRequest r;
  r.task = &d2k::test::vector_add();
  r.so_path = so;
  r.workloads = WorkloadSet::all;
  r.seeds = 2;
  r.trusted = trusted;
  EvalResult e = d2k::test::evaluator().evaluate(r);
  std::printf("%s: %s time=%.3f us flags=%zu phases=%s\n", so.filename().c_str(), std::string(d2k::sandbox::to_string(e.status)).c_str(), e.time_s * 1e6,
              e.flags.size(), e.to_json().at("phases").dump().c_str());
  for (const auto& w : e.workloads)
    if (w.timing)
      std::printf("   %-18s median %.2f us  min %.2f  cv %.4f  samples %d  event %.2f  wall %.2f  outside %.2f  clock %u/%u\n",
                  w.name.c_str(), w.timing->median_s * 1e6, w.timing->min_s * 1e6, w.timing->cv, w.timing->samples,
                  w.timing->event_median_s * 1e6, w.timing->wall_median_s * 1e6, w.outside_s * 1e6,
                  w.timing->sm_clock_end_mhz, w.timing->sm_clock_max_mhz);
  UNSCOPED_INFO(e.to_json().dump(1).substr(0, 4000));
  return e;
}
}  // namespace

TEST_CASE("the probe lists the GPU", "[gpu][runner]") {
  if (!d2k::test::have_gpu("probe")) return;
  const auto& g = d2k::test::evaluator().gpus()[0];
  std::printf("GPU 0: %s, %d SMs, L2 %llu bytes, driver %s, NVML %s\n", g.name.c_str(), g.sm_count,
              static_cast<unsigned long long>(g.l2_bytes), g.driver.c_str(), g.nvml ? "yes" : "no");
  CHECK_FALSE(g.name.empty());
  CHECK(g.l2_bytes > 0);
}

TEST_CASE("the task's own kernels are correct, timed and never flagged", "[gpu][runner]") {
  if (!d2k::test::have_gpu("own kernels")) return;
  const auto& task = d2k::test::vector_add();
  const auto out = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "runner" / "trusted-so";
  const EvalResult ref = eval_so(d2k::test::nvcc_build(task.reference_path(), out), false);
  CHECK(ref.status == d2k::sandbox::Outcome::ok);
  CHECK(ref.flags.empty());
  const EvalResult base = eval_so(d2k::test::nvcc_build(task.baseline_path(), out), false);
  CHECK(base.status == d2k::sandbox::Outcome::ok);
  CHECK(base.flags.empty());
  double t3 = 0;
  for (int layer = 1; layer <= 3; ++layer) {
    const EvalResult e = eval_so(d2k::test::nvcc_build(task.expert_path(layer), out), false);
    CHECK(e.status == d2k::sandbox::Outcome::ok);
    CHECK(e.flags.empty());
    if (layer == 3) t3 = e.time_s;
  }
  REQUIRE(ref.ok());
  for (const auto& w : ref.workloads) {
    const bool timed = std::find_if(task.workloads.begin(), task.workloads.end(), [&](const auto& tw) {
                         return tw.name == w.name && tw.timed;
                       }) != task.workloads.end();
    CHECK(w.timing.has_value() == timed);  // `timed: false` workloads are checked, never timed
    if (!w.timing) continue;
    CHECK(w.timing->samples >= 10);
    CHECK(w.correct);
    for (const auto& c : w.checks) CHECK(c.mismatches == 0);
  }
  if (base.ok() && t3 > 0) CHECK(t3 < base.time_s);  // the expert beats the naive baseline
}

TEST_CASE("calibration measures baseline and experts once and caches them", "[gpu][runner]") {
  if (!d2k::test::have_gpu("calibration")) return;
  auto& ev = d2k::test::evaluator();
  const auto first = ev.calibrate(d2k::test::vector_add(), 0);
  std::size_t timed = 0;
  for (const auto& w : d2k::test::vector_add().workloads) timed += w.timed ? 1 : 0;
  CHECK(first.baseline.size() == timed);  // correctness-only workloads have no time
  CHECK(first.experts.count(3) == 1);
  std::printf("calibration: baseline geomean %.2f us, L3 geomean %.2f us\n",
              d2k::runner::CalibrationEntry::geomean(first.baseline) * 1e6,
              first.experts.count(3) ? d2k::runner::CalibrationEntry::geomean(first.experts.at(3)) * 1e6 : 0.0);
  const auto second = ev.calibrate(d2k::test::vector_add(), 0);
  CHECK(second.measured_at == first.measured_at);
  CHECK(second.baseline == first.baseline);
}

TEST_CASE("a kernel built by the sandboxed compiler runs in an agent runner", "[gpu][runner]") {
  if (!d2k::test::have_gpu("sandboxed compile")) return;
  const auto& task = d2k::test::vector_add();
  d2k::sandbox::CompilerConfig cc;
  const auto state = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "sandbox-compile";
  cc.cache_dir = state / "cache";
  cc.scratch_dir = state / "scratch";
  std::filesystem::create_directories(cc.cache_dir);
  std::filesystem::create_directories(cc.scratch_dir);
  d2k::sandbox::Compiler compiler(cc);
  d2k::sandbox::CompileRequest req;
  std::ifstream in(task.expert_path(1));
  req.files["kernel.cu"] = std::string(std::istreambuf_iterator<char>(in), {});
  const auto out = compiler.compile(req);
  INFO(out.log);
  REQUIRE(out.ok);
  const EvalResult e = eval_so(out.artifact, false);
  CHECK(e.status == d2k::sandbox::Outcome::ok);
}

// ---- GPU-resident outputs (EvalConfig::gpu_resident; docs/timing-protocol.md) --------------------
namespace {
EvalResult eval_resident(const std::filesystem::path& so, bool resident, WorkloadSet set = WorkloadSet::all) {
  EvalRequest r;
  r.task = &d2k::test::vector_add();
  r.so_path = so;
  r.workloads = set;
  r.seeds = 2;
  auto& ev = resident ? d2k::test::evaluator_resident() : d2k::test::evaluator_host();
  EvalResult e = ev.evaluate(r);
  std::printf("%s [%s]: %s time=%.3f us flags=%zu phases=%s\n", so.filename().c_str(), resident ? "gpu-resident" : "host",
              std::string(d2k::sandbox::to_string(e.status)).c_str(), e.time_s * 1e6, e.flags.size(),
              e.to_json().at("phases").dump().c_str());
  for (const auto& w : e.workloads)
    if (w.timing)
      std::printf("   %-18s median %.2f us  cv %.4f  samples %d  outside %.2f\n", w.name.c_str(), w.timing->median_s * 1e6,
                  w.timing->cv, w.timing->samples, w.outside_s * 1e6);
  UNSCOPED_INFO(e.to_json().dump(1).substr(0, 4000));
  return e;
}
// vector_add that is wrong at one element of each call (index 12345) and right elsewhere.
std::filesystem::path wrong_at_12345() {
  const auto dir = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "runner" / "resident";
  std::filesystem::create_directories(dir);
  const auto cu = dir / "wrong_at_12345.cu";
  std::ofstream(cu) << "#include <cstdint>\n#include <cuda_runtime.h>\n"
                       "__global__ void k(const float* a, const float* b, float* y, int64_t n) {\n"
                       "  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;\n"
                       "  if (i < n) y[i] = i == 12345 ? a[i] - b[i] + 1.0f : a[i] + b[i];\n}\n"
                       "extern \"C\" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {\n"
                       "  k<<<unsigned((n + 255) / 256), 256, 0, s>>>(a, b, y, n);\n  return int(cudaGetLastError());\n}\n";
  return d2k::test::nvcc_build(cu, dir);
}
}  // namespace

TEST_CASE("gpu-resident: the expert is correct, timed and unflagged, every output compared on the GPU", "[gpu][runner][resident]") {
  if (!d2k::test::have_gpu("gpu-resident expert")) return;
  const auto& task = d2k::test::vector_add();
  const auto out = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "runner" / "trusted-so";
  const auto so = d2k::test::nvcc_build(task.expert_path(3), out);
  const EvalResult host = eval_resident(so, false);
  const EvalResult gpu = eval_resident(so, true);
  CHECK(host.status == d2k::sandbox::Outcome::ok);
  REQUIRE(gpu.status == d2k::sandbox::Outcome::ok);
  CHECK(gpu.flags.empty());
  REQUIRE(gpu.workloads.size() == host.workloads.size());
  for (std::size_t w = 0; w < gpu.workloads.size(); ++w) {
    const auto& g = gpu.workloads[w];
    CHECK(g.correct);
    CHECK(g.timing.has_value() == host.workloads[w].timing.has_value());
    std::size_t seeds = 0;
    for (const auto& c : g.checks) {
      CHECK(c.mismatches == 0);
      CHECK(c.arg == "y");
      if (c.seed_index >= 0) ++seeds;
    }
    CHECK(seeds == 2);
    if (g.timing) CHECK(g.timing->samples >= 10);
  }
  CHECK(gpu.phases.compare_s == 0);  // no comparison in the parent
  // Class 11: the timed calls' inputs came from the owner's arena (no key in the agent runner); the
  // host path keeps its key and has no arena.
  CHECK((gpu.input_arena == "read" || gpu.input_arena == "readwrite"));
  CHECK(host.input_arena.empty());
  std::printf("gpu-resident expert: input arena mapped %s\n", gpu.input_arena.c_str());
}

// Issue 15 (EvalConfig::owner_reuse): the trusted owner stays between evaluations: it lets go of
// each job's memory and library and takes the next job, of any task. Across two tasks and a wrong
// kernel between them, every verdict is the one a fresh owner gives.
TEST_CASE("gpu-resident: a warm owner serves evaluations of two tasks and a wrong kernel with fresh verdicts",
          "[gpu][runner][resident]") {
  if (!d2k::test::have_gpu("gpu-resident warm owner")) return;
  const auto out = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "runner" / "trusted-so";
  const auto va = d2k::test::nvcc_build(d2k::test::vector_add().expert_path(3), out);
  static const d2k::tasks::Task softmax = d2k::tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / "softmax");
  const auto sm = d2k::test::nvcc_build(softmax.expert_path(3), out / "softmax");  // (both are experts/L3.cu)
  auto& ev = d2k::test::evaluator_resident();
  auto run = [&](const d2k::tasks::Task& task, const std::filesystem::path& so) {
    EvalRequest r;
    r.task = &task;
    r.so_path = so;
    r.workloads = WorkloadSet::visible;
    r.seeds = 2;
    const EvalResult e = ev.evaluate(r);
    std::printf("warm owner: %s %s: %s owner job %d time %.2f us, reference frames end with %s\n", task.id.c_str(),
                so.filename().c_str(), std::string(d2k::sandbox::to_string(e.status)).c_str(), e.phases.owner_job,
                e.time_s * 1e6, e.phases.reference_frames.empty() ? "-" : e.phases.reference_frames.back().first.c_str());
    UNSCOPED_INFO(e.to_json().dump(1).substr(0, 3000));
    return e;
  };
  const EvalResult a = run(d2k::test::vector_add(), va);
  REQUIRE(a.status == d2k::sandbox::Outcome::ok);
  CHECK(a.flags.empty());
  CHECK(a.phases.reference_frames.back().first == "result");  // it stayed: no reap
  const EvalResult b = run(softmax, sm);  // another task: another reference library in the same owner
  REQUIRE(b.status == d2k::sandbox::Outcome::ok);
  CHECK(b.flags.empty());
  CHECK(b.phases.owner_job == a.phases.owner_job + 1);
  for (const auto& w : b.workloads) CHECK(w.correct);
  const EvalResult c = run(d2k::test::vector_add(), wrong_at_12345());
  CHECK(c.status == d2k::sandbox::Outcome::incorrect);
  CHECK(c.phases.owner_job == b.phases.owner_job + 1);
  const EvalResult d = run(d2k::test::vector_add(), va);  // the owner after a wrong kernel: ok again
  REQUIRE(d.status == d2k::sandbox::Outcome::ok);
  CHECK(d.flags.empty());
  CHECK(d.phases.owner_job == c.phases.owner_job + 1);
  CHECK(d.time_s < 1.05 * a.time_s);
  CHECK(a.time_s < 1.05 * d.time_s);
}

// EvalConfig::replay_oracle: the owner replays the candidate's timed calls with the task's L3
// expert, the correctness calls with the reference. Shown with a copy of vector_add whose "expert"
// is wrong at one element: the honest L3 then fails on its timed calls only (their checks, seed
// index below 0), passes every correctness check, and passes whole with the oracle off.
TEST_CASE("gpu-resident: the owner's replay of the timed calls runs the task's L3 expert, its correctness calls the reference",
          "[gpu][runner][resident]") {
  if (!d2k::test::have_gpu("gpu-resident replay oracle")) return;
  const auto dir = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "runner" / "oracle";
  std::filesystem::remove_all(dir / "vector_add");
  std::filesystem::create_directories(dir);
  std::filesystem::copy(d2k::test::vector_add().dir, dir / "vector_add", std::filesystem::copy_options::recursive);
  std::filesystem::copy_file(wrong_at_12345().parent_path() / "wrong_at_12345.cu", dir / "vector_add" / "experts" / "L3.cu",
                             std::filesystem::copy_options::overwrite_existing);
  const d2k::tasks::Task task = d2k::tasks::load_task(dir / "vector_add");
  const auto honest = d2k::test::nvcc_build(d2k::test::vector_add().expert_path(3),
                                            std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "runner" / "trusted-so");
  EvalRequest r;
  r.task = &task;
  r.so_path = honest;
  r.workloads = WorkloadSet::visible;
  r.seeds = 2;
  const EvalResult e = d2k::test::evaluator_resident().evaluate(r);
  UNSCOPED_INFO(e.to_json().dump(1).substr(0, 3000));
  CHECK(e.replayed_with == "experts/L3.cu");
  CHECK(e.status == d2k::sandbox::Outcome::incorrect);
  int timed_bad = 0, seed_bad = 0;
  for (const auto& w : e.workloads)
    for (const auto& c : w.checks)
      if (c.mismatches > 0) ++(c.seed_index < 0 ? timed_bad : seed_bad);
  CHECK(seed_bad == 0);
  CHECK(timed_bad > 0);
  // The real vector_add: its L3 as the oracle, the honest L3 ok.
  r.task = &d2k::test::vector_add();
  const EvalResult ok = d2k::test::evaluator_resident().evaluate(r);
  CHECK(ok.replayed_with == "experts/L3.cu");
  CHECK(ok.status == d2k::sandbox::Outcome::ok);
  CHECK(ok.flags.empty());
  // The oracle off: the wrong "expert" is never run, the reference replays, the honest L3 is ok.
  // (Its own evaluator, gone at the end of this test: its runners leave the GPU to the next tests.)
  auto off = [] {
    d2k::runner::EvalConfig cfg = d2k::test::evaluator_resident().config();
    cfg.replay_oracle = false;
    return std::make_unique<d2k::runner::Evaluator>(cfg);
  }();
  r.task = &task;
  const EvalResult ref = off->evaluate(r);
  UNSCOPED_INFO(ref.to_json().dump(1).substr(0, 2000));
  CHECK(ref.replayed_with == "reference.cu");
  CHECK(ref.status == d2k::sandbox::Outcome::ok);
  std::printf("replay oracle: with the wrong expert %s (%d timed checks failed), vector_add %s, reference replay %s; "
              "reference phase %.3f / %.3f / %.3f s\n",
              std::string(d2k::sandbox::to_string(e.status)).c_str(), timed_bad,
              std::string(d2k::sandbox::to_string(ok.status)).c_str(), std::string(d2k::sandbox::to_string(ref.status)).c_str(),
              e.phases.reference_s, ok.phases.reference_s, ref.phases.reference_s);
}

// Class 13 (docs/threat-model.md): with launch records, one drawn warm-up per timed phase is
// recorded inside the phase's window (CUPTI on around that call only): the expert stays ok and
// unflagged under the tight bound, and its launches are recorded on every workload.
TEST_CASE("gpu-resident: with launch records (a warm-up recorded per phase) the expert stays ok and unflagged",
          "[gpu][runner][resident]") {
  if (!d2k::test::have_gpu("gpu-resident launch records")) return;
  const auto& task = d2k::test::vector_add();
  const auto out = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "runner" / "trusted-so";
  EvalRequest r;
  r.task = &task;
  r.so_path = d2k::test::nvcc_build(task.expert_path(3), out);
  r.workloads = WorkloadSet::all;
  r.seeds = 2;
  r.record_launches = true;
  const EvalResult e = d2k::test::evaluator_resident().evaluate(r);
  std::printf("experts_L3.so [gpu-resident, launch records]: %s time=%.3f us flags=%zu launches_error='%s' message='%s'\n",
              std::string(d2k::sandbox::to_string(e.status)).c_str(), e.time_s * 1e6, e.flags.size(),
              e.launches_error.c_str(), e.message.c_str());
  UNSCOPED_INFO(e.to_json().dump(1).substr(0, 4000));
  for (const auto& w : e.workloads)
    if (w.timing)
      std::printf("   %-18s median %.2f us  flag below %.3f  launches %zu\n", w.name.c_str(), w.timing->median_s * 1e6,
                  w.flag_below_fraction, w.launches ? w.launches->size() : 0);
  CHECK(e.status == d2k::sandbox::Outcome::ok);
  CHECK(e.flags.empty());
  CHECK(e.retried_flag.empty());
  CHECK(e.launches_error.empty());
  for (const auto& w : e.workloads) {
    CHECK(w.launches.has_value());
    if (w.launches) CHECK(!w.launches->empty());
  }
}

// Disturbed trains (EvalConfig::train_retries): every split train of long calls is made again twice
// (band -1). The discarded trains' outputs are never compared, the counted one's are: the expert
// stays ok and unflagged with one train per phase and its two discarded ones reported; a kernel
// wrong at one element of every call is still incorrect (the counted train and the phase compared).
TEST_CASE("gpu-resident: disturbed trains are made again; the counted train is compared, the expert stays ok",
          "[gpu][runner][resident]") {
  if (!d2k::test::have_gpu("gpu-resident disturbed trains")) return;
  auto& ev = d2k::test::evaluator_resident_retrying();
  REQUIRE(ev.config().train);
  REQUIRE(ev.config().train_split);
  const auto& task = d2k::test::vector_add();
  EvalRequest r;
  r.task = &task;
  r.so_path = d2k::test::nvcc_build(task.expert_path(3), std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "runner" / "trusted-so");
  r.workloads = WorkloadSet::all;
  r.seeds = 2;
  const EvalResult e = ev.evaluate(r);
  std::printf("experts_L3.so [gpu-resident, every long train made again twice]: %s time=%.3f us flags=%zu %s\n",
              std::string(d2k::sandbox::to_string(e.status)).c_str(), e.time_s * 1e6, e.flags.size(), e.message.c_str());
  UNSCOPED_INFO(e.to_json().dump(1).substr(0, 6000));
  REQUIRE(e.status == d2k::sandbox::Outcome::ok);
  CHECK(e.flags.empty());
  int retried_workloads = 0;
  for (const auto& w : e.workloads) {
    if (!w.timing || w.trains.empty()) continue;
    CHECK(w.correct);
    CHECK(w.trains.size() == 1);
    const auto& t = w.trains.front();
    std::printf("   %-18s time %.2f us (synced %.2f, back to back %.2f, sync cost %.2f), %zu made again:", w.name.c_str(),
                w.timing->median_s * 1e6, t.half_s * 1e6, t.queued_s * 1e6, t.sync_call_s * 1e6, w.retried_trains.size());
    for (const auto& d : w.retried_trains) std::printf(" [%.2f / %.2f]", d.half_s * 1e6, d.queued_s * 1e6);
    std::printf("\n");
    if (t.half_calls <= 0) continue;
    // Long calls (the sync cost within its cap): made again exactly train_retries times; short ones never.
    const bool long_calls = t.sync_call_s <= d2k::runner::ParentBound{}.split_sync_cap * t.half_s;
    if (long_calls) {
      CHECK(w.retried_trains.size() == 2);
      ++retried_workloads;
    } else {
      CHECK(w.retried_trains.empty());
    }
    for (const auto& d : w.retried_trains) {
      CHECK(d.calls > d.half_calls);
      CHECK(d.half_s > 0);
      CHECK(d.queued_s > 0);
    }
  }
  CHECK(retried_workloads >= 2);  // pow2_64m and its odd sibling at least
  // Wrong at one element of every call: the counted train's calls and the phase's are compared.
  r.so_path = wrong_at_12345();
  const EvalResult bad = ev.evaluate(r);
  std::printf("wrong_at_12345.so [every long train made again twice]: %s %s\n", std::string(d2k::sandbox::to_string(bad.status)).c_str(),
              bad.message.c_str());
  CHECK(bad.status == d2k::sandbox::Outcome::incorrect);
}

// The two evaluations draw their own secret seeds, so the values differ; the index, the count and
// the relation of the values (the only wrong element sets max_abs) must hold on both paths.
TEST_CASE("gpu-resident: a wrong element is found at the same index as on the host", "[gpu][runner][resident]") {
  if (!d2k::test::have_gpu("gpu-resident wrong element")) return;
  const auto so = wrong_at_12345();
  const EvalResult host = eval_resident(so, false, WorkloadSet::visible);
  const EvalResult gpu = eval_resident(so, true, WorkloadSet::visible);
  REQUIRE(host.status == d2k::sandbox::Outcome::incorrect);
  REQUIRE(gpu.status == d2k::sandbox::Outcome::incorrect);
  REQUIRE(gpu.workloads.size() == host.workloads.size());
  for (std::size_t w = 0; w < gpu.workloads.size(); ++w) {
    const auto& g = gpu.workloads[w].checks;
    const auto& h = host.workloads[w].checks;
    REQUIRE(g.size() == h.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      CHECK(g[i].seed_index == h[i].seed_index);
      CHECK(g[i].mismatches == 1);
      CHECK(g[i].mismatches == h[i].mismatches);
      CHECK(g[i].first_bad == 12345);
      CHECK(g[i].first_bad == h[i].first_bad);
      CHECK(g[i].first_bad_got != g[i].first_bad_want);
      CHECK(g[i].max_abs == std::fabs(g[i].first_bad_got - g[i].first_bad_want));
      CHECK(h[i].max_abs == std::fabs(h[i].first_bad_got - h[i].first_bad_want));
    }
  }
}
