// CPU tests of what `d2k verify-tasks` computes: design properties from captured cuobjdump output
// of the vector_add experts (tests/verify/fixtures, made with nvcc -arch=sm_90 and cuobjdump 13),
// launch records and timings; the ladder and speed-of-light arithmetic; the RESULTS.md text.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.hpp"
#include "sandbox/eval/evaluator.hpp"
#include "sandbox/eval/properties.hpp"
#include "env/cli/verify_report.hpp"
#include "tasks/loader/task.hpp"

using namespace d2k;
using runner::PropertyState;

namespace {

// Relative closeness (Catch's Approx is spelled differently in v2 and v3).
bool near(double a, double b) { return std::fabs(a - b) <= 1e-5 * std::max(1.0, std::fabs(b)); }

std::string fixture(const std::string& name) {
  std::ifstream in(std::filesystem::path(D2K_SOURCE_DIR) / "tests" / "verify" / "fixtures" / name);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// vector_add plus a hygiene property that no layer of its ladder can introduce (L2 already has no
// local memory), so the derived checks have a failure to find.
const tasks::Task& vector_add() {
  static const tasks::Task t = [] {
    tasks::Task task = tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / "vector_add");
    tasks::Property p;
    p.id = "no_local_memory";
    p.title = "No local memory (no register spills)";
    p.layer = 3;
    p.check = {{"kind", "resource"}, {"metric", "local_bytes_per_thread"}, {"op", "=="}, {"value", 0}};
    task.properties.push_back(p);
    return task;
  }();
  return t;
}

const tasks::Property& prop(const std::string& id) {
  for (const auto& p : vector_add().properties)
    if (p.id == id) return p;
  FAIL("vector_add has no property " << id);
  throw std::logic_error("unreachable");
}

runner::PropertyInputs with_sass(const std::string& file) {
  runner::PropertyInputs in;
  in.sass = runner::parse_sass(fixture(file));
  return in;
}

runner::LaunchRecord launch(std::uint32_t grid, std::uint32_t block = 256) {
  runner::LaunchRecord l;
  l.kernel = "k";
  l.grid_x = grid;
  l.grid_y = l.grid_z = 1;
  l.block_x = block;
  l.block_y = l.block_z = 1;
  l.registers_per_thread = 32;
  return l;
}

}  // namespace

TEST_CASE("SASS opcodes are read per function, predicates and encodings skipped", "[verify][properties]") {
  const auto fns = runner::parse_sass(fixture("vector_add_L3.sass"));
  REQUIRE(fns.size() == 2);
  CHECK(fns[0].name.find("vector_add_scalar") != std::string::npos);
  CHECK(fns[1].name.find("vector_add_vec4") != std::string::npos);
  std::size_t ldg128 = 0, exits = 0;
  for (const auto& f : fns)
    for (const auto& op : f.opcodes) {
      CHECK(op.find("/*") == std::string::npos);
      CHECK(op.front() != '@');
      CHECK(op.back() != ';');
      ldg128 += op == "LDG.E.EF.128";
      exits += op == "EXIT";
    }
  CHECK(ldg128 == 6);
  CHECK(exits >= 2);  // "@P0 EXIT" lines count as EXIT
  CHECK(runner::parse_sass("no disassembly here\n/* 0x000fe200 */\n").empty());
}

TEST_CASE("sass properties: 128-bit accesses hold on L3 and fail on L2", "[verify][properties]") {
  const auto& task = vector_add();
  const auto l3 = with_sass("vector_add_L3.sass");
  const auto l2 = with_sass("vector_add_L2.sass");
  auto r = runner::check_property(task, prop("vector_loads"), l3);
  CHECK(r.state == PropertyState::holds);
  CHECK(r.detail.find("6 matching") != std::string::npos);
  CHECK(runner::check_property(task, prop("vector_stores"), l3).state == PropertyState::holds);
  CHECK(runner::check_property(task, prop("vector_loads"), l2).state == PropertyState::fails);
  CHECK(runner::check_property(task, prop("vector_stores"), l2).state == PropertyState::fails);

  tasks::Property p = prop("vector_loads");
  p.check["min_count"] = 7;  // six 128-bit loads in the L3 object: seven are not there
  CHECK(runner::check_property(task, p, l3).state == PropertyState::fails);
  p.check["expect"] = "absent";
  CHECK(runner::check_property(task, p, l3).state == PropertyState::fails);
  CHECK(runner::check_property(task, p, l2).state == PropertyState::holds);

  runner::PropertyInputs none;
  none.sass_missing = "cuobjdump not found";
  r = runner::check_property(task, prop("vector_loads"), none);
  CHECK(r.state == PropertyState::unchecked);
  CHECK(r.detail.find("cuobjdump not found") != std::string::npos);
}

