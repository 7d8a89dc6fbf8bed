// `profile` and `sanitize` (issue 20, items 1 and 2): the agent's kernel on one visible workload
// in a fresh agent runner, confined exactly as for evaluate, under Nsight Compute or
// compute-sanitizer. The tool is the runner's parent inside a tool host (d2k-runner --mode
// tool-host: own user and network namespace, loopback only); the runner keeps that network
// namespace (--keep-net) and takes every other confinement step. Command lines are fixed here:
// the agent picks sections / a sanitizer tool from fixed lists, never flags.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <sys/types.h>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/outcome.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::runner {
class Evaluator;
}

namespace d2k::tools {

// ---- Nsight Compute ----------------------------------------------------------------------------

// The agent's section names and the Nsight Compute sections behind them.
struct ProfileSection {
  std::string_view name;     // what the agent asks for
  std::string_view ncu;      // --section
  std::string_view summary;
};
inline constexpr ProfileSection kProfileSections[] = {
    {"speed_of_light", "SpeedOfLight", "duration, SM / memory / DRAM / L2 throughput as % of peak"},
    {"memory", "MemoryWorkloadAnalysis", "L1 and L2 hit rates, DRAM bytes read and written vs the task's byte count"},
    {"compute", "ComputeWorkloadAnalysis", "pipe utilisation (tensor, FMA, ALU, ...) as % of peak"},
    {"occupancy", "Occupancy", "achieved and theoretical occupancy, the limiter (registers, shared memory, blocks, warps)"},
    {"launch", "LaunchStats", "grid, block, registers per thread, shared memory per block, waves"},
    {"warp_stalls", "WarpStateStats", "the top warp-stall reasons (cycles per issued instruction)"},
};
// Throws std::invalid_argument naming the bad section and the list. Empty: every section.
std::vector<std::string> validate_sections(const std::vector<std::string>& sections);

// What of a tool run's output is passed on to the agent: the system calls the profiled runner's
// seccomp filter refused (its "d2k-runner: refused system call N" lines, by name, at most 8), then
// the tool's own complaints (==ERROR== / ==WARNING== lines, at most 5), with `scratch` (the run's
// private folder) replaced by "…".
std::vector<std::string> tool_messages(const std::string& text, const std::string& scratch);

// ncu's arguments (after the ncu path) for these sections, writing its CSV to `log_file`.
std::vector<std::string> ncu_arguments(const std::vector<std::string>& sections, const std::string& log_file,
                                       int launch_count);

// One CSV table of `ncu --csv --page raw`: the header row, the units row, the data rows. Lines
// that are not CSV (==PROF==, ==WARNING== ...) are skipped.
struct NcuTable {
  std::vector<std::string> columns, units;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> messages;  // the ==...== lines (errors, warnings)
};
NcuTable parse_ncu_csv(std::string_view text);
std::vector<std::string> split_csv_line(std::string_view line);
// "1,234.5" → 1234.5 (ncu's thousands separators); nullopt for "", "n/a" and text.
std::optional<double> parse_ncu_number(std::string_view s);

struct ProfileContext {
  std::vector<std::string> sections;   // validated; empty = all
  double task_bytes = 0;               // task.json bytes of the profiled workload (one call)
  double task_flops = 0;
  std::size_t max_launches = 16;
};
// The curated reply: {launches: [{kernel, grid, block, duration_s, speed_of_light{...}, memory{...},
// compute{...}, occupancy{...}, launch{...}, warp_stalls[...]}], launches_total, truncated,
// call: {duration_s, dram_bytes, task_bytes, bytes_vs_task, achieved_bandwidth, achieved_flops}}.
// The runner's own kernels (input generation) are left out.
nlohmann::json curate_profile(const NcuTable& table, const ProfileContext& ctx);

// ---- compute-sanitizer -------------------------------------------------------------------------

inline constexpr std::string_view kSanitizerTools[] = {"memcheck", "racecheck", "initcheck", "synccheck"};
bool is_sanitizer_tool(std::string_view tool);
std::vector<std::string> sanitizer_arguments(const std::string& tool, const std::string& log_file, int print_limit);

struct Finding {
  std::string kind;          // invalid_access | uninitialized_access | race | barrier_error | api_error |
                             // hardware_exception | leak | other
  std::string message;       // the report's first line
  std::string kernel;        // demangled, as the sanitizer prints it
  std::string file;          // workspace-relative where the path shows it, else the base name
  int line = 0;              // 0: no line information
  std::string access;        // read | write | atomic (invalid/uninitialized), "write/read" (race)
  std::string address_space; // global | shared | local | ...
  int size = 0;              // bytes per access
  std::string address;       // "0x7f..." and what it is ("out of bounds", "misaligned")
  std::string detail;        // e.g. "4 bytes after the nearest allocation ... of size 1024 bytes"
  std::string thread, block; // "(255,0,0)"
  std::uint64_t count = 1;   // identical findings (same kind, kernel, place, access) folded
};
struct SanitizerReport {
  std::vector<Finding> findings;     // folded, in order of first appearance
  std::uint64_t reported = 0;        // records seen before folding
  std::optional<std::uint64_t> summary_errors;  // "ERROR SUMMARY: N errors"
  std::vector<std::string> notes;    // lines of the tool itself (==WARNING==, "Target application ...")
};
SanitizerReport parse_sanitizer(std::string_view text);
nlohmann::json sanitizer_to_json(const SanitizerReport& report, const std::string& tool, std::size_t max_findings);

// ---- running one -------------------------------------------------------------------------------

struct GpuToolConfig {
  std::filesystem::path runner;           // d2k-runner
  std::filesystem::path ncu;              // empty: not available
  std::filesystem::path compute_sanitizer;
  // Per-run folders for the tools' files (their TMPDIR, the log). The tool's front end shares the
  // runner's mount namespace (tool_host.hpp), so the runner's masks hide from it whatever they hide
  // from agent code: this must lie outside every hidden path (run_gpu_tool refuses otherwise).
  std::filesystem::path scratch_dir;
  bool isolate = true;
  std::vector<std::filesystem::path> hidden_paths;
  double deadline_s = 300;                // the whole run, tool start-up included
  double ready_timeout_s = 120;
};

enum class GpuToolKind { profile, sanitize };

struct GpuToolRequest {
  GpuToolKind kind = GpuToolKind::profile;
  const tasks::Task* task = nullptr;
  std::filesystem::path so_path;
  int gpu = 0;
  std::string workload;                   // visible workload; empty: profile the largest, sanitize the smallest
  std::vector<std::string> sections;      // profile
  std::string sanitizer_tool = "memcheck";  // sanitize
  std::size_t max_items = 20;             // launches (profile) / findings (sanitize) in the reply
};

struct GpuToolResult {
  // ok | runtime_error (the kernel failed under the tool; findings may still explain why) | timeout
  // | sandbox_violation | bad_request (unknown workload) | internal_error (the tool failed)
  sandbox::Outcome status = sandbox::Outcome::internal_error;
  bool unavailable = false;               // the tool cannot run here (missing, no counter permission)
  std::string message;
  nlohmann::json result;                  // profile / sanitize object
};

// The visible workload the tool runs on. Throws std::invalid_argument for an unknown or hidden name.
const tasks::Workload& pick_workload(const tasks::Task& task, const std::string& name, GpuToolKind kind);

// Whether the host lets a process without CAP_SYS_ADMIN read GPU performance counters
// (/proc/driver/nvidia/params: RmProfilingAdminOnly: 0). nullopt: the file says nothing.
std::optional<bool> counters_open_to_all(const std::filesystem::path& params = "/proc/driver/nvidia/params");

// Finds ncu / compute-sanitizer: beside nvcc, in the toolkit's nsight-compute folder, on PATH.
std::optional<std::filesystem::path> find_gpu_tool(const std::string& name, const std::filesystem::path& nvcc);

// Blocking. Never throws for the agent's kernel: every failure is a typed status.
GpuToolResult run_gpu_tool(const GpuToolConfig& config, const GpuToolRequest& request);

// The scratch root of the tools' runs: "<temp dir>/d2k-tools-<uid>", created 0700 (refused when it
// exists as anything but a directory of ours that only we can enter). Throws std::runtime_error.
std::filesystem::path tool_scratch_root(const std::filesystem::path& temp_dir = std::filesystem::temp_directory_path());

// A namespace's identity: the device and inode of /proc/<pid>/ns/net. nullopt when unreadable.
struct NamespaceId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const NamespaceId&) const = default;
};
std::optional<NamespaceId> net_namespace_of(pid_t pid);
// SIGKILLs every process in network namespace `ns` (the tool host's: the tool, the runner and
// anything they started, whatever process group or session they moved to; nothing can leave a
// network namespace without privileges it lacks), rescanning until none is left (at most `rounds`
// scans). Returns the number of kills sent.
int kill_namespace_members(const NamespaceId& ns, int rounds = 50);

// The server's entry: the evaluator's runner, namespaces and hidden paths (those of evaluate: the
// configured ones, the task's folder and the evaluator's state), the tools found beside `nvcc`,
// scratch folders under tool_scratch_root(); holds the GPU's evaluation lock meanwhile, so no tool
// runs during another session's timed samples.
struct ToolArgs {
  const tasks::Task* task = nullptr;
  std::filesystem::path so;
  int gpu = 0;
  std::string workload;
  std::vector<std::string> sections;
  std::string sanitizer_tool;
  std::size_t max_items = 20;
  double deadline_s = 300;
};
GpuToolResult run_gpu_tool_for(runner::Evaluator& evaluator, const std::filesystem::path& nvcc, bool profile,
                               const ToolArgs& args);

}  // namespace d2k::tools
