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
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/outcome.hpp"
#include "tasks/loader/data_model.hpp"

namespace d2k::runner {

// The data model (element types, argument roles, input generators) is the task model's, defined
// once in tasks/loader/data_model.hpp; the wire carries it under the names the runner uses.
using tasks::CsrPattern;
using tasks::Dist;
using tasks::Dtype;
using tasks::Generator;
using tasks::is_float;
using tasks::parse_dtype;
using ArgRole = tasks::Role;
inline std::string_view dtype_name(Dtype d) { return tasks::to_string(d); }
inline std::size_t dtype_size(Dtype d) { return tasks::size_of(d); }

// tasks::parse_generator (and, for a custom generator, tasks::fit_to_workload) with the wire's
// errors: WireError "bad_job" for a malformed generator, "generator_unsupported" for an unknown
// custom one or a custom one without a workload (the first form).
Generator parse_generator(const nlohmann::json& init);
Generator parse_generator(const nlohmann::json& init, const std::map<std::string, std::int64_t>& sizes,
                          const nlohmann::json& params);

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
  // The train (GPU-resident agent runners and their owner only; issue 23, class 3): the first
  // `train` timed calls of the phase run one after another, each on its own arena inputs, writing
  // straight into its owner-poisoned output slot, a device-wide synchronisation after each (no
  // flush, no bracket); the parent times them
  // from its own go line to the train_end frame, and that per-call time is the workload's time.
  // This is the most calls a train may have (the layout's room); the train stops earlier once the
  // parent's train line's time cap has passed (after its least calls) and says in train_end how
  // many it made; the warm-ups follow right after them.
  // 0: no train (the host path, trusted runs, verify-tasks). Not secret: the runner must know it.
  int train = 0;
  // Trains per phase (with a train): each its own fill from its own key, its own window, its own
  // snapshot; the room's slots are reused, the owner keeps each earlier train's snapshot in a place
  // of its own (train_snaps). The workload's time is the median of the trains' times.
  int trains = 1;
  // The split train (issue 23's CV; docs/timing-protocol.md "The split train"): > 0 makes each
  // train two halves in one room: its first `split` calls (fewer once half the time cap has
  // passed) with a device-wide sync after each, then a "train_half" frame, then the rest back to
  // back (the train line's queue in flight) with one sync after the last. The parent times both
  // halves; the time is the back-to-back half's, never below the synced half's less the sync's own
  // cost. 0: one train, a sync after every call.
  int split = 0;
  int replay_train = 0;          // owner replay only (its go line): the calls the candidate's train made
  // Owner replay only (its go line): the earlier trains (all but the last), each its key and the
  // calls it made; the last train is replayed with replay_key, as the phase.
  std::vector<std::pair<std::uint64_t, int>> replay_early_trains;
  // Trusted runners only (the reference, after the candidate): recompute the outputs of the
  // candidate's timed calls 0..replay_samples-1 (its warm-ups and samples) from the key the parent
  // released to it, so that every timed call is verified (issue 23, classes 1 and 2). 0: none.
  std::uint64_t replay_key = 0;
  int replay_samples = 0;
  // How many timed calls' inputs the candidate generated in its batch (warm-ups and every sample
  // slot): the replay generates as many, so that it measures the same batch (0: warm-ups + samples).
  int replay_batch = 0;
};

struct TimingSpec {
  bool enabled = true;
  // Warm-up calls per timed phase: the parent draws the count for each phase from
  // warmup_range() and sends it with the phase's key, never in the job (issue 23, class 1); the job
  // carries only the most a key may ask for (`max_warmup`, for the slot layout). Every warm-up is
  // verified like a sample, so knowing which calls are warm-ups earns nothing.
  int warmup = 3;
  int max_warmup = -1;           // -1: warmup + 2 (the parent); a runner's job always has it
  int min_samples = 10;
  int max_samples = 300;
  double rse_target = 0.005;     // stop once stderr(mean)/mean falls below this
  double time_cap_s = 2.0;       // per workload, samples stop after this much wall time
  // Every timed call's outputs are handed over and verified; this caps the bytes of those outputs
  // per workload, and with them the sample count (at least min(min_samples, 3) samples whatever
  // the size).
  std::uint64_t verify_bytes = 3ull << 30;
  // Every timed call's inputs and outputs are made in one batch right after the phase's key (so the
  // per-call window holds the L2 flush and the call only): this caps their bytes per workload, and
  // with them the sample count (never below the floor above).
  std::uint64_t batch_bytes = 16ull << 30;
};