TEST_CASE("resource usage is parsed; stack frames count as local memory", "[verify][properties]") {
  const auto l3 = runner::parse_res_usage(fixture("vector_add_L3.res"));
  REQUIRE(l3.size() == 2);
  CHECK(l3[0].registers == 14);
  CHECK(l3[1].registers == 29);
  CHECK(l3[1].stack_bytes == 0);
  const auto spill = runner::parse_res_usage(fixture("local_array.res"));
  REQUIRE(spill.size() == 1);
  CHECK(spill[0].name == "local_array");
  CHECK(spill[0].stack_bytes == 256);

  const auto& task = vector_add();
  runner::PropertyInputs in;
  in.workloads.push_back({"pow2_64m", 1e-4, false, std::nullopt});
  in.launches_missing = "CUPTI not found";
  in.resources = l3;
  auto r = runner::check_property(task, prop("no_local_memory"), in);
  CHECK(r.state == PropertyState::holds);
  CHECK(r.detail.find("CUPTI not found") != std::string::npos);
  in.resources = spill;
  r = runner::check_property(task, prop("no_local_memory"), in);
  CHECK(r.state == PropertyState::fails);
  CHECK(r.detail.find("256 in local_array") != std::string::npos);
  // Launch geometry cannot come from the object file.
  CHECK(runner::check_property(task, prop("grid_sized_to_machine"), in).state == PropertyState::unchecked);
}

TEST_CASE("resource properties from launch records", "[verify][properties]") {
  const auto& task = vector_add();
  runner::PropertyInputs in;
  in.sm_count = 132;
  // Grid-stride: 132 SMs × 8 blocks on the large workloads; the filter ignores odd_1m.
  in.workloads.push_back({"odd_1m", 1e-5, false, std::vector<runner::LaunchRecord>{launch(3907)}});
  in.workloads.push_back({"pow2_64m", 2e-4, false, std::vector<runner::LaunchRecord>{launch(1056)}});
  in.workloads.push_back({"odd_48m", 1.5e-4, false, std::vector<runner::LaunchRecord>{launch(1056)}});
  auto r = runner::check_property(task, prop("grid_sized_to_machine"), in);
  CHECK(r.state == PropertyState::holds);
  // One block per 256 elements of 64 Mi elements: 262144 blocks, 1985.9 per SM.
  in.workloads[1].launches = std::vector<runner::LaunchRecord>{launch(262144)};
  r = runner::check_property(task, prop("grid_sized_to_machine"), in);
  CHECK(r.state == PropertyState::fails);
  CHECK(r.detail.find("pow2_64m") != std::string::npos);
  // Every launch counts: a second, well-sized launch does not hide the first.
  in.workloads[1].launches = std::vector<runner::LaunchRecord>{launch(1056), launch(262144)};
  CHECK(runner::check_property(task, prop("grid_sized_to_machine"), in).state == PropertyState::fails);

  tasks::Property launches = prop("grid_sized_to_machine");
  launches.check["metric"] = "launches";
  launches.check["op"] = "==";
  launches.check["value"] = 1;
  CHECK(runner::check_property(task, launches, in).state == PropertyState::fails);  // 2 on pow2_64m
  in.workloads[1].launches = std::vector<runner::LaunchRecord>{launch(1056)};
  CHECK(runner::check_property(task, launches, in).state == PropertyState::holds);

  // Launch records win over res-usage for registers.
  tasks::Property regs = prop("no_local_memory");
  regs.check["metric"] = "registers_per_thread";
  regs.check["op"] = "<=";
  regs.check["value"] = 31;
  CHECK(runner::check_property(task, regs, in).state == PropertyState::fails);  // 32 in every record
  regs.check["value"] = 32;
  CHECK(runner::check_property(task, regs, in).state == PropertyState::holds);

  runner::PropertyInputs nothing;  // none of the property's workloads evaluated
  nothing.workloads.push_back({"odd_1m", 1e-5, false, std::vector<runner::LaunchRecord>{launch(4)}});
  CHECK(runner::check_property(task, prop("grid_sized_to_machine"), nothing).state == PropertyState::unknown);
}

