// CPU tests of the library yardsticks in `d2k verify-tasks` (issue 16): a vendor.py's output
// (correctness per workload, a run cut short), L3 against the library on large workloads by bytes
// for memory-bound tasks, the per-task summary, the suite table merged into tasks/RESULTS.md, and
// partial verdicts (--kernels, --time-budget).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.hpp"
#include "env/cli/verify_report.hpp"
#include "tasks/loader/task.hpp"

using namespace d2k;

namespace {

bool near(double a, double b) { return std::fabs(a - b) <= 1e-5 * std::max(1.0, std::fabs(b)); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "verify-yardstick" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

const tasks::Task& task(const std::string& id) {
  static std::map<std::string, tasks::Task> loaded;
  auto it = loaded.find(id);
  if (it == loaded.end()) it = loaded.emplace(id, tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / id)).first;
  return it->second;
}

runner::RunHeader header_at(const std::string& date) {
  runner::RunHeader h;
  h.date = date;
  h.gpu = "NVIDIA H200";
  h.seeds = 3;
  h.command = "d2k verify-tasks";
  return h;
}

// A vector_add verdict whose L3 moves `l3_pace` bytes/s and whose library moves `lib_pace`, with
// the ladder, speed of light and yardstick filled the way verify_task fills them.
runner::TaskVerdict vector_add_verdict(double l3_pace, double lib_pace, const std::string& what = "PyTorch a + b") {
  const tasks::Task& t = task("vector_add");
  runner::TaskVerdict v;
  v.task = t.id;
  v.title = t.title;
  v.category = t.category;
  for (const auto& w : t.workloads) {
    v.workloads.push_back(w.name);
    v.visible[w.name] = w.visible;
    v.bytes[w.name] = t.bytes_of(w);
  }
  const char* labels[] = {"baseline", "L1", "L2", "L3"};
  const double pace[] = {0.2e12, 2.0e12, 3.0e12, l3_pace};
  for (int k = 0; k < 4; ++k) {
    runner::KernelVerdict kv;
    kv.label = labels[k];
    kv.status = "ok";
    for (const auto& w : t.workloads) {
      kv.correct[w.name] = true;
      if (w.timed) kv.times[w.name] = t.bytes_of(w) / pace[k];
    }
    for (const auto& p : t.properties) {  // each design property holds from its layer on
      runner::PropertyResult r;
      r.id = p.id;
      r.layer = p.layer;
      r.state = p.layer <= k ? runner::PropertyState::holds : runner::PropertyState::fails;
      kv.properties.push_back(r);
    }
    v.kernels.push_back(kv);
  }
  for (int k = 1; k < 4; ++k) v.ladder.push_back(runner::ladder_step(v.kernels[k - 1], v.kernels[k]));
  v.is_memory_bound = runner::memory_bound(t);
  v.sol = runner::speed_of_light(t, v.kernels[3], 4.0e12);
  runner::VendorVerdict vd;
  vd.file = "vendor.py";
  vd.gating = false;
  vd.min_fraction = runner::kLibraryTarget;
  vd.what = what;
  for (const auto& w : t.workloads)
    if (w.timed) vd.times[w.name] = t.bytes_of(w) / lib_pace;
  vd.rows = runner::vendor_rows(t, v.kernels[3], vd);
  v.vendor = vd;
  runner::derive_checks(v, t, 4.0e12);
  return v;
}

}  // namespace

