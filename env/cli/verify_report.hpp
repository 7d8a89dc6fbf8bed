// What `d2k verify-tasks` proves about a task, as data: per-kernel results (baseline, L1..L3),
// the speed ladder, L3 against the speed of light (measured copy bandwidth), the design
// properties, and the Markdown reports (each task's tasks/<task>/RESULTS.md). Pure arithmetic,
// text and file writing: testable on a CPU; the command (env/cli/verify_tasks.cpp) fills it from
// real evaluations.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sandbox/eval/properties.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::runner {

inline constexpr double kLadderMinRatio = 1.05;     // each layer at least 5 % faster (geomean)
inline constexpr double kLargeBytes = 256.0 * (1 << 20);  // "large": ≥ 256 MiB of traffic per call
inline constexpr double kMemoryBoundIntensity = 4.0;      // flops per byte at or below: memory-bound

struct KernelVerdict {
  std::string label;                         // baseline, L1, L2, L3
  std::string file;                          // task-relative path
  std::string status;                        // ok | compile_error | incorrect | runtime_error | ...
  std::string message;
  std::map<std::string, double> times;       // workload → median seconds (timed workloads)
  std::map<std::string, bool> correct;       // workload → correct on every seed
  std::map<std::string, bool> throttled;     // workload → SM clock throttled while timed
  std::vector<PropertyResult> properties;    // in task.properties order (empty: not evaluated)
  double compile_s = 0, evaluate_s = 0;
  bool ok() const { return status == "ok"; }
};

struct LadderStep {
  std::string slower, faster;
  double ratio = 0;                          // geomean over shared workloads of t_slower / t_faster
  int workloads = 0;
  double min_ratio = kLadderMinRatio;
  bool passed = false;
  std::string detail;
};
// Geometric mean of slower/faster over the workloads both timed; passed when ≥ min_ratio.
LadderStep ladder_step(const KernelVerdict& slower, const KernelVerdict& faster, double min_ratio = kLadderMinRatio);

struct SolRow {
  std::string workload;
  double bytes = 0;                          // task bytes(w): minimum DRAM traffic
  double time_s = 0;
  double achieved_bytes_per_s = 0;
  double fraction = 0;                       // of the measured copy bandwidth
  bool large = false;
  bool passed = true;                        // only large workloads can fail
  std::string why;                           // for a shortfall: the likely cause
};
// flops(w)/bytes(w) ≤ kMemoryBoundIntensity on every workload, unless task.json states
// "memory_bound" (then that).
bool memory_bound(const tasks::Task& task);
// target < 0: the task's own (task.json speed_of_light_target; 0.75 unless it states one).
std::vector<SolRow> speed_of_light(const tasks::Task& task, const KernelVerdict& kernel, double copy_bytes_per_s,
                                   double large_bytes = kLargeBytes, double target = -1);

// The vendor yardstick: L3 against a vendor implementation timed in the same run, by throughput
// ratio = t_vendor / t_L3 per workload. Two kinds:
// - gating (task.json "vendor", e.g. cuBLASLt for gemm_bf16): on "large" workloads L3 must reach
//   the task's min_fraction, a check of the task;
// - library yardstick (a vendor.py in the task folder that task.json does not name, e.g. PyTorch's
//   eager op for a memory-bound task; issue 16): measured and checked for correctness the same
//   way, reported against kLibraryTarget (L3 at least as fast as the library on the large
//   workloads) but not a check: where L3 is short, the task's README says by how much and why.
// "Large": flops ≥ kLargeFlops, or for a memory-bound task bytes ≥ kLargeBytes.
inline constexpr double kLargeFlops = 5e10;
inline constexpr double kLibraryTarget = 1.0;
struct VendorRow {
  std::string workload;
  double flops = 0;
  double bytes = 0;                          // task bytes(w)
  double l3_s = 0, vendor_s = 0;
  double fraction = 0;                       // L3 throughput / vendor throughput
  bool large = false;
  bool passed = true;                        // only large workloads can fail
};
struct VendorVerdict {
  std::string what;                          // e.g. "cuBLASLt"
  std::string file;                          // task-relative
  std::string status = "ok";                 // ok | build_error | error | incorrect | ...
  std::string message;
  std::map<std::string, double> times;       // workload → median seconds (correct workloads only)
  std::map<std::string, std::string> wrong;  // workload → why the vendor's output was not accepted
  bool checked = true;                       // a vendor.py that reports no "correct" was not checked
  bool partial = false;                      // a vendor.py cut short: the last complete line counted
  double min_fraction = 0.7;
  bool gating = true;                        // false: a library yardstick (information, target 1.0×)
  std::vector<VendorRow> rows;
  bool ok() const { return status == "ok"; }
};
// Reads a vendor.py's stdout into v.times (and appends its "vendor" string to v.what, or makes it
// v.what when that is empty): the last line that holds a JSON object {"vendor": "...",
// "workloads": [{"name", "median_s", "correct"?, "detail"?}...]}, since libraries under the script
// may print lines of their own first. A workload with "correct": false goes to v.wrong (its time
// is left out, as a vendor.cu's wrong workloads are) and makes v.status "incorrect"; without
// "correct" fields v.checked is false. When the last such line is malformed (a run killed while
// writing it) an earlier complete one counts and v.partial is set. Throws std::runtime_error with
// the reason (and the start of the output) when no line is a complete object.
void parse_vendor_output(const std::string& stdout_text, VendorVerdict& v);
// Rows for every workload both L3 and the vendor timed.
std::vector<VendorRow> vendor_rows(const tasks::Task& task, const KernelVerdict& l3, const VendorVerdict& vendor);