TEST_CASE("measured properties: bandwidth fraction, flags, missing peaks", "[verify][properties]") {
  const auto& task = vector_add();
  runner::PropertyInputs in;
  in.peak_dram_bytes_per_s = 4.8e12;
  in.peak_dram_source = "test";
  // pow2_64m moves 12 × 67108864 bytes: at 200 µs that is 4.03 TB/s, 83.9 % of 4.8 TB/s.
  in.workloads.push_back({"pow2_64m", 200e-6, false, std::nullopt});
  auto r = runner::check_property(task, prop("coalesced_single_pass"), in);
  CHECK(r.state == PropertyState::holds);
  CHECK(r.detail.find("pow2_64m 0.839") != std::string::npos);
  in.workloads.push_back({"odd_48m", 5e-3, false, std::nullopt});  // the chunked baseline's pace
  CHECK(runner::check_property(task, prop("coalesced_single_pass"), in).state == PropertyState::fails);
  in.workloads[1].flagged = true;
  CHECK(runner::check_property(task, prop("coalesced_single_pass"), in).state == PropertyState::unknown);
  in.workloads[1].flagged = false;
  in.peak_dram_bytes_per_s = 0;
  CHECK(runner::check_property(task, prop("coalesced_single_pass"), in).state == PropertyState::unchecked);

  tasks::Property speedup = prop("coalesced_single_pass");
  speedup.check["metric"] = "speedup_over_baseline";
  speedup.check["value"] = 10;
  in.baseline_s = {{"pow2_64m", 5e-3}, {"odd_48m", 4e-3}};
  in.workloads[1].median_s = 150e-6;
  CHECK(runner::check_property(task, speedup, in).state == PropertyState::holds);  // 25× and 26.7×
  speedup.check["metric"] = "flops_fraction";
  CHECK(runner::check_property(task, speedup, in).state == PropertyState::unchecked);

  CHECK(runner::compare_op(1, "<=", 1));
  CHECK_FALSE(runner::compare_op(1, "<", 1));
  CHECK(runner::compare_op(2, "!=", 1));
  CHECK_FALSE(runner::compare_op(1, "~", 1));
}

TEST_CASE("ladder steps are geometric means over shared workloads", "[verify][ladder]") {
  runner::KernelVerdict a, b;
  a.label = "L1";
  b.label = "L2";
  a.status = b.status = "ok";
  a.times = {{"x", 4e-3}, {"y", 1e-3}, {"z", 1.0}};
  b.times = {{"x", 1e-3}, {"y", 1e-3}};  // z not timed for b: left out
  auto s = runner::ladder_step(a, b);
  CHECK(s.workloads == 2);
  CHECK(near(s.ratio, 2.0));
  CHECK(s.passed);
  b.times = {{"x", 4e-3 / 1.04}, {"y", 1e-3 / 1.04}};
  s = runner::ladder_step(a, b);
  CHECK(near(s.ratio, 1.04));
  CHECK_FALSE(s.passed);  // below 1.05
  b.times = {{"x", 4e-3 / 1.06}, {"y", 1e-3 / 1.06}};
  CHECK(runner::ladder_step(a, b).passed);
  b.status = "incorrect";
  s = runner::ladder_step(a, b);
  CHECK_FALSE(s.passed);
  CHECK(s.detail.find("L2 incorrect") != std::string::npos);
}

TEST_CASE("speed of light against the copy bandwidth, large workloads only", "[verify][sol]") {
  const auto& task = vector_add();
  CHECK(runner::memory_bound(task));
  runner::KernelVerdict l3;
  l3.label = "L3";
  l3.status = "ok";
  const double copy = 4.3e12;
  // pow2_64m: 805306368 B in 230 µs = 3.50 TB/s = 81.4 %; odd_48m at 60 % falls short.
  l3.times = {{"pow2_64m", 230e-6}, {"odd_48m", 603979812.0 / (0.6 * copy)}, {"odd_1m", 12e-6}, {"single", 3e-6}};
  const auto rows = runner::speed_of_light(task, l3, copy);
  REQUIRE(rows.size() == task.workloads.size());
  for (const auto& r : rows) {
    if (r.workload == "pow2_64m") {
      CHECK(r.large);
      CHECK(near(r.fraction, 805306368.0 / 230e-6 / copy));
      CHECK(r.passed);
    } else if (r.workload == "odd_48m") {
      CHECK(r.large);
      CHECK(near(r.fraction, 0.6));
      CHECK_FALSE(r.passed);
      CHECK_FALSE(r.why.empty());
    } else if (r.workload == "odd_1m" || r.workload == "single") {
      CHECK_FALSE(r.large);
      CHECK(r.passed);  // small workloads are reported, never failed
    } else {
      CHECK_FALSE(r.passed);  // pow2_64m_plus_7: large but not timed
      CHECK(r.why == "L3 not timed on it");
    }
  }
}