// GPU-resident outputs (docs/timing-protocol.md): none (outputs handed over through the output
// file, compared in the parent); owner (a trusted runner: allocates the candidate's output slots on
// the GPU, exports them as a descriptor on its slots socket, sends "slots", waits for the parent's
// "go" line, then runs the reference and compares every slot on the GPU); user (the agent runner:
// receives that descriptor on its slots socket, maps it, copies each call's outputs there).
enum class SlotsRole { none, user, owner };
std::string_view to_string(SlotsRole r);

struct Tolerance {
  double atol = 0, rtol = 0;
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
  // Record every kernel launch of each workload's correctness calls (CUPTI activity records, merged:
  // merge_call_launches;
  // d2k verify-tasks' resource properties). Off by default: it adds per-launch overhead.
  bool record_launches = false;
  SlotsRole gpu_slots = SlotsRole::none;
  std::uint64_t gpu_slots_bytes = 0;             // user: bytes to map (the owner's "slots" frame)
  // User: bytes of the owner's input arena to map (its "slots" frame's arena_bytes); 0: no arena,
  // so each timed phase's key comes on stdin (the host path). With an arena the agent runner never
  // holds a key: the owner makes the phase's inputs, the parent sends a keyless go line (class 11).
  std::uint64_t input_arena_bytes = 0;
  // Owner (trusted): after an ok result, let go of this job's GPU memory and library, say "ready"
  // again and take another job on stdin (the parent's warm owner, EvalConfig::owner_reuse): no CUDA
  // context is torn down and made again per evaluation. Any other result ends the process as before.
  bool stay = false;
  std::map<std::string, Tolerance> tolerances;   // owner: per dtype name, for the GPU comparison
  // Owner (trusted): the replay's kernel. Empty: the replay (every timed call of the candidate,
  // trains included) runs so_path, the task's reference, as the correctness calls do. Otherwise
  // that replay runs this library's entry instead (the task's L3 expert: EvalConfig::replay_oracle),
  // loaded once per owner process and kept loaded while the owner stays.
  std::string oracle_so_path;
};

// The warm-up counts a key may carry: [max(1, warmup - 1), warmup + 2] unless max_warmup is set.
std::pair<int, int> warmup_range(const TimingSpec& t);
// The count for one phase from a secret random number r (uniform over warmup_range).
int draw_warmup(const TimingSpec& t, std::uint64_t r);
nlohmann::json to_json(const Job& job);
Job job_from_json(const nlohmann::json& j);  // throws WireError

// The seed of a workload's timed call `index` (warm-ups first, then samples) from the key the
// parent releases when the timed phase is due. Never in the job: the key enters the runner only
// when the inputs it produces are due (issue 23, class 11).
std::uint64_t timed_seed(std::uint64_t key, std::uint64_t index);

// GPU-resident path (issue 23, class 11): where a timed phase's inputs lie in the owner's input
// arena. The owner makes every timed call's inputs there from the phase's key (timed_seed(key, c));
// the agent runner maps the arena (read-only where the driver allows) and passes pointers into it.
// Phases run one after another, so they share the arena: its size is the largest phase's.
struct ArenaPhase {
  int calls = 0;                         // timed calls with room: the most warm-ups + timed_slots
  std::uint64_t shared_bytes = 0;        // CSR parts first: one copy shared by the phase's calls
  std::uint64_t call_stride = 0;         // then each call's own inputs, this many bytes apart
  std::vector<std::int64_t> arg_offset;  // per argument: offset (shared part or within a call); -1 none
  std::vector<bool> shared;              // per argument: a CSR part (host-built once per phase)
  std::uint64_t bytes = 0;               // shared_bytes + calls * call_stride
  // Byte offset of timed call c's input argument a (arg_offset[a] >= 0).
  std::uint64_t at(int c, std::size_t a) const {
    return shared[a] ? static_cast<std::uint64_t>(arg_offset[a])
                     : shared_bytes + static_cast<std::uint64_t>(c) * call_stride + static_cast<std::uint64_t>(arg_offset[a]);
  }
};
constexpr std::uint64_t kArenaAlign = 256;  // what cudaMalloc guarantees, which kernels may assume
// One phase of workload w (calls = 0 for an untimed workload or a job without timing), computed
// from the job as dispatched (before any replay): the owner and the agent runner agree on it.
ArenaPhase input_arena_phase(const Job& job, std::size_t w);
// The arena's size: the largest phase's (0 when no workload is timed).
std::uint64_t input_arena_bytes(const Job& job);

