// The runner's wire: what the parent (host library d2k_eval) sends to a d2k-runner process and
// what comes back. One JSON object per line on each pipe. Shared by both ends so the layout of the
// output file (where each output tensor lies) is computed in exactly one place.
//
// Trust: the parent treats everything a runner in agent mode sends as untrusted input (agent code
// shares its address space and could write to the same pipe): every field is validated here with
// a typed error, and the parent checks claimed times against its own clock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/outcome.hpp"

namespace d2k::runner {

// Element types a runner can allocate, generate and hand back (same names as tasks::Dtype).
enum class Dtype { f32, f64, bf16, f16, i32, i64, u8, u32 };
std::string_view dtype_name(Dtype d);
std::size_t dtype_size(Dtype d);
std::optional<Dtype> parse_dtype(std::string_view name);
bool is_float(Dtype d);

enum class ArgRole { input, output, scalar };

// How an input's elements are drawn from (seed, arg index, element index). Counter-based, so any
// runner with the same seed produces bit-identical inputs on any GPU.
// The custom generators (task.json {"dist":"custom","generator":...}) are trusted code of the runner:
// csr_row_ptr / csr_col_idx (one CSR structure, see csr_gen.hpp; both parts of one call come from
// the same structure) and zipf_bytes (u8 values, P(v) ~ 1/(rank(v)+1)^s).
enum class Dist { uniform, normal, randint, constant, iota, csr_row_ptr, csr_col_idx, zipf_bytes };
enum class CsrPattern { uniform, power_law, banded };
struct Generator {
  Dist dist = Dist::uniform;
  double a = -1;  // uniform: low, normal: mean, randint: low (inclusive), constant: value, iota: start,
                  // csr power_law: alpha, zipf_bytes: s
  double b = 1;   // uniform: high, normal: std, randint: high (inclusive), iota: step
  // csr_*: the structure's shape and pattern (from the workload's sizes rows, cols, nnz and params).
  std::int64_t rows = 0, cols = 0, nnz = 0;
  std::int64_t max_row = 0;      // csr: cap on a row's length (0: cols)
  CsrPattern pattern = CsrPattern::uniform;
};
// Parses a task.json "init" object ({"dist":"uniform","low":-1,"high":1} ...). Throws WireError for
// an unknown or malformed generator. A custom generator needs the workload: its sizes and params
// (without them, code "generator_unsupported").
Generator parse_generator(const nlohmann::json& init);
Generator parse_generator(const nlohmann::json& init, const std::map<std::string, std::int64_t>& sizes,
                          const nlohmann::json& params);
// The names of the custom generators the runner implements, for the task loader's checks.
bool is_custom_generator(std::string_view name);

struct WireArg {                 // one parameter of the entry point, resolved for one workload
  ArgRole role = ArgRole::input;
  Dtype dtype = Dtype::f32;
  std::uint64_t count = 0;       // elements (inputs/outputs)
  Generator gen;                 // inputs
  double scalar = 0;             // scalars (converted to dtype at the call)
};

struct WireWorkload {
  std::string name;
  std::vector<WireArg> args;     // in entry-point order; the stream is appended as last argument
  bool time = true;              // run the timing phase on it (when timing is enabled)
};

struct TimingSpec {
  bool enabled = true;
  int warmup = 3;
  int min_samples = 10;
  int max_samples = 300;
  double rse_target = 0.005;     // stop once stderr(mean)/mean falls below this
  double time_cap_s = 2.0;       // per workload, samples stop after this much wall time
};

struct Job {
  std::string so_path;           // the shared object to load (opened before any hiding)
  std::string entry;             // C symbol
  bool returns_int = true;       // entry returns int (non-zero = failure) or void
  std::vector<WireWorkload> workloads;
  std::vector<std::uint64_t> seeds;   // correctness runs once per seed; timing uses seeds[0]
  TimingSpec timing;
  bool measure_overhead = true;  // time empty samples (before the .so is loaded) and report them
  std::vector<std::string> hide_paths;  // agent mode: made unreadable before the .so is loaded
  std::uint64_t host_memory_bytes = 8ull << 30;  // agent mode: extra address space after CUDA init
  // Record every kernel launch of each workload's first correctness call (CUPTI activity records;
  // d2k verify-tasks' resource properties). Off by default: it adds per-launch overhead.
  bool record_launches = false;
};

nlohmann::json to_json(const Job& job);
Job job_from_json(const nlohmann::json& j);  // throws WireError

// Where each output tensor lies in the output file: for every workload, every seed, every output
// argument in order; then, for every timed workload, its outputs after the last timed call.
struct Slot {
  std::size_t workload = 0;
  int seed_index = 0;            // -1: outputs of the last timed call (inputs of seeds[0])
  std::size_t arg = 0;
  Dtype dtype = Dtype::f32;
  std::uint64_t count = 0;
  std::uint64_t offset = 0;      // bytes, 64-byte aligned
  std::uint64_t bytes = 0;
};
struct Layout {
  std::vector<Slot> slots;
  std::uint64_t total_bytes = 0;
  const Slot* find(std::size_t workload, int seed_index, std::size_t arg) const;
};
Layout output_layout(const Job& job);

// ---- runner → parent -------------------------------------------------------------------------
// Events, in order: ready (CUDA initialised; sent before any job), then per workload "call"
// (after each correctness call), "timing_begin"/"timing_end", occasional "heartbeat", and one
// final "result". The parent timestamps each on arrival.

struct TimingResult {
  int samples = 0;
  double median_s = 0, min_s = 0, mean_s = 0, cv = 0, rse = 0;
  double event_median_s = 0;     // cudaEvent time alone (the given stream only)
  double wall_median_s = 0;      // host bracket to device-wide sync, minus the empty-call overhead
  double phase_s = 0;            // runner-measured wall time of the sample loop
  unsigned sm_clock_start_mhz = 0, sm_clock_end_mhz = 0, sm_clock_max_mhz = 0;
  bool throttled = false;
  bool stopped_by_cap = false;
};

// One kernel launch made by the entry point (CUPTI kernel activity record).
struct LaunchRecord {
  std::string kernel;                        // mangled name as the driver reports it
  std::uint32_t grid_x = 0, grid_y = 0, grid_z = 0;
  std::uint32_t block_x = 0, block_y = 0, block_z = 0;
  std::uint32_t registers_per_thread = 0;
  std::uint32_t static_shared_bytes = 0;
  std::uint32_t dynamic_shared_bytes = 0;
  std::uint32_t local_bytes_per_thread = 0;
  std::uint64_t grid_blocks() const { return std::uint64_t{grid_x} * grid_y * grid_z; }
  std::uint64_t block_threads() const { return std::uint64_t{block_x} * block_y * block_z; }
};
nlohmann::json to_json(const LaunchRecord& l);
LaunchRecord launch_from_json(const nlohmann::json& j);  // throws WireError

inline constexpr std::size_t kMaxLaunchRecords = 4096;  // per workload; more is an error

struct WorkloadResult {
  std::string name;
  std::optional<TimingResult> timing;
  std::optional<std::vector<LaunchRecord>> launches;  // when the job asked for launch records
};

struct RunnerResult {
  // ok | runtime_error | entry_error | load_error | setup_error | flagged | bad_job
  sandbox::Outcome status = sandbox::Outcome::ok;
  std::string message;
  std::vector<std::string> flags;          // e.g. "background_thread", "throttled"
  std::vector<WorkloadResult> workloads;
  double overhead_s = 0;         // median host bracket of an empty call (subtracted from samples)
  double sample_overhead_s = 0;  // median whole empty sample, L2 flush included (outside bound)
  double init_s = 0;                        // CUDA start-up in this runner
  std::string launches_error;               // why launch records are missing although asked for
};

nlohmann::json to_json(const TimingResult& t);
nlohmann::json to_json(const RunnerResult& r);
RunnerResult result_from_json(const nlohmann::json& j);  // throws WireError

struct DeviceInfo {              // sent with "ready"
  std::string name;
  std::string pci_bus_id;
  std::string driver;            // NVML driver version ("" when NVML is missing)
  int cuda_driver_version = 0;
  int runtime_version = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  std::uint64_t memory_bytes = 0;
  std::uint64_t l2_bytes = 0;
  bool nvml = false;
  int memory_clock_khz = 0;      // peak memory clock (cudaDevAttrMemoryClockRate); 0 unknown
  int memory_bus_bits = 0;       // global memory bus width; 0 unknown
  // Theoretical DRAM bandwidth: memory clock × bus width × 2 (double data rate); 0 unknown.
  double peak_dram_bytes_per_s() const {
    return 2.0 * memory_clock_khz * 1e3 * (memory_bus_bits / 8.0);
  }
};
nlohmann::json to_json(const DeviceInfo& d);
DeviceInfo device_from_json(const nlohmann::json& j);

struct WireError : std::runtime_error {
  WireError(std::string code_, const std::string& message)
      : std::runtime_error(message), code(std::move(code_)) {}
  std::string code;  // "bad_job", "bad_result", "generator_unsupported"
};

}  // namespace d2k::runner