TEST_CASE("checks and RESULTS.md for a task", "[verify][report]") {
  const auto& task = vector_add();
  runner::TaskVerdict v;
  v.task = task.id;
  v.title = task.title;
  for (const auto& w : task.workloads) {
    v.workloads.push_back(w.name);
    v.visible[w.name] = w.visible;
    v.bytes[w.name] = task.bytes_of(w);
  }
  const char* labels[] = {"baseline", "L1", "L2", "L3"};
  const double pace[] = {0.15e12, 3.0e12, 3.4e12, 3.9e12};  // bytes/s of each kernel
  const char* sass[] = {"vector_add_L2.sass", "vector_add_L2.sass", "vector_add_L2.sass", "vector_add_L3.sass"};
  const std::uint32_t grid[] = {1024, 262144, 1056, 1056};
  for (int k = 0; k < 4; ++k) {
    runner::KernelVerdict kv;
    kv.label = labels[k];
    kv.file = k == 0 ? "baseline.cu" : std::string("experts/") + labels[k] + ".cu";
    kv.status = "ok";
    runner::PropertyInputs in = with_sass(sass[k]);
    in.resources = runner::parse_res_usage(fixture("vector_add_L3.res"));
    in.sm_count = 132;
    in.peak_dram_bytes_per_s = 4.8e12;
    for (const auto& w : task.workloads) {
      const double t = task.bytes_of(w) / pace[k];
      kv.times[w.name] = t;
      kv.correct[w.name] = true;
      in.workloads.push_back({w.name, t, false, std::vector<runner::LaunchRecord>{launch(grid[k])}});
    }
    kv.properties = runner::check_properties(task, in);
    v.kernels.push_back(kv);
  }
  for (int k = 1; k < 4; ++k) v.ladder.push_back(runner::ladder_step(v.kernels[k - 1], v.kernels[k]));
  v.is_memory_bound = runner::memory_bound(task);
  v.sol = runner::speed_of_light(task, v.kernels.back(), 4.3e12);
  runner::derive_checks(v, task, 4.3e12);

  auto check = [&](const std::string& name) -> const runner::Check& {
    for (const auto& c : v.checks)
      if (c.name == name) return c;
    FAIL("no check " << name);
    throw std::logic_error("unreachable");
  };
  CHECK(check("correct: L3").passed);
  CHECK(check("ladder: L2 → L3").passed);
  CHECK(check("speed of light: L3 ≥ 75% of copy bandwidth on large workloads").passed);  // 3.9/4.3 = 90.7 %
  CHECK(check("property on L3: vector_loads (L3) holds").passed);
  CHECK(check("property new at L3: vector_loads absent on L2").passed);
  CHECK(check("property new at L2: grid_sized_to_machine absent on L1").passed);
  CHECK(check("property new at L1: coalesced_single_pass absent on baseline").passed);
  // The L2 kernel has no local memory either: a property new at L3 that L2 already shows.
  CHECK_FALSE(check("property new at L3: no_local_memory absent on L2").passed);
  CHECK_FALSE(v.passed());

  runner::RunHeader h;
  h.date = "2026-12-01T01:02:03Z";
  h.host = "gpu-host";
  h.gpu = "NVIDIA H200 (0000:00:05.0, 132 SMs, sm_90)";
  h.driver = "580.159.04";
  h.cuda_driver = "13.0";
  h.toolchain = "Cuda compilation tools, release 13.0, V13.0.88";
  h.cuobjdump = "/usr/local/cuda/bin/cuobjdump";
  h.copy_bytes_per_s = 4.3e12;
  h.copy_bytes = 2ull << 30;
  h.copy_samples = 15;
  h.seeds = 3;
  h.command = "d2k verify-tasks --seeds 3";
  const std::string md = runner::render_markdown(h, {v});
  CHECK(md.find("| GPU | NVIDIA H200 (0000:00:05.0, 132 SMs, sm_90) |") != std::string::npos);
  CHECK(md.find("| driver | 580.159.04 (CUDA 13.0) |") != std::string::npos);
  CHECK(md.find("| date | 2026-12-01T01:02:03Z |") != std::string::npos);
  CHECK(md.find("| copy bandwidth (D2D, read + write) | 4300 GB/s (cudaMemcpyAsync of 2.0 GiB, median of 15) |") !=
        std::string::npos);
  CHECK(md.find("## vector_add — Vector addition: **FAIL**") != std::string::npos);
  CHECK(md.find("| vector_loads | L3 | sass | fails | fails | fails | holds |") != std::string::npos);
  CHECK(md.find("| no_local_memory | L3 | resource | holds | holds | holds | holds |") != std::string::npos);
  CHECK(md.find("| grid_sized_to_machine | L2 | resource | holds | fails | holds | holds |") != std::string::npos);
  CHECK(md.find("| L1 → L2 | 1.133× | 5 | PASS |") != std::string::npos);
  CHECK(md.find("| property new at L3: no_local_memory absent on L2 | FAIL |") != std::string::npos);
  // pow2_64m: 805306368 bytes at 3.9 TB/s = 206.5 µs for L3.
  CHECK(md.find("| pow2_64m | yes | 805306368 | 5368.7 | 268.4 | 236.9 | 206.5 | 90.7 |") != std::string::npos);
  CHECK(md.find("| result | FAIL (1 task(s)) |") != std::string::npos);
}

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh, empty folder under the build tree for one test.
std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "verify-unit" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

