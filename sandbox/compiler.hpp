// The sandboxed compile: nvcc builds a workspace's main .cu into a shared object, inside a jail,
// with a content-addressed cache so unchanged source never recompiles.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace d2k::sandbox {

struct Diagnostic {
  std::string file;      // as the compiler printed it, relative to the workspace where possible
  int line = 0;
  int column = 0;        // 0 when the compiler gave none (nvcc front end)
  std::string severity;  // "error", "warning", "note", "fatal"
  std::string message;
};

struct CompileRequest {
  std::map<std::string, std::string> files;  // workspace: relative path → content
  std::string main_file = "kernel.cu";       // the translation unit to build
  std::vector<std::string> flags;            // task flags appended to the fixed ones (validated)
};

struct CompileOutcome {
  bool ok = false;
  bool cached = false;                       // served from the cache, nvcc not run
  double seconds = 0;                        // wall time of this call
  int exit_status = -1;
  int signal = 0;
  bool timed_out = false;
  bool sandbox_violation = false;            // the jail's filter killed the compiler
  std::string violation;                     // e.g. "syscall 41 (socket)"
  std::string resource_failure;              // set when a tool was killed or ran out of memory
                                             // (load- or limit-dependent: never cached)
  std::vector<Diagnostic> diagnostics;       // at most CompilerConfig::max_diagnostics
  std::size_t diagnostics_dropped = 0;
  std::string log;                           // raw compiler output, truncated to max_log_bytes
  bool log_truncated = false;
  std::string key;                           // cache key (hex)
  std::filesystem::path artifact;            // the .so, when ok
};

struct CompilerConfig {
  std::filesystem::path nvcc = "/usr/local/cuda/bin/nvcc";
  std::filesystem::path host_compiler = "/usr/bin/g++";     // pinned with -ccbin
  std::filesystem::path cache_dir;                          // required: artifacts + outcomes
  std::filesystem::path scratch_dir;                        // required: per-job dirs (deleted after;
                                                            // a dead server's are deleted at start)
  std::uint64_t cache_max_bytes = 4ull << 30;               // compile cache budget (0 = unbounded):
                                                            // least recently used entries evicted
  std::chrono::seconds cache_keep_recent{600};              // never evicted when used this recently
  std::vector<std::filesystem::path> hidden_paths;          // never visible in the jail (tasks dir, work roots)
  std::vector<std::string> base_flags = {"-O3", "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC", "-lineinfo"};
  std::uint64_t cpu_seconds = 120;
  std::chrono::milliseconds deadline{120000};
  std::uint64_t address_space_bytes = 8ull << 30;
  std::uint64_t file_size_bytes = 256ull << 20;
  std::size_t max_log_bytes = 64u << 10;
  std::size_t max_diagnostics = 100;
  std::uint64_t max_processes = 64;                         // per compile (nvcc, sh, gcc, cicc, ptxas …)
  std::size_t max_files = 256;                              // workspace files per request
  std::size_t max_source_bytes = 16u << 20;                 // all workspace contents together
  // Memory of compiles (docs/multi-tenant-compile.md). Per jail: a cgroup v2 memory.max (swap 0) and
  // pids.max = max_processes where a writable cgroup with those controllers exists; otherwise
  // each compile reserves jail_memory_bytes from memory_budget_bytes before nvcc starts.
  std::uint64_t jail_memory_bytes = 4ull << 30;
  std::uint64_t memory_budget_bytes = 0;                    // all concurrent compiles of this
                                                            // Compiler; 0 = half the physical memory
                                                            // (at least jail_memory_bytes)
  std::string cgroup = "auto";                              // "auto": below this process's own cgroup
                                                            // v2; "off": the budget only; else the path
                                                            // of a delegated cgroup v2 directory
};

// How compile memory is bounded, chosen once when the Compiler starts.
struct CompileLimits {
  bool cgroup = false;                    // true: every jail in its own cgroup below cgroup_dir
  std::filesystem::path cgroup_dir;       // this Compiler's cgroup (memory.max = budget_bytes)
  std::string fallback_reason;            // budget mode: why no cgroup
  std::uint64_t jail_memory_bytes = 0;
  std::uint64_t budget_bytes = 0;
  std::uint64_t max_processes = 0;
  std::string describe() const;           // one line for the server log
};

// The fallback's admission control: compiles reserve memory from a fixed budget, waiting while it
// is spent. A request larger than the budget is clamped to it (one such compile at a time).
class MemoryBudget {
 public:
  explicit MemoryBudget(std::uint64_t bytes) : total_(bytes) {}
  std::uint64_t acquire(std::uint64_t bytes);      // blocks until it fits; returns what it reserved
  bool try_acquire(std::uint64_t bytes);
  void release(std::uint64_t bytes);
  std::uint64_t in_use() const;
  std::uint64_t total() const { return total_; }

 private:
  const std::uint64_t total_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  std::uint64_t used_ = 0;
};

class CompileCache;

class Compiler {
 public:
  explicit Compiler(CompilerConfig config);  // throws std::runtime_error for a bad config
  ~Compiler();
  // Thread-safe; blocks until the compile ends. Never throws for bad source: that is an outcome.
  CompileOutcome compile(const CompileRequest& request);
  std::string toolchain_version() const;     // nvcc + host compiler versions, part of the key
  std::uint64_t cache_hits() const { return hits_.load(); }
  std::uint64_t cache_misses() const { return misses_.load(); }
  const CompilerConfig& config() const { return config_; }
  CompileCache& cache() { return *cache_; }
  const CompileLimits& limits() const { return limits_; }

 private:
  CompilerConfig config_;
  CompileLimits limits_;
  std::unique_ptr<MemoryBudget> budget_;  // budget mode only
  std::unique_ptr<CompileCache> cache_;
  std::string toolchain_;
  std::atomic<std::uint64_t> hits_{0}, misses_{0};
};

// Decides how compile memory is bounded for `config` (see CompilerConfig::cgroup). In cgroup mode it
// creates the Compiler's cgroup `<parent>/d2k-compile-<pid>-<n>` with memory.max = the budget and
// the memory and pids controllers enabled for its jails; it removes such cgroups of dead pids.
// Never throws: a cgroup that cannot be used gives the budget mode with its reason.
CompileLimits choose_compile_limits(const CompilerConfig& config);

// Removes the job dirs (and their artifact copies) that a server no longer running left in
// `scratch_dir`: names `job-<pid>-…` whose pid is not a live process. Returns how many.
std::size_t remove_orphan_jobs(const std::filesystem::path& scratch_dir);

// Parses nvcc/gcc/ptxas/linker output into diagnostics (exposed for tests). File names lose the
// jail's "/job/" prefix, so workspace files read as workspace-relative paths.
std::vector<Diagnostic> parse_diagnostics(const std::string& log);

// The request flag allowlist: empty when allowed, otherwise why not (exposed for tests).
// Allowed: -arch=, -gencode=, -O0..-O3, -lineinfo, -DNAME[=value], -std=c++17|c++20,
// -maxrregcount=N, --use_fast_math, -Xptxas -v.
std::string check_flags(const std::vector<std::string>& flags);
// The fixed flags of a build with `flags` after them: `base` less its -arch when `flags` name their
// own architecture (-arch=, -gencode=; two -arch flags make nvcc fail), e.g. a task's -arch=sm_90a.
std::vector<std::string> base_flags_for(std::vector<std::string> base, const std::vector<std::string>& flags);

// Empty when `path` is a safe workspace-relative path, otherwise why not.
std::string check_workspace_path(const std::string& path);

}  // namespace d2k::sandbox