TEST_CASE("every task with a PyTorch op has a vendor.py on the shared harness; the tasks still load",
          "[verify][yardstick]") {
  // gemm_bf16 (vendor.cu) and flash_attention_fwd (vendor.py) name theirs in task.json.
  const std::vector<std::string> library = {"vector_add",    "softmax",   "rmsnorm", "transpose", "prefix_sum",
                                            "histogram",     "spmv_csr",  "swiglu",  "fp8_quant", "layernorm",
                                            "cross_entropy", "rope",      "embedding_bag"};
  for (const auto& id : library) {
    INFO(id);
    const auto file = std::filesystem::path(D2K_TASKS_DIR) / id / "vendor.py";
    REQUIRE(std::filesystem::is_regular_file(file));
    const std::string text = read_file(file);
    CHECK(has(text, "vendor_torch.main(__file__, \"PyTorch"));
    CHECK(has(text, "def prepare(torch, F, T, S):"));
    CHECK_FALSE(task(id).vendor.has_value());  // a library yardstick, not a task.json vendor
  }
  CHECK(std::filesystem::is_regular_file(std::filesystem::path(D2K_TASKS_DIR) / "vendor_torch.py"));
  const tasks::TaskSet set = tasks::load_tasks(D2K_TASKS_DIR);
  CHECK(set.errors.empty());
}