runner::TaskVerdict verdict_of(const std::string& task, bool passed) {
  runner::TaskVerdict v;
  v.task = task;
  v.title = task + " title";
  v.checks.push_back({"correct: L3", passed, passed ? "" : "wrong on pow2_64m"});
  return v;
}

runner::RunHeader header_at(const std::string& date) {
  runner::RunHeader h;
  h.date = date;
  h.host = "gpu-host";
  h.gpu = "NVIDIA H200";
  h.seeds = 3;
  h.command = "d2k verify-tasks";
  return h;
}

}  // namespace

TEST_CASE("each task's report is written beside its task, one file per task", "[verify][report][results]") {
  const auto dir = scratch("results");
  const std::vector<runner::TaskVerdict> verdicts = {verdict_of("vector_add", true), verdict_of("softmax", false)};
  const auto written = runner::write_task_results(dir, header_at("2026-12-01T01:02:03Z"), verdicts);
  REQUIRE(written.size() == 2);
  CHECK(written[0] == dir / "vector_add" / "RESULTS.md");
  CHECK(written[1] == dir / "softmax" / "RESULTS.md");
  CHECK_FALSE(std::filesystem::exists(dir / "RESULTS.md"));  // no run-wide file any more

  const std::string va = read_file(dir / "vector_add" / "RESULTS.md");
  CHECK(va.rfind("# vector_add: latest verification\n", 0) == 0);
  CHECK(va.find("## Run 2026-12-01T01:02:03Z") != std::string::npos);
  CHECK(va.find("## vector_add — vector_add title: **PASS**") != std::string::npos);
  CHECK(va.find("| result | PASS |") != std::string::npos);  // this task's result, not the run's
  CHECK(va.find("softmax") == std::string::npos);
  const std::string sm = read_file(dir / "softmax" / "RESULTS.md");
  CHECK(sm.find("## softmax — softmax title: **FAIL**") != std::string::npos);
  CHECK(sm.find("| result | FAIL (1 task(s)) |") != std::string::npos);
  CHECK(sm.find("vector_add") == std::string::npos);

  // A later run replaces the report: only the latest run is kept (history is git's).
  runner::write_task_results(dir, header_at("2026-12-02T00:00:00Z"), {verdicts[0]});
  const std::string again = read_file(dir / "vector_add" / "RESULTS.md");
  CHECK(again.find("## Run 2026-12-02T00:00:00Z") != std::string::npos);
  CHECK(again.find("2026-12-01T01:02:03Z") == std::string::npos);
  CHECK(read_file(dir / "softmax" / "RESULTS.md") == sm);  // a task not verified keeps its report

  // A task id is one folder name: nothing is written outside the results folder.
  CHECK_THROWS_AS(runner::task_results_path(dir, ".."), std::invalid_argument);
  CHECK_THROWS_AS(runner::task_results_path(dir, "a/b"), std::invalid_argument);
  CHECK_THROWS_AS(runner::task_results_path(dir, ""), std::invalid_argument);
  // A results folder that cannot hold the reports is an error naming it.
  std::ofstream(dir / "blocked") << "a file, not a folder";
  CHECK_THROWS_AS(runner::write_task_results(dir / "blocked", header_at("x"), {verdicts[0]}), std::runtime_error);
}