struct Check {
  std::string name;
  bool passed = false;
  std::string detail;
};

struct TaskVerdict {
  std::string task, title;
  std::string category;                      // task.json "category" (elementwise, reduction, ...)
  std::vector<KernelVerdict> kernels;        // baseline, L1, L2, L3 (in that order)
  std::vector<LadderStep> ladder;
  bool is_memory_bound = false;
  std::vector<SolRow> sol;
  std::optional<VendorVerdict> vendor;       // when the task names one
  std::vector<Check> checks;
  std::vector<std::string> workloads;        // every workload of the task, in task order
  std::map<std::string, bool> visible;
  std::map<std::string, double> bytes;
  std::string partial;                       // why not every kernel ran (--kernels, --time-budget)
  bool passed() const;                       // false for a partial verdict
};
// PASS, FAIL or PARTIAL (a partial verdict whose checks that ran all passed).
std::string result_word(const TaskVerdict& v);

// Correctness, ladder, speed of light and property checks from kernels/ladder/sol (fills
// verdict.checks). Properties: each expert Lk must show every property of layers ≤ k (holds),
// and every property new at layer k must be absent (fails) on the L(k−1) expert (the baseline
// for k = 1); unknown or unchecked is never a pass.
void derive_checks(TaskVerdict& verdict, const tasks::Task& task, double copy_bytes_per_s);

struct RunHeader {
  std::string date;                          // ISO 8601, UTC
  std::string host;
  std::string gpu, driver, cuda_driver, toolchain;
  std::string cuobjdump;                     // path or "missing"
  double copy_bytes_per_s = 0;               // 0: not measured (copy_error says why)
  std::string copy_error;
  std::uint64_t copy_bytes = 0;
  int copy_samples = 0;
  double peak_dram_bytes_per_s = 0;
  int seeds = 0;
  std::string command;
};

// The suite view of one verified task (issue 16): category (task.json's, and memory- or
// compute-bound), workloads, the ladder, L3 against the
// speed of light and against the library on the large workloads (the largest one when none is
// large), and the result.
struct TaskSummary {
  std::string task, category, workloads, ladder, sol, library, result;
};
TaskSummary summarize(const TaskVerdict& verdict);
// One line: "<task>: <result>; L3 vs speed of light: ...; L3 vs library: ...".
std::string summary_line(const TaskVerdict& verdict);

// The suite table (tasks/RESULTS.md): one row per task, its latest run. The rows live between two
// marker lines; merge_suite_table replaces the rows of the given tasks, keeps the others (tasks a
// partial run did not reach) and appends new ones; a text without the markers gets the section
// appended (an empty text: a new file with a title). write_suite_table does that to
// <results_dir>/RESULTS.md and returns its path (std::runtime_error when it cannot).
inline constexpr const char* kSuiteBegin = "<!-- suite table: begin (rows rewritten by d2k verify-tasks) -->";
inline constexpr const char* kSuiteEnd = "<!-- suite table: end -->";
std::string suite_row(const RunHeader& header, const TaskVerdict& verdict);
std::string merge_suite_table(const std::string& existing, const std::vector<std::pair<std::string, std::string>>& rows);
std::filesystem::path write_suite_table(const std::filesystem::path& results_dir, const RunHeader& header,
                                        const std::vector<TaskVerdict>& verdicts);

std::string render_task_markdown(const TaskVerdict& verdict);
// The whole run (every task verified) as one text: what verify-tasks prints on stdout, so a log of
// the run carries the report even when the files stay behind.
std::string render_markdown(const RunHeader& header, const std::vector<TaskVerdict>& verdicts);

// One task's report as it lives beside the task (tasks/<task>/RESULTS.md): the run's table (its
// result is this task's) and the task's section. Only the latest run is kept; history is git's.
std::string render_task_results(const RunHeader& header, const TaskVerdict& verdict);
// Where a task's report goes: <results_dir>/<task>/RESULTS.md. results_dir is the tasks folder by
// default, so each report lands in its own task's folder; another folder gets the same layout.
// Throws std::invalid_argument for a task id that is not one folder name.
std::filesystem::path task_results_path(const std::filesystem::path& results_dir, const std::string& task);
// Writes render_task_results of every verdict to task_results_path (creating <task>/ where it is
// missing) and returns the paths written, in verdict order. Throws std::runtime_error naming the
// file or folder it could not write.
std::vector<std::filesystem::path> write_task_results(const std::filesystem::path& results_dir, const RunHeader& header,
                                                      const std::vector<TaskVerdict>& verdicts);

}  // namespace d2k::runner