// The line the parent writes on the agent runner's stdin when a timed phase of workload w is due.
// With a key (host path): {"key": k, "warmup": n}. Without (GPU-resident path with an input arena):
// {"go": w, "warmup": n}, after the owner has made the phase's inputs; no key enters the agent's
// process. `record` >= 0 (a job with launch records, class 13): the warm-up whose launches are
// recorded, drawn by the parent in [0, warmup), added as "record".
std::string phase_line(std::size_t w, std::optional<std::uint64_t> key, int warmup, int record = -1);
struct PhaseStart {
  std::optional<std::uint64_t> key;
  int warmup = 0;
  int record = -1;  // the warm-up whose launches are recorded; -1: none
};
// The runner's reading of that line: `keyless` (it maps an input arena) refuses a line with a key
// and wants a go line for workload w; otherwise a key line is required. The warm-up count must lie
// in [0, max_warmup], a recorded warm-up in [0, warmup). Throws WireError("bad_job").
PhaseStart parse_phase_line(const std::string& line, std::size_t w, bool keyless, int max_warmup);
// The parent's request to the owner: make `calls` timed calls' inputs of workload w from `key`.
// The owner's fill of timed calls [from, calls) of workload w (from 0 with a train: the train's
// calls only, their output slots poisoned and the L2 flushed after; then the rest).
std::string arena_fill_line(std::size_t w, std::uint64_t key, int calls, int from = 0);
// The parent's request to the owner: copy workload w's timed slots [from, calls) into its snapshot
// (train -1: at the slots' own offsets; t >= 0: earlier train t's place, train_snaps).
std::string snap_line(std::size_t w, int from, int calls, int train = -1);
// The train's go line (keyless; the owner has filled the train's inputs) and its check.
// `queue` > 1: calls launched back to back with up to `queue` in flight on the stream and one
// device-wide sync after the last. In a split train (WireWorkload::split) that is the second
// half's way; a whole train that way (no split) is for measurement only (bench_gpu --train-queue,
// never a server's): it lets a kernel's work on other streams overlap the next calls with nothing
// to bound it (docs/timing-protocol.md "The train's per-call sync").
std::string train_line(std::size_t w, int least, double cap_s, int queue = 1);
struct TrainStart {
  int least = 1;        // calls the train makes whatever the time (1..the room)
  double cap_s = 0;     // then it stops once this much time has passed since the line
  int queue = 1;        // 1: a device-wide sync after every call; more: see train_line
};
TrainStart parse_train_line(const std::string& line, std::size_t w, int room);  // throws WireError bad_job
// The prime line (before the train line, after the owner's fill): the runner makes its context the
// GPU's current one with a trivial operation of its own and answers "primed", so that the switch
// from the owner's context is not inside the train's window. True when `line` is workload w's
// prime line; false when it is some other line (the train line, say); a prime line for another
// workload throws WireError bad_job.
std::string prime_line(std::size_t w);
bool is_prime_line(const std::string& line, std::size_t w);
// Whether `line` is a train line at all (a JSON object with "train"); parse_train_line checks it.
// After a phase's trains the parent may send another train (a disturbed one discarded:
// EvalConfig::train_retries) before the phase line: the runner tells them apart by this, and makes
// at most kMaxExtraTrains more per train of the job's count (the parent makes each train again at
// most that often).
bool is_train_line(const std::string& line);
constexpr int kMaxExtraTrains = 16;

// Output bytes of one call of workload w.
std::uint64_t output_bytes(const WireWorkload& w);
// Bytes of one call's generated arguments (inputs and outputs) of workload w.
std::uint64_t call_bytes(const WireWorkload& w);
// How many timed samples of workload w get an output slot (every timed call is handed over, so
// this is also the most samples the runner takes): for a timed workload of a timing job,
// min(max_samples, max(min(min_samples, 3), min(verify_bytes / output bytes,
// batch_bytes / call bytes - the most warm-ups))); for a replay, its replay_samples (calls); else 0.
// The layout holds the most warm-ups' slots besides (timed_calls_slots).
int timed_slots(const Job& job, std::size_t w);
// Slots of timed calls (warm-ups first, then samples) in the layout of workload w: for a timed
// workload of a timing job, the most warm-ups + timed_slots; for a replay, its replay_samples.
int timed_call_slots(const Job& job, std::size_t w);