TEST_CASE("a report and a workbench in a task folder leave the task as it was", "[verify][report][results]") {
  const auto root = scratch("task-folder");
  const auto dir = root / "vector_add";
  std::filesystem::copy(std::filesystem::path(D2K_TASKS_DIR) / "vector_add", dir,
                        std::filesystem::copy_options::recursive);
  std::filesystem::remove(dir / "RESULTS.md");
  std::filesystem::remove_all(dir / "bench");
  const std::string bare = tasks::load_task(dir).content_hash;

  runner::write_task_results(root, header_at("2026-12-01T01:02:03Z"), {verdict_of("vector_add", true)});
  std::filesystem::create_directories(dir / "bench");
  std::ofstream(dir / "bench" / "harness.cu") << "int main() { return 0; }\n";
  std::ofstream(dir / "bench" / "run.sh") << "#!/bin/sh\n";
  const tasks::Task with = tasks::load_task(dir);  // the loader accepts both
  CHECK(with.content_hash == bare);                // and neither is part of the task's identity
  CHECK(tasks::check_task(with).empty());          // `d2k tasks --check` finds nothing either
  const tasks::TaskSet set = tasks::load_tasks(root);
  CHECK(set.errors.empty());
  CHECK(set.tasks.size() == 1);

  // The hash still sees the task's own files.
  std::ofstream(dir / "starter.cu", std::ios::app) << "// edited\n";
  CHECK(tasks::load_task(dir).content_hash != bare);
}

TEST_CASE("launch records travel on the runner's wire and are validated", "[verify][wire]") {
  runner::RunnerResult r;
  runner::WorkloadResult w;
  w.name = "pow2_64m";
  runner::LaunchRecord l = launch(1056, 256);
  l.grid_y = 2;
  l.local_bytes_per_thread = 16;
  w.launches = std::vector<runner::LaunchRecord>{l};
  r.workloads.push_back(w);
  r.launches_error = "";
  const auto back = runner::result_from_json(runner::to_json(r));
  REQUIRE(back.workloads.size() == 1);
  REQUIRE(back.workloads[0].launches);
  REQUIRE(back.workloads[0].launches->size() == 1);
  const auto& b = back.workloads[0].launches->front();
  CHECK(b.grid_blocks() == 2112);
  CHECK(b.block_threads() == 256);
  CHECK(b.local_bytes_per_thread == 16);

  auto j = runner::to_json(r);
  j["workloads"][0]["launches"][0]["grid"] = {1, 2};
  CHECK_THROWS_AS(runner::result_from_json(j), runner::WireError);
  j = runner::to_json(r);
  j["workloads"][0]["launches"][0]["registers_per_thread"] = -1;
  CHECK_THROWS_AS(runner::result_from_json(j), runner::WireError);
  j = runner::to_json(r);
  j["workloads"][0]["launches"] = nlohmann::json::array();
  for (std::size_t i = 0; i <= runner::kMaxLaunchRecords; ++i) j["workloads"][0]["launches"].push_back(runner::to_json(l));
  CHECK_THROWS_AS(runner::result_from_json(j), runner::WireError);

  runner::Job job = runner::make_job(vector_add(), vector_add().visible_workloads(), {1}, "/x.so", runner::TimingSpec{});
  CHECK_FALSE(runner::job_from_json(runner::to_json(job)).record_launches);
  job.record_launches = true;
  CHECK(runner::job_from_json(runner::to_json(job)).record_launches);

  runner::DeviceInfo d;
  d.name = "H200";
  d.memory_clock_khz = 3201000;
  d.memory_bus_bits = 5120;
  const auto dd = runner::device_from_json(runner::to_json(d));
  CHECK(near(dd.peak_dram_bytes_per_s(), 2.0 * 3201000e3 * 640));
}

