// The design-property checker (docs/task-format.md, "properties"): mechanical checks of one
// evaluated kernel from its disassembly (`sass`), its kernel launches' resources (`resource`) and
// its measured times (`measured`). Results are holds / fails / unknown (not enough data, e.g. none
// of the property's workloads was evaluated) / unchecked (the checker lacks a tool or a number it
// needs, e.g. no cuobjdump: never reported as passed).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/runner/wire.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::runner {

// ---- cuobjdump ---------------------------------------------------------------------------------

struct SassFunction {
  std::string name;                  // mangled, from "Function : NAME"
  std::vector<std::string> opcodes;  // opcode with modifiers, per instruction, in order
};
// Parses `cuobjdump -sass` text: per function, the first token after the `/*addr*/` column, after
// an optional predicate (`@P0`, `@!P1`, `@UPT`) and an optional `{` (dual issue).
std::vector<SassFunction> parse_sass(std::string_view text);

struct KernelResources {             // one "Function NAME:" block of `cuobjdump -res-usage`
  std::string name;
  int registers = 0;                 // REG
  int stack_bytes = 0;               // STACK (spills and local arrays that live in the stack frame)
  int shared_bytes = 0;              // SHARED (static shared memory)
  int local_bytes = 0;               // LOCAL
};
std::vector<KernelResources> parse_res_usage(std::string_view text);

// cuobjdump beside nvcc, else on PATH; nullopt when absent.
std::optional<std::filesystem::path> find_cuobjdump(const std::filesystem::path& nvcc);

struct ToolOutput {
  bool ok = false;
  std::string text;                  // stdout and stderr (capped at 64 MiB)
  std::string error;                 // why not ok (jail step, exit status, output head)
};
// Runs `cuobjdump <flag> <file>` (flag: "-sass", "-ptx" or "-res-usage") in the compile jail: the
// file (agent-built) is the only thing of ours it sees, read-only. "-sass" extracts the file's ELF
// files in the jail and disassembles them side by side (a fixed script of /bin/sh there; cuobjdump
// alone would start its disassembler for each one after the other); the others run without a
// shell. Successful outputs are cached per (tool, flag, file content): a binary seen before (the
// compile cache hands back the same object for the same source) costs a hash of the file, no jail
// (ObjectDumpCache).
ToolOutput run_cuobjdump(const std::filesystem::path& cuobjdump, const std::string& flag,
                         const std::filesystem::path& file);

// The process-wide cache behind run_cuobjdump. Keys: the tool's path, the flag and a 128-bit
// hash of the file's bytes under a secret per-process seed (so a crafted binary cannot be made to
// collide with another one's entry) plus its size. Least recently used entries go first once the
// cached text exceeds the capacity.
class ObjectDumpCache {
 public:
  struct Stats {
    std::uint64_t hits = 0, misses = 0, entries = 0, bytes = 0, capacity = 0;
  };
  static ObjectDumpCache& instance();
  void set_capacity(std::uint64_t bytes);     // default 256 MiB; 0 disables caching
  Stats stats() const;
  void clear();
  // The file's key, or "" when it cannot be read.
  std::string key_of(const std::filesystem::path& tool, const std::string& flag, const std::filesystem::path& file) const;
  std::optional<std::string> find(const std::string& key);
  void store(const std::string& key, std::string text);

 private:
  ObjectDumpCache();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- the checker -------------------------------------------------------------------------------

enum class PropertyState { holds, fails, unknown, unchecked };
std::string_view to_string(PropertyState s);

struct PropertyResult {
  std::string id, title, kind;
  int layer = 1;
  PropertyState state = PropertyState::unknown;
  std::string detail;                // the numbers behind the verdict, or why there is none
};

struct MeasuredWorkload {            // one evaluated workload of the kernel
  std::string name;
  std::optional<double> median_s;    // timed median of one call (nullopt: not timed)
  bool flagged = false;              // the timing was flagged (measured properties: unknown)
  std::optional<std::vector<LaunchRecord>> launches;  // CUPTI records of the first call
};

struct PropertyInputs {
  std::optional<std::vector<SassFunction>> sass;        // nullopt: sass_missing says why
  std::string sass_missing;
  std::optional<std::vector<KernelResources>> resources;  // cuobjdump -res-usage (fallback)
  std::string resources_missing;
  std::string launches_missing;      // why no launch records (when any workload lacks them)
  std::vector<MeasuredWorkload> workloads;
  int sm_count = 0;
  double peak_dram_bytes_per_s = 0;  // 0: unknown
  std::string peak_dram_source;      // e.g. "memory clock × bus width × 2"
  double peak_flops = 0;             // 0: unknown (flops_fraction unchecked)
  std::map<std::string, double> baseline_s;  // workload → baseline median (speedup_over_baseline)
};

bool compare_op(double lhs, const std::string& op, double rhs);  // op: < <= == != >= >

PropertyResult check_property(const tasks::Task& task, const tasks::Property& property, const PropertyInputs& in);
std::vector<PropertyResult> check_properties(const tasks::Task& task, const PropertyInputs& in);

}  // namespace d2k::runner