// Where each output tensor lies in the output file: for every workload, every seed, every output
// argument in order; then, for every timed workload, the outputs of each timed sample.
struct Slot {
  std::size_t workload = 0;
  int seed_index = 0;            // >= 0: correctness seed; -1 - i: timed call i (warm-ups, then samples)
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

// Where the owner keeps the snapshots of each workload's earlier trains (all but its last, whose
// snapshot stays at the slots' own offsets): an area of its own, per workload with trains > 1,
// (trains - 1) copies of the room (its timed calls 0..train-1, contiguous in the layout).
struct TrainSnaps {
  std::vector<std::uint64_t> room_start, room_bytes, base;  // per workload: the room in the layout; its first copy
  std::uint64_t extra = 0;                                    // the area's bytes
  // The offset in that area of slot s in earlier train t (0 <= t < trains - 1); -1 outside the room.
  std::int64_t offset(const Job& job, const Slot& s, int t) const;
};
TrainSnaps train_snaps(const Job& job, const Layout& layout);

// ---- runner → parent -------------------------------------------------------------------------
// Frames, in order, each with the next sequence number "seq" (ready is 0): ready (CUDA initialised;
// sent before any job), then per workload "call" (after each correctness call), for a timed
// workload "timing_ready" (the parent answers with the phase's key on stdin: {"key": u64}) and
// "timing_end", occasional "heartbeat", and one final "result". The parent timestamps each on
// arrival and accepts only this order (sandbox/eval/frames.hpp).

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
bool same_launch(const LaunchRecord& a, const LaunchRecord& b);
// Class 13 (issue 23): launches are recorded on every correctness call, not the first only. A
// workload's list is its first recorded call's launches; each later call whose launches differ
// from the first call's adds those of its launches not yet in the list (at most kMaxLaunchRecords),
// so a kernel that behaves differently on some call shows that launch to the property checks.
void merge_call_launches(std::vector<LaunchRecord>& merged, const std::vector<LaunchRecord>& first,
                         const std::vector<LaunchRecord>& call);

// One output tensor's comparison with the reference's: the parent's (sandbox/eval/compare.hpp) or
// the GPU-resident owner's (sandbox/runner/gpu_slots.hpp), the same semantics.
struct TensorCheck {
  std::string arg;                 // output argument name (the owner sends its index; the parent names it)
  int seed_index = 0;              // >= 0: correctness seed; -1 - i: timed sample i
  std::uint64_t count = 0;
  std::uint64_t mismatches = 0;    // |got - want| > atol + rtol * |want|, or NaN/Inf where want is finite
  std::uint64_t nonfinite = 0;     // NaN/Inf in got where want is finite (poison left unwritten)
  double max_abs = 0;
  double max_rel = 0;
  std::int64_t first_bad = -1;     // element index, -1 when none
  double first_bad_got = 0, first_bad_want = 0;
  std::size_t arg_index = 0;       // the owner's: entry-point argument index
  // Timed slots seed_index, seed_index - 1, ... (span of them) of one output, merged into this one
  // check by the owner (merge_timed_checks: a train holds thousands of calls, and every check on
  // its result frame would not fit the frame): counts add up, maxima and the first bad element are
  // the run's. 1: one slot.
  std::uint32_t span = 1;
  bool ok() const { return mismatches == 0; }
  nlohmann::json to_json() const;
};
TensorCheck check_from_json(const nlohmann::json& j);  // throws WireError
// Merges runs of consecutive timed slots' checks of the same output (ok ones with ok ones, failing
// with failing) into one check each (TensorCheck::span); correctness checks and the first
// `keep_failing` failing timed checks stay as they are (what a report shows of a wrong kernel).
// Order is kept.
std::vector<TensorCheck> merge_timed_checks(std::vector<TensorCheck> checks, std::size_t keep_failing = 8);

struct WorkloadResult {
  std::string name;
  std::vector<TensorCheck> checks;  // GPU-resident owner: every slot's comparison, in layout order
  std::optional<TimingResult> timing;
  std::optional<std::vector<LaunchRecord>> launches;  // when the job asked for launch records
  // Trusted replay: the time of the timed phase's batch work that the candidate's window holds
  // besides its calls and their flushes: making every call's inputs and poisoned outputs (batch_in_s)
  // and handing the samples' outputs over (batch_out_s; an owner times device copies of the same bytes).
  double batch_in_s = 0;
  // Owner replay with a train: the host time of making the train's inputs, poisoning its outputs
  // and flushing the L2 (what the owner's train fill did inside the candidate's phase; the fill charge).
  double train_fill_s = 0;
  double batch_out_s = 0;
  // Owner replay: where its host time went, part by part (diagnosis only: never in any time or bound).
  std::vector<std::pair<std::string, double>> replay_parts;
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
  // GPU-resident agent runner: how its timed calls' inputs were mapped from the owner's input
  // arena: "read" (read-only), "readwrite" (the driver refused read-only), "" (no arena).
  std::string input_arena;
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