TEST_CASE("vendor yardstick: throughput ratio on large shapes, a failing vendor fails the task", "[verify][vendor]") {
  const tasks::Task gemm = tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / "gemm_bf16");
  REQUIRE(gemm.vendor.has_value());
  CHECK(gemm.vendor->file == "vendor.cu");
  CHECK(gemm.vendor->libs == std::vector<std::string>{"cublasLt"});
  CHECK(near(gemm.vendor->min_fraction, 0.7));

  runner::KernelVerdict l3;
  l3.label = "L3";
  l3.status = "ok";
  runner::VendorVerdict vd;
  vd.what = "cuBLASLt";
  vd.file = "vendor.cu";
  vd.min_fraction = 0.7;
  for (const auto& w : gemm.workloads) {
    if (!w.timed) continue;
    const double flops = gemm.flops_of(w);
    vd.times[w.name] = flops / 700e12;                       // the vendor at 700 TFLOP/s
    l3.times[w.name] = flops / (flops >= runner::kLargeFlops ? 560e12 : 100e12);  // 80 % on large shapes
  }
  vd.rows = runner::vendor_rows(gemm, l3, vd);
  REQUIRE(!vd.rows.empty());
  int large = 0;
  for (const auto& r : vd.rows) {
    large += r.large ? 1 : 0;
    if (r.large) CHECK(near(r.fraction, 0.8));
    CHECK(r.passed);
  }
  CHECK(large >= 2);

  runner::TaskVerdict v;
  v.task = gemm.id;
  v.vendor = vd;
  runner::derive_checks(v, gemm, 4.2e12);
  auto vendor_check = [&]() -> const runner::Check* {
    for (const auto& c : v.checks)
      if (c.name.rfind("vendor:", 0) == 0) return &c;
    return nullptr;
  };
  REQUIRE(vendor_check() != nullptr);
  CHECK(vendor_check()->passed);
  CHECK(vendor_check()->name.find("70% of cuBLASLt") != std::string::npos);
  const std::string md = runner::render_task_markdown(v);
  CHECK(md.find("### Vendor yardstick: cuBLASLt") != std::string::npos);
  CHECK(md.find("| 80% | yes | PASS |") != std::string::npos);

  // 60 % of the vendor on large shapes fails; so does a vendor that did not run.
  for (auto& [w, t] : l3.times)
    if (gemm.flops_of(*gemm.find_workload(w)) >= runner::kLargeFlops) t = gemm.flops_of(*gemm.find_workload(w)) / 420e12;
  v.vendor->rows = runner::vendor_rows(gemm, l3, *v.vendor);
  runner::derive_checks(v, gemm, 4.2e12);
  CHECK_FALSE(vendor_check()->passed);
  v.vendor->status = "build_error";
  v.vendor->message = "cublasLt.h: not found";
  runner::derive_checks(v, gemm, 4.2e12);
  CHECK_FALSE(vendor_check()->passed);
  CHECK(vendor_check()->detail.find("build_error") != std::string::npos);
}