TEST_CASE("vendor.py output: wrong workloads leave their time out, a cut-short run keeps what it finished",
          "[verify][yardstick]") {
  runner::VendorVerdict v;  // what empty: the vendor's own name becomes it
  runner::parse_vendor_output(
      "{\"vendor\": \"PyTorch a + b (torch 2.9)\", \"workloads\": [{\"name\": \"a\", \"median_s\": 1e-4, "
      "\"correct\": true}]}\n"
      "{\"vendor\": \"PyTorch a + b (torch 2.9)\", \"workloads\": [{\"name\": \"a\", \"median_s\": 1e-4, "
      "\"correct\": true}, {\"name\": \"b\", \"median_s\": 2e-4, \"correct\": false, \"detail\": \"y: 3 of 9 "
      "differ\"}]}\n",
      v);
  CHECK(v.what == "PyTorch a + b (torch 2.9)");
  CHECK(v.checked);
  CHECK_FALSE(v.partial);
  REQUIRE(v.times.size() == 1);
  CHECK(near(v.times.at("a"), 1e-4));
  REQUIRE(v.wrong.count("b") == 1);
  CHECK(v.wrong.at("b") == "y: 3 of 9 differ");
  CHECK(v.status == "incorrect");
  CHECK(has(v.message, "wrong on b (y: 3 of 9 differ)"));

  // Killed while writing its third line: the second, complete one counts.
  runner::VendorVerdict cut;
  cut.what = "PyTorch";
  runner::parse_vendor_output(
      "{\"vendor\": \"x\", \"workloads\": [{\"name\": \"a\", \"median_s\": 1e-4, \"correct\": true}]}\n"
      "{\"vendor\": \"x\", \"workloads\": [{\"name\": \"a\", \"median_s\": 1e-4, \"correct\": true}, "
      "{\"name\": \"b\", \"median_s\": 3e-4, \"correct\": true}]}\n"
      "{\"vendor\": \"x\", \"workloads\": [{\"name\": \"a\", \"med",
      cut);
  CHECK(cut.partial);
  CHECK(cut.ok());
  CHECK(cut.times.size() == 2);
  CHECK(cut.what == "PyTorch — x");

  // flash_attention_fwd's vendor.py reports no correctness: timed, marked unchecked.
  runner::VendorVerdict old;
  runner::parse_vendor_output("{\"vendor\": \"sdpa\", \"workloads\": [{\"name\": \"a\", \"median_s\": 1e-3}]}\n", old);
  CHECK_FALSE(old.checked);
  CHECK(old.ok());
  CHECK(old.times.size() == 1);

  auto error_of = [](const std::string& text) {
    runner::VendorVerdict w;
    try {
      runner::parse_vendor_output(text, w);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(has(error_of("{\"workloads\": [{\"name\": \"a\", \"median_s\": 1e-3, \"correct\": \"yes\"}]}\n"),
            "\"correct\" is not a boolean"));
  CHECK(has(error_of("{\"workloads\": [\n"), "malformed JSON line"));
}

TEST_CASE("a library yardstick of a memory-bound task: large by bytes, 1.0x target, information only",
          "[verify][yardstick]") {
  const tasks::Task& t = task("vector_add");
  REQUIRE(runner::memory_bound(t));
  // L3 at 3.8 TB/s against a library at 4.0 TB/s: 0.95x on every workload.
  runner::TaskVerdict v = vector_add_verdict(3.8e12, 4.0e12);
  const runner::VendorVerdict& vd = *v.vendor;
  int large = 0;
  for (const auto& r : vd.rows) {
    INFO(r.workload);
    CHECK(near(r.fraction, 0.95));
    CHECK(r.large == (t.bytes_of(*t.find_workload(r.workload)) >= runner::kLargeBytes));
    CHECK(r.passed == !r.large);  // short of 1.0x only counts on large workloads
    large += r.large ? 1 : 0;
  }
  CHECK(large == 3);  // the timed workloads: pow2_64m, pow2_64m_plus_7, odd_48m (600-800 MB each)
  for (const auto& c : v.checks) CHECK(c.name.rfind("vendor:", 0) != 0);  // no check: information
  CHECK(v.passed());

  const std::string md = runner::render_task_markdown(v);
  CHECK(has(md, "### Library yardstick: PyTorch a + b (`vendor.py`"));
  CHECK(has(md, "Information, not a check: the target is L3 ≥ 1.0× the library"));
  CHECK(has(md, "| workload | MB | L3 µs | L3 GB/s | vendor µs | vendor GB/s | L3 / vendor | large | result |"));
  // pow2_64m: 805.3 MB; L3 211.9 µs = 3800 GB/s; library 201.3 µs = 4000 GB/s.
  CHECK(has(md, "| pow2_64m | 805.3 | 211.9 | 3800 | 201.3 | 4000 | 0.95× | yes | short |"));

  const runner::TaskSummary s = runner::summarize(v);
  CHECK(s.category == "elementwise, memory-bound");
  CHECK(s.workloads == "5 (3 hidden)");
  CHECK(s.ladder == "10.00× · 1.50× · 1.27×");
  CHECK(s.sol == "95% of copy bw (3 large)");
  CHECK(s.library == "0.95× (3 large) of PyTorch a + b; short of 1.00×");
  CHECK(s.result == "PASS");
  CHECK(runner::summary_line(v) ==
        "vector_add: PASS; L3 vs speed of light: 95% of copy bw (3 large); L3 vs library: 0.95× (3 large) of "
        "PyTorch a + b; short of 1.00×");

  // Faster than the library: at target, nothing to explain.
  const runner::TaskVerdict fast = vector_add_verdict(4.0e12, 3.6e12);
  CHECK(runner::summarize(fast).library == "1.11× (3 large) of PyTorch a + b");
  CHECK(has(runner::render_task_markdown(fast), "| 1.11× | yes | at target |"));

  // A library that failed: its status in the summary, the task's checks untouched.
  runner::TaskVerdict broken = vector_add_verdict(3.8e12, 4.0e12);
  broken.vendor->status = "error";
  broken.vendor->message = "exit 1: vendor.py: cannot import torch";
  broken.vendor->times.clear();
  broken.vendor->rows.clear();
  runner::derive_checks(broken, t, 4.0e12);
  CHECK(broken.passed());
  CHECK(runner::summarize(broken).library ==
        "not measured of PyTorch a + b; error: exit 1: vendor.py: cannot import torch");
}

TEST_CASE("a gating vendor of a compute-bound task keeps its check and the FLOP columns", "[verify][yardstick]") {
  const tasks::Task& gemm = task("gemm_bf16");
  REQUIRE_FALSE(runner::memory_bound(gemm));
  runner::KernelVerdict l3;
  l3.label = "L3";
  l3.status = "ok";
  runner::VendorVerdict vd;
  vd.what = "cuBLASLt";
  vd.file = "vendor.cu";
  for (const auto& w : gemm.workloads) {
    if (!w.timed) continue;
    vd.times[w.name] = gemm.flops_of(w) / 700e12;
    l3.times[w.name] = gemm.flops_of(w) / 630e12;  // 90 %
  }
  vd.rows = runner::vendor_rows(gemm, l3, vd);
  for (const auto& r : vd.rows) CHECK(r.large == (r.flops >= runner::kLargeFlops));
  runner::TaskVerdict v;
  v.task = gemm.id;
  v.kernels.push_back(l3);
  v.vendor = vd;
  runner::derive_checks(v, gemm, 4.2e12);
  bool vendor_check = false;
  for (const auto& c : v.checks) vendor_check = vendor_check || (c.name.rfind("vendor:", 0) == 0 && c.passed);
  CHECK(vendor_check);
  const std::string md = runner::render_task_markdown(v);
  CHECK(has(md, "### Vendor yardstick: cuBLASLt"));
  CHECK(has(md, "| workload | GFLOP | L3 µs | L3 TFLOP/s |"));
  CHECK(has(runner::summarize(v).library, "0.90× ("));
  CHECK(runner::summarize(v).category == "compute-bound");
  CHECK(has(runner::summarize(v).sol, "compute-bound"));
}

TEST_CASE("partial verdicts: only the kernels that ran are judged, never a PASS", "[verify][yardstick]") {
  const tasks::Task& t = task("vector_add");
  runner::TaskVerdict v = vector_add_verdict(3.9e12, 3.8e12);
  v.kernels.erase(v.kernels.begin(), v.kernels.begin() + 3);  // L3 alone (--kernels L3)
  v.ladder.clear();
  v.partial = "only L3 (--kernels)";
  // A property that needs the skipped baseline (speedup over it) is unknown: not judged.
  runner::PropertyResult speedup;
  speedup.id = "speedup_needs_baseline";
  speedup.state = runner::PropertyState::unknown;
  v.kernels[0].properties.push_back(speedup);
  tasks::Task with_speedup = t;
  tasks::Property sp;
  sp.id = speedup.id;
  sp.layer = 2;
  sp.check = {{"kind", "measured"}, {"metric", "speedup_over_baseline"}, {"op", ">="}, {"value", 2}};
  with_speedup.properties.push_back(sp);
  runner::derive_checks(v, with_speedup, 4.0e12);
  for (const auto& c : v.checks) CHECK_FALSE(has(c.name, "speedup_needs_baseline"));
  // The same unknown in a full run is a failed check.
  runner::TaskVerdict full = vector_add_verdict(3.9e12, 3.8e12);
  full.kernels[3].properties.push_back(speedup);
  runner::derive_checks(full, with_speedup, 4.0e12);
  bool failed_unknown = false;
  for (const auto& c : full.checks) failed_unknown = failed_unknown || (has(c.name, "speedup_needs_baseline") && !c.passed);
  CHECK(failed_unknown);
  runner::derive_checks(v, t, 4.0e12);
  std::set<std::string> names;
  for (const auto& c : v.checks) {
    names.insert(c.name);
    CHECK(c.passed);
    CHECK_FALSE(has(c.name, "baseline"));
    CHECK_FALSE(has(c.name, " on L1"));
    CHECK_FALSE(has(c.name, " on L2"));
  }
  CHECK(names.count("correct: L3") == 1);
  CHECK_FALSE(v.passed());
  CHECK(runner::result_word(v) == "PARTIAL");
  CHECK(runner::summarize(v).ladder == "not run");
  const std::string md = runner::render_task_markdown(v);
  CHECK(has(md, ": **PARTIAL**"));
  CHECK(has(md, "Partial run: only L3 (--kernels)."));
  CHECK(has(runner::render_markdown(header_at("2026-12-02T01:00:00Z"), {v}),
            "| result | PARTIAL (1 task(s) not fully run; no check failed) |"));

  // A check that fails in a partial run still makes it a FAIL.
  v.kernels[0].correct["pow2_64m"] = false;
  runner::derive_checks(v, t, 4.0e12);
  CHECK(runner::result_word(v) == "FAIL");
}

TEST_CASE("the suite table: one row per task, merged into RESULTS.md run after run", "[verify][yardstick][results]") {
  const runner::RunHeader h1 = header_at("2026-12-02T01:00:00Z");
  const runner::TaskVerdict va = vector_add_verdict(3.8e12, 4.0e12);
  const std::string row = runner::suite_row(h1, va);
  CHECK(row ==
        "| vector_add | elementwise, memory-bound | 5 (3 hidden) | 10.00× · 1.50× · 1.27× | 95% of copy bw (3 large) | 0.95× (3 "
        "large) of PyTorch a + b; short of 1.00× | PASS | 2026-12-02T01:00:00Z |");

  // A page without the markers keeps its text and gains the section.
  const std::string page = "# Task suite\n\nHand-written notes.\n";
  const std::string merged = runner::merge_suite_table(page, {{"vector_add", row}});
  CHECK(merged.rfind(page, 0) == 0);
  CHECK(has(merged, std::string(runner::kSuiteBegin) + "\n| task | category | workloads |"));
  CHECK(has(merged, row + "\n" + runner::kSuiteEnd + "\n"));

  // A second run replaces its tasks' rows, keeps the others in place and appends new ones; text
  // after the table stays.
  const std::string with_tail = merged + "\n## Notes after the table\n";
  const std::string other = "| softmax | memory-bound | 6 (3 hidden) | — | — | — | FAIL | 2026-12-01T00:00:00Z |";
  const std::string two = runner::merge_suite_table(with_tail, {{"softmax", other}});
  const std::string newer = "| vector_add | memory-bound | x | x | x | x | PASS | 2026-12-03T00:00:00Z |";
  const std::string three = runner::merge_suite_table(two, {{"vector_add", newer}, {"rope", "| rope | r |"}});
  CHECK_FALSE(has(three, row));
  CHECK(has(three, newer + "\n" + other + "\n| rope | r |\n" + runner::kSuiteEnd + "\n"));
  CHECK(has(three, "\n## Notes after the table\n"));
  CHECK(three.find(runner::kSuiteBegin) == three.rfind(runner::kSuiteBegin));  // one table
  CHECK(three.rfind(page, 0) == 0);

  // An empty page gets a title; a begin marker without an end is an error, not a second table.
  CHECK(runner::merge_suite_table("", {{"vector_add", row}}).rfind("# Task suite\n", 0) == 0);
  CHECK_THROWS_AS(runner::merge_suite_table(std::string("x\n") + runner::kSuiteBegin + "\n| a | b |\n", {}),
                  std::runtime_error);

  // On disk: <results_dir>/RESULTS.md, merged with what is there.
  const auto dir = scratch("suite");
  std::ofstream(dir / "RESULTS.md") << page;
  CHECK(runner::write_suite_table(dir, h1, {va}) == dir / "RESULTS.md");
  runner::TaskVerdict sm = vector_add_verdict(3.8e12, 4.0e12);
  sm.task = "softmax";
  runner::write_suite_table(dir, header_at("2026-12-02T02:00:00Z"), {sm});
  const std::string disk = read_file(dir / "RESULTS.md");
  CHECK(disk.rfind(page, 0) == 0);
  CHECK(has(disk, row + "\n| softmax | elementwise, memory-bound |"));
  CHECK(has(disk, "| 2026-12-02T02:00:00Z |\n" + std::string(runner::kSuiteEnd)));
  CHECK_FALSE(std::filesystem::exists(dir / "RESULTS.md.tmp"));
  std::ofstream(dir / "blocked") << "a file, not a folder";
  CHECK_THROWS_AS(runner::write_suite_table(dir / "blocked", h1, {va}), std::runtime_error);
}