TEST_CASE("vendor.py output: the last JSON line counts, lines printed by libraries are skipped", "[verify][vendor]") {
  runner::VendorVerdict v;
  v.what = "PyTorch SDPA";
  runner::parse_vendor_output(
      "/opt/torch/lib/profiler: STAGE:2026-12-01 warming up\n"
      "{\"vendor\": \"torch sdpa 2.11\", \"workloads\": [{\"name\": \"a\", \"median_s\": 0.5e-3},"
      " {\"name\": \"b\", \"median_s\": 0}, {\"name\": \"c\", \"median_s\": 2e-3}]}\n",
      v);
  CHECK(v.what == "PyTorch SDPA — torch sdpa 2.11");
  REQUIRE(v.times.size() == 2);  // a zero median is no measurement
  CHECK(near(v.times.at("a"), 0.5e-3));
  CHECK(near(v.times.at("c"), 2e-3));

  auto error_of = [](const std::string& text) {
    runner::VendorVerdict w;
    try {
      runner::parse_vendor_output(text, w);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error_of("").find("no JSON object line on stdout (empty)") != std::string::npos);
  CHECK(error_of("Traceback (most recent call last):\n  oops\n").find("it began: Traceback") != std::string::npos);
  CHECK(error_of("{not json\n").find("malformed JSON line") != std::string::npos);
  CHECK(error_of("{\"vendor\": \"x\"}\n").find("no \"workloads\" array") != std::string::npos);
  CHECK(error_of("{\"workloads\": [{\"name\": \"a\"}]}\n").find("numeric \"median_s\"") != std::string::npos);
}

TEST_CASE("speed-of-light rows of a compute-bound task are information, not checks", "[verify][sol]") {
  const tasks::Task gemm = tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / "gemm_bf16");
  REQUIRE_FALSE(runner::memory_bound(gemm));
  runner::KernelVerdict l3;
  l3.label = "L3";
  l3.status = "ok";
  for (const auto& w : gemm.workloads)
    if (w.timed) l3.times[w.name] = gemm.flops_of(w) / 700e12;
  runner::TaskVerdict v;
  v.task = gemm.id;
  v.is_memory_bound = false;
  v.sol = runner::speed_of_light(gemm, l3, 4.2e12, 1.0 * (1 << 20), 0.75);  // every timed shape "large"
  bool any_large_short = false;
  for (const auto& r : v.sol) any_large_short = any_large_short || (r.large && !r.passed);
  REQUIRE(any_large_short);  // far below copy speed, as a compute-bound kernel is
  const std::string md = runner::render_task_markdown(v);
  CHECK(md.find("task not memory-bound, for information") != std::string::npos);
  CHECK(md.find("| yes | FAIL |") == std::string::npos);
  CHECK(md.find("kernel moves data below copy speed") == std::string::npos);
}

TEST_CASE("a task's stated bound is the speed of light's byte count", "[verify][sol]") {
  tasks::Task task = vector_add();  // bytes 12n; a stated bound of twice that halves the time allowed
  task.bound_bytes = "24*n";
  task.bound_why = "two passes over every input (test)";
  runner::KernelVerdict l3;
  l3.label = "L3";
  l3.status = "ok";
  const double copy = 4.3e12;
  // pow2_64m at 60 % of copy speed on `bytes` is 120 % on the stated bound: it passes only with it.
  l3.times = {{"pow2_64m", 805306368.0 / (0.6 * copy)}};
  const auto with_bound = runner::speed_of_light(task, l3, copy);
  const auto plain = runner::speed_of_light(vector_add(), l3, copy);
  for (const auto& r : with_bound)
    if (r.workload == "pow2_64m") {
      CHECK(near(r.bytes, 2 * 805306368.0));
      CHECK(near(r.fraction, 1.2));
      CHECK(r.passed);
    }
  for (const auto& r : plain)
    if (r.workload == "pow2_64m") CHECK_FALSE(r.passed);
}

TEST_CASE("task.json memory_bound overrides the flops-per-byte rule", "[verify][sol]") {
  tasks::Task task = vector_add();
  CHECK(runner::memory_bound(task));  // vector_add: 1 flop per 12 bytes
  task.memory_bound = false;
  task.memory_bound_why = "stated";
  CHECK_FALSE(runner::memory_bound(task));
  task.flops = "1000*n";  // far above 4 flops per byte
  task.memory_bound.reset();
  CHECK_FALSE(runner::memory_bound(task));
  task.memory_bound = true;
  CHECK(runner::memory_bound(task));
}

TEST_CASE("a task's own speed-of-light target (task.json speed_of_light_target) decides the check", "[verify][sol]") {
  tasks::Task task = vector_add();
  runner::TaskVerdict v;
  runner::KernelVerdict l3;
  l3.label = "L3";
  l3.status = "ok";
  const double copy = 4.3e12;
  for (const auto& w : task.workloads) l3.times[w.name] = task.sol_bytes_of(w) / (0.78 * copy);  // 78 % of copy speed
  for (const auto& [target, pass] : std::vector<std::pair<double, bool>>{{0.75, true}, {0.8, false}}) {
    task.speed_of_light_target = target;
    v.is_memory_bound = true;
    v.kernels = {l3};
    v.sol = runner::speed_of_light(task, l3, copy);
    runner::derive_checks(v, task, copy);
    bool found = false;
    for (const auto& c : v.checks)
      if (c.name.rfind("speed of light", 0) == 0) {
        found = true;
        CHECK(c.passed == pass);
        CHECK(c.name.find(target == 0.8 ? "80%" : "75%") != std::string::npos);
      }
    CHECK(found);
  }
}
