// d2k_eval: the host-side GPU evaluation the server calls. It never initialises CUDA (a probe
// runner lists the GPUs); every evaluation runs the candidate in a fresh agent-mode runner and the
// task's reference in a trusted runner with the same secret seeds, compares the outputs here, and
// bounds the claimed times with its own clock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/compiler.hpp"
#include "sandbox/outcome.hpp"
#include "sandbox/eval/calibration.hpp"
#include "sandbox/eval/compare.hpp"
#include "sandbox/eval/runner_process.hpp"
#include "sandbox/runner/wire.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::runner {

// Builds a trusted .cu (reference, baseline, expert) into a shared object; throws on failure.
using TrustedBuild = std::function<std::filesystem::path(const tasks::Task&, const std::filesystem::path& cu)>;

// The parent's tight bound (issue 23, classes 3, 10, 11): over a timed phase's window (the
// parent's write of the key to the arrival of timing_end), the claimed calls must account for at
// least `fraction` of what the parent's clock leaves once the trusted batch time (the reference's
// own batch of the same calls' inputs, poisoned outputs and hand-over) and the trusted per-call
// overhead (the empty sample: L2 flush, syncs, bracket) are subtracted, less the slack:
// fixed_slack_s + calls × (overhead_rel_slack × overhead + call_slack_s) + batch_rel_slack × batch.
struct ParentBound {
  double fraction = 0.95;
  // Since the batch (issue 23 item 1, 2026-12-02) the per-call overhead is the empty sample only
  // (the same flush kernel and syncs in both processes); the input generation, poison and
  // hand-over copies, which differed between two runner processes by more than 50 % per call on
  // the H200 (2026-12-01), are one batch whose slack is relative to the whole batch.
  double overhead_rel_slack = 0.5;
  // The host path's hand-over (device-to-host copies into the memfd) varied by about a quarter
  // between the candidate and the reference on the H200 (2026-12-02 07:04Z: vector_add pow2_64m,
  // 12 outputs of 256 MiB, 2.1-2.75 s against the reference's 2.2 s; it flagged an honest run at
  // 0.1). Pinned staging and preallocated memfd pages now make it smaller and steadier; the slack
  // stays at a quarter of B.
  double batch_rel_slack = 0.25;
  double call_slack_s = 20e-6;       // per call: scheduling
  double fixed_slack_s = 2e-3;       // per phase: the key's and timing_end's pipe hops and wake-ups
  // The candidate's tail (its last call or timing_end to its reap) may take at most
  // tail_fixed_s + tail_factor × the reference's end (its result frame to its reap); beyond it the
  // evaluation is flagged (tail_beyond_bound). H200, 2026-12-01: tails of 0.06-0.15 s.
  double tail_fixed_s = 0.25;
  double tail_factor = 3;
  // The reference's end when the owner stayed (EvalConfig::owner_reuse: no exit to time): the last
  // owner end measured on that GPU (an owner reaped at its reuse limit or after a failure), or
  // this before any (H200, 2026-12-04: 0.108-0.113 s).
  double tail_reference_default_s = 0.1;
  // A workload's time is never below this fraction of its claimed mean (the mean is what the
  // bounds check; the median alone is bounded by nothing): a median forged in the runner's memory,
  // or work piled into a few of the calls, gains at most this much.
  double median_of_mean = 0.9;
  // GPU-resident: a phase's output snapshot (the owner's copy at timing_end) may take this much
  // beyond the copy's own time (the parent's and the owner's pipe hops and wake-ups) before the
  // excess is charged to the phase's window.
  double snapshot_allow_s = 1e-3;
  // GPU-resident train (class 3): the owner's making of the train's inputs (its own time, inside
  // the phase, the agent runner waiting for its train line) may take fill_rel_slack × the owner's
  // replay of the same fill (after the candidate) + fill_allow_s (launch jitter) before the excess
  // is charged to the train's window: agent GPU work that ran while the inputs were made (e.g.
  // from a second context) time-slices with the owner and lengthens its fill, and that is the
  // train's time.
  // (H200, 2026-12-02 22:54Z: an honest kernel's train fills of 2048 small calls, launch-bound,
  // took 15-21 ms against replays of 15-20 ms, own/replay up to 1.35.)
  double fill_rel_slack = 0.5;
  double fill_allow_s = 1e-3;
  // The split train (EvalConfig::train_split): the time is the back-to-back half's per-call time,
  // never below (1 - split_eps) × (the synced half's per-call time - the owner's sync cost, at most
  // split_sync_cap of the synced time). Calls that overlap through streams of the kernel's own (only
  // the back-to-back half lets them) gain at most about split_eps over an honest kernel; an honest
  // kernel's back-to-back time sits about its sync cost below its synced one, so the floor binds it
  // only when the synced half is slower than that by more, or when its calls are so short that the
  // sync cost passes the cap. Why the cap: the sync cost (~10 us on the H200) and the synced half's
  // host noise are the same size as a short call, so (synced - sync cost) says little there (H200,
  // session 21: calls of 10-20 us whose streams overlapped read 5.2-9.2 us against an honest 6.7-12.1
  // with the cost subtracted whole); with the cap the floor is at least (1 - split_eps) × 0.9 of the
  // synced time.
  double split_eps = 0.02;
  double split_sync_cap = 0.1;
  // The host path's bound (threat-v4, 2026-12-02): main's older slack, which passed its H200 runs,
  // written in the batch's terms. On main every sample carried its own inputs and hand-over in its
  // per-call overhead with 50 % slack; with the batch that is 50 % of B. The tight constants above
  // (25 % of B, 2 ms, 20 us per call) flagged honest kernels on the host path on the H200
  // (2026-12-02 07:56Z: the device-to-host hand-over inside the window differs between two runner
  // processes by more than 25 %), so they apply on the GPU-resident path only (no host hand-over in
  // its window).
  static ParentBound host() {
    ParentBound b;
    b.batch_rel_slack = 0.5;
    b.call_slack_s = 50e-6;
    b.fixed_slack_s = 5e-3;
    return b;
  }
};

struct EvalConfig {
  std::filesystem::path runner_path;          // d2k-runner; empty: found at run time (runner_path.hpp)
  std::filesystem::path state_dir;            // required: calibration cache (and builds when compiler is used)
  std::size_t agent_pool_size = 2;            // pre-started agent runners per GPU
  // Pre-started trusted runners per GPU. Two: a GPU-resident evaluation takes one (its owner) and
  // holds the pools; with one, the emptied pool started a replacement at once (its CUDA start-up
  // is GPU work), and the first timed phase waited for it (H200, 2026-12-03: ~100 ms of
  // timing_ready to the train's prime).
  std::size_t trusted_pool_size = 2;
  bool isolate = true;                        // runners in own user/mount/network namespaces
  std::vector<std::filesystem::path> hidden_paths;  // unreadable for agent code (tasks dir, state dirs)
  double ready_timeout_s = 60;                // runner start-up (CUDA init) deadline
  double call_timeout_s = 10;                 // longest silence from a runner (a hung kernel)
  double job_timeout_s = 300;                 // whole job in one runner (the most any budget allows)
  // A candidate's GPU time budget (issue 23, class 15), from the task: budget_factor × the wall
  // time of the last reference run for the same task and request shape (correctness calls and a
  // replay of every timed call) + budget_constant_s + 2 × time_cap_s per timed workload, at most
  // job_timeout_s (also the budget before the task's first reference run). Fixed at dispatch:
  // heartbeats reset only the silence deadline (call_timeout_s), never this one.
  double budget_factor = 20;
  double budget_constant_s = 30;
  int seeds = 3;                              // correctness seeds per workload (requests may override)
  TimingSpec timing;                          // warm-up, samples, RSE target, time cap per workload
  std::uint64_t host_memory_bytes = 8ull << 30;   // agent host allocations beyond CUDA's own mappings
  // A claimed time is flagged when the parent's clock says the timed phase's calls (its wall time
  // minus the trusted empty-sample overhead of each sample) took more than
  // flag_factor × samples × claimed mean + samples × flag_slack_s + flag_fixed_slack_s.
  double flag_factor = 2.0;
  double flag_slack_s = 50e-6;
  double flag_fixed_slack_s = 5e-3;
  ParentBound bound;                          // the tight bound, on the GPU-resident path
  ParentBound host_bound = ParentBound::host();  // the looser one, on the host path (and trusted runs)
  // A flag that rests on the parent's clock alone (time_below_outside_bound, tail_beyond_bound) is
  // confirmed by this many fresh evaluations (new runners, keys, seeds) before it stands; the last
  // run is reported. A foreign process on the GPU (H200, 2026-12-02 07:51Z: a vendor.py that
  // outlived its killed `d2k verify-tasks` time-sliced with the candidate and left 17.9 ms in an
  // honest phase's window) is transient; a kernel that hides work is flagged again. Each confirmed
  // run is bounded on its own, so a retry lets no forged claim through.
  int clock_flag_retries = 1;
  // GPU-resident outputs (docs/timing-protocol.md): the trusted runner owns the candidate's output
  // slots on the GPU (CUDA VMM, POSIX fd passed through this process), the agent runner copies each
  // call's outputs there device to device, and the trusted runner compares them with the
  // reference's on the GPU after the agent runner has exited. Off: outputs go through host memfds
  // and are compared here on the CPU. Agent-mode candidates only (calibration keeps the CPU path).
  // On by default (session 11): the timed calls' slots are compared from the owner's own copy taken
  // at each phase's end (the output-rewrite defence of this path), its window holds no host
  // hand-over (the tight bound applies), and on the H200 (2026-12-02 10:15Z and 10:22Z,
  // tests/README.md) no honest control of the exploit suite and no task kernel evaluated
  // (vector_add, softmax, rmsnorm, gemm_bf16: baseline and L3) was flagged on it. Off: the host path,
  // with main's looser slack (ParentBound::host).
  bool gpu_resident = true;
  // The train (issue 23, class 3; GPU-resident agent-mode evaluations): before each timed phase's
  // warm-ups and samples, `train` calls run one after another (a device-wide synchronisation after
  // each, nothing else), each on its own inputs from the owner's arena, writing straight into its
  // owner-poisoned output slot; the parent's clock from its train
  // line to the train_end frame (plus the snapshot's and the fill's charges), over the calls, is the
  // workload's time. Nothing the agent's process reports enters it. The room per workload (the
  // most calls, in the layout and the arena): train_bytes / (the call's input and output bytes),
  // raised to train_window_calls while they fit in train_max_bytes (big calls: enough of them that
  // the window's fixed part and each call's spread average out), within [train_min_calls,
  // train_max_calls] and at most max(train_max_bytes, timing.batch_bytes) of calls (at least 2).
  // Each phase's train makes at least train_min_calls (at most the room), then stops at the room or
  // once train_cap_s has passed, whichever comes first, and says how many it made (each is
  // verified; the time is the window over them). Off: the claimed median raised to the parent's
  // floor (as before; verify-tasks, the host path).
  // H200, 2026-12-03, bench_gpu (a), vector_add's 768 MiB calls: 16 calls (12 GiB) gave a CV of the
  // time across fresh runners of 1.0-1.2 %, 32 calls (24 GiB) 0.5-0.7 %. 30 ms: the window's
  // fixed part (the train line's and train_end's hops, the first call's cold start, ~100 us on the
  // H200) stays under 0.5 % of it; a longer cap only lengthens the evaluation.
  bool train = true;
  // Trains per timed phase, each with its own fresh fill (a key of its own), window and snapshot;
  // the workload's time is their median. The room's slots are reused; the owner keeps each
  // earlier train's snapshot (train_snaps), and fit_trains shortens rooms to train_keep_calls, then
  // drops trains. 1 by default: on the H200 (2026-12-03, session 20, bench_gpu (a), 20 fresh
  // runners, every workload) three trains (of 18 calls: the memory fit) gave pow2_64m a CV of
  // 0.80, 1.55, 1.66, 0.98, 0.61 % against one train's (32 calls) 1.98, 1.76, 0.88, 0.38, 0.74 %,
  // and made each evaluation 0.12-0.15 s longer. A single slow train no longer moves the time,
  // but the spread left is mostly per runner process (all its trains slow together), which trains
  // in the same memory share (bench/README.md "Several trains per phase").
  int train_count = 1;
  // When a job's trains do not fit (train_job_fraction), rooms are first shortened down to this
  // many calls, then trains dropped, then rooms shortened further (fit_trains). vector_add with
  // every workload and train_count 3: three trains of 18 calls on its 768 MiB workloads (one
  // train of 32 takes 93 GiB by the layout, three 137 GiB).
  int train_keep_calls = 16;
  std::uint64_t train_bytes = 12ull << 30;
  int train_window_calls = 32;
  std::uint64_t train_max_bytes = 24ull << 30;
  int train_min_calls = 3;
  int train_max_calls = 2048;
  double train_cap_s = 0.03;
  // Measurement only, never for a server (bench_gpu --train-queue): > 1 launches a train's calls
  // back to back, that many in flight, with one device-wide sync after the last instead of one after
  // every call. It takes the host's per-call launch and wake-up out of the window, but lets a
  // kernel's work on streams of its own overlap the next calls (docs/timing-protocol.md, "The
  // train's per-call sync"), so no reward may come from it.
  int train_queue = 1;
  // The split train (docs/timing-protocol.md "The split train"; issue 23's CV): each train's room
  // in two halves, the first with a device-wide sync after every call, the second back to back
  // with train_split_queue calls in flight and one sync after the last; the time is the second
  // half's per-call time on the parent's clock, floored by the first's less the owner-measured cost
  // of a sync (ParentBound::split_eps). Rooms of fewer than 2 × train_min_calls are not split.
  // Why: the per-call sync's host share (launch, wake-up, what the host does to the thread) is
  // what spread a train's time across runners (H200, session 21: 0.7-1.3 %, 26-28 % on a host that
  // stalled), and back to back it is gone; the first half bounds what overlapping calls could gain.
  bool train_split = true;
  int train_split_queue = 3;
  // A disturbed split train is run again (docs/timing-protocol.md "Disturbed trains"): when its
  // two halves disagree by more than train_retry_band (split_train_disturbed: the synced half's
  // floor above the back-to-back half, or the back-to-back half above the synced half less its
  // sync cost), the parent discards it (its time and its outputs) and the phase makes the train
  // again from fresh inputs (a fresh key), up to train_retries more times, unless the train's
  // previous making read the same time within the band (a disagreement that repeats is the kernel's
  // or the runner process's own, not a stall); the last one made counts, whatever it reads.
  // Why: a host stall of the parent (train_half read late: the synced half long, the back-to-back
  // half impossibly short) or of the runner (the GPU idle between synced calls) set one train's
  // time 3 % to 5x high in up to 1 of 2 fresh runners on one H200 host (session 22, bench_gpu (a):
  // CVs of 38-78 %). The parent's clock still measures every counted train, so a
  // retry changes which valid train counts, never what a train may claim. Short calls (the floor's
  // sync cost at its cap) are never retried: there the floor sets the time by design.
  int train_retries = 3;  // per train; at most kMaxExtraTrains (sandbox/runner/wire.hpp) count
  double train_retry_band = 0.01;
  // The job's GPU memory with its trains: the owner's output slots (every workload's timed calls
  // at once, sandbox/runner/wire.cpp output_layout), the owner's copy of them (the phase
  // snapshots) and the input arena. When that passes train_job_fraction of the GPU's memory (or
  // train_job_bytes when set), the longest trains are shortened until it fits or every train is at
  // train_min_calls (fit_trains). Without it, output-heavy tasks (moe_permute: about 260 GiB by the
  // layout with every workload) cannot be evaluated at all with the train. 0.7 leaves the rest of
  // an H200 (about 40 GiB) to the processes' contexts, the owner's replay and the agent kernel's own
  // allocations; vector_add with every workload (92 GiB) keeps its trains.
  double train_job_fraction = 0.7;
  std::uint64_t train_job_bytes = 0;
  // GPU-resident: the trusted owner stays for up to this many evaluations of its GPU (Job::stay):
  // after an ok result it lets go of the job's GPU memory and library and says "ready" again, so
  // that no trusted CUDA context is torn down and made again per evaluation (issue 15: on the H200
  // an owner's teardown took 0.11 s, and overlapped with the next evaluation it slowed that one by
  // as much). The agent runner is fresh for every evaluation, as before. 0 or 1: a fresh owner each.
  int owner_reuse = 32;
  // GPU-resident: the owner replays the candidate's timed calls (trains, warm-ups, samples) with the
  // task's L3 expert when the task has one, not with its reference; the correctness calls stay on the
  // reference. A reference is written to be obviously right, not fast: on the H200 (2026-12-04) its
  // replay was 6.5 s of gemm_bf16's 11.1 s evaluation, 9 s of conv2d's. The expert is trusted code
  // of the task (built by build_trusted; `d2k verify-tasks` checks it against the reference on every
  // workload); the comparison keeps the task's tolerances. An L3 that does not build: the reference.
  bool replay_oracle = true;
  // Before the train line, a prime line: the agent runner makes its context the GPU's current one
  // with work of its own (after the owner's fill) and answers "primed"; the window opens after it.
  bool train_prime = true;
  // Trusted builds: `build_trusted` when set, else sandbox::Compiler with `compiler` (its
  // cache_dir/scratch_dir default to state_dir/{trusted-cache,trusted-scratch}).
  TrustedBuild build_trusted;
  sandbox::CompilerConfig compiler;
  std::string toolchain;                      // calibration key part; empty: the compiler's version
};

enum class WorkloadSet { visible, all };

struct EvalRequest {
  const tasks::Task* task = nullptr;
  std::filesystem::path so_path;              // the candidate's compiled shared object
  WorkloadSet workloads = WorkloadSet::visible;
  int gpu = 0;
  int seeds = 0;                              // 0: config's
  bool timing = true;
  bool trusted = false;                       // run the .so in a trusted runner (task's own kernels)
  bool record_launches = false;               // CUPTI launch records of each workload's first call
};

struct WorkloadEval {
  std::string name;
  bool visible = true;
  bool correct = false;
  std::vector<TensorCheck> checks;            // one per output × seed, plus the timed call's
  std::optional<TimingResult> timing;
  double outside_s = 0;                       // the parent's per-sample bound (0: not timed)
  double window_s = 0;                        // the parent's window of the timed phase (key to timing_end)
  double call_overhead_s = 0;                 // the trusted per-call overhead the bound subtracts
  double batch_s = 0;                         // the trusted batch time the bound subtracts (inputs, hand-over)
  int calls = 0;                              // timed calls in the window (warm-ups and samples)
  // The parent's time per call: (window - batch) / calls - call overhead. Signed: below zero the
  // trusted overheads exceed what the window held (the bound is then blind; bench/README.md).
  double parent_call_s = 0;
  // The claimed fraction of the parent-measured call time (window less overheads) below which the
  // tight bound flags this workload, with this phase's sample count and slack (0: not timed).
  double flag_below_fraction = 0;
  // The floor of the workload's time: the larger of bound.median_of_mean × the claimed mean and the
  // per-call time the parent's clock guarantees, (fraction × (window − calls × overhead − batch) −
  // slack) / calls. The workload's time (timing->median_s, what rewards use) is the claimed median
  // raised to it: a kernel that piles the work of several calls into a few (their inputs all exist
  // once the batch is made), or forges the median in the runner's memory, keeps its mean but not a
  // low median (issue 23, "work shifting"). claimed_median_s keeps the runner's own median.
  double median_floor_s = 0;
  double claimed_median_s = 0;
  // The candidate runner's own figures of its batch (untrusted, for diagnosis: the bound uses the
  // reference's batch_s).
  double runner_batch_s = 0;
  // GPU-resident: how much later than its own copy time the owner's snapshot of this phase's
  // outputs finished (charged to window_s: agent GPU work that ran after timing_end).
  double snapshot_late_s = 0;
  // The train (EvalConfig::train; 0 calls: none). Each train's time is (its window + its fill
  // charge) / its calls, where the window runs from the parent's train line to train_end (or the
  // freeze after it) plus its snapshot's charge; train_s, the workload's time then
  // (timing->median_s), is the median of the trains' times (EvalConfig::train_count of them, each
  // with fresh inputs). The fields below add the trains up (train_s and train_fill_ref_s excepted).
  struct TrainEval {
    int calls = 0;
    double window_s = 0, fill_s = 0, fill_charge_s = 0, late_s = 0, s = 0;
    // The runner's own median call (its clock, each call from the previous call's sync to its own;
    // untrusted, diagnosis only: bench_gpu (a) compares a median-based time with the window's).
    double claim_median_call_s = 0;
    // The split train: the first half's calls and per-call time (synced after each), the second
    // half's per-call time (back to back), the owner's sync cost, and whether the floor set the time.
    int half_calls = 0;
    double half_s = 0, queued_s = 0, sync_call_s = 0;
    bool floored = false;
    // Diagnosis: the CPU the runner's main thread and the parent last ran on at train_end (-1: unknown).
    int runner_cpu = -1, parent_cpu = -1;
  };
  std::vector<TrainEval> trains;
  // Trains run again (EvalConfig::train_retries): the discarded ones' figures (diagnosis only;
  // their outputs were not compared and their times count nowhere).
  std::vector<TrainEval> retried_trains;
  int train_calls = 0;
  double train_window_s = 0;
  double train_fill_charge_s = 0;
  // The train's fill: the owner's own time, the parent's round trip, the owner's replay of it.
  double train_fill_s = 0, train_fill_roundtrip_s = 0, train_fill_ref_s = 0;
  double train_s = 0;
  // For diagnosis only: the train's snapshot charge (inside train_window_s, the part after the
  // freeze), and the runner's own claims (untrusted, never in any time): from reading its train
  // line to its last call's sync, and its first call alone.
  double train_late_s = 0, train_claim_s = 0, train_first_claim_s = 0;
  // For diagnosis only: where the owner's replay of this workload spent its host time (the owner's
  // replay_parts: alloc, poison, calls, copies, checks).
  std::vector<std::pair<std::string, double>> replay_parts;
  std::optional<std::vector<LaunchRecord>> launches;  // when requested and the runner could record
  nlohmann::json to_json() const;
};

struct PhaseTimes {
  double reference_s = 0;                     // trusted reference run, wall clock
  double wait_ready_s = 0;                    // waiting for the agent runner's CUDA start-up
  double candidate_s = 0;                     // agent runner job, wall clock
  double compare_s = 0;                       // in the parent (0 on the GPU-resident path: the owner compares)
  double total_s = 0;
  // The parent's clock from the last timing_end to the candidate's reap (its process, CUDA context
  // and any GPU work it left are gone): work deferred past the timed phases would show here (measured, not yet bounded).
  double candidate_tail_s = 0;  // the candidate's last call or timing_end to its reap (timed evaluations)
  double tail_allowed_s = 0;    // its bound (tail_allowance_s)
  // Host path: the time the candidate's runner was frozen while the parent took each timed phase's
  // outputs (outside every window and the tail).
  double snapshot_s = 0;
  // GPU-resident: the owner's start (a ready pooled runner's job until its slots and arena are
  // exported), and the parent's round trips of every phase's input fill and output snapshot.
  double owner_export_s = 0;
  double fill_s = 0;
  double snap_s = 0;
  // GPU-resident: the waits before timed phases (outside their windows) for this GPU's runner
  // start-ups in flight (the pools' replacements).
  double start_wait_s = 0;
  // GPU-resident: which job of its owner this evaluation was (1: a fresh owner; n: a warm owner's
  // n-th, EvalConfig::owner_reuse). Diagnosis.
  int owner_job = 0;
  // Each runner frame's arrival on the parent's clock (seconds since its job was sent), then its
  // reap: where an evaluation's time goes (bench_eval_phases prints them). Diagnosis only.
  std::vector<std::pair<std::string, double>> candidate_frames, reference_frames;
};

struct EvalResult {
  // ok | incorrect | runtime_error | timeout | sandbox_violation | flagged | no_gpu | bad_request
  // | internal_error   (compile_error is the compiler's, before an evaluation)
  sandbox::Outcome status = sandbox::Outcome::internal_error;
  std::string message;
  std::vector<std::string> flags;
  std::vector<WorkloadEval> workloads;
  double time_s = 0;                          // geometric mean of timed workloads' medians
  int gpu = -1;
  std::string gpu_name;
  PhaseTimes phases;
  std::string runner_output;                  // the candidate runner's stdout/stderr (capped)
  std::string launches_error;                 // why launch records are missing (when requested)
  // GPU-resident path: how the candidate mapped the owner's input arena ("read": read-only,
  // "readwrite": the driver refused read-only; "": no arena, the host path or no timed workload).
  std::string input_arena;
  // When an earlier run of this evaluation was flagged on the parent's clock and re-run
  // (EvalConfig::clock_flag_retries): its message, for diagnosis (empty: no retry).
  std::string retried_flag;
  // GPU-resident: what replayed the candidate's timed calls ("experts/L3.cu": the oracle,
  // EvalConfig::replay_oracle; "reference.cu"; "" when nothing was replayed or on the host path).
  std::string replayed_with;
  bool ok() const { return status == sandbox::Outcome::ok; }
  nlohmann::json to_json() const;
};

// The device-to-device copy bandwidth of one GPU (a `d2k-runner --mode bandwidth` process).
struct CopyBandwidth {
  bool ok = false;
  std::string error;
  double bytes_per_s = 0;          // (bytes read + bytes written) / median copy time
  std::uint64_t copy_bytes = 0;    // size of one copy
  double median_s = 0, min_s = 0;
  int samples = 0;
};

class Evaluator {
 public:
  explicit Evaluator(EvalConfig config);      // probes GPUs; throws std::runtime_error on bad config
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  int gpu_count() const { return static_cast<int>(gpus_.size()); }
  const std::vector<DeviceInfo>& gpus() const { return gpus_; }
  const std::string& probe_error() const { return probe_error_; }

  // Blocking; thread-safe; evaluations on one GPU run one at a time. Never throws for a bad
  // kernel: every failure is a typed status.
  EvalResult evaluate(const EvalRequest& request);
  // The bound that applies to an evaluation: the tight one on the GPU-resident path, the host one
  // otherwise (and for trusted runs, which always take the host path).
  const ParentBound& bound_for(bool resident) const { return resident ? config_.bound : config_.host_bound; }

  // Times baseline and experts (trusted runners, checked against the reference) on all
  // workloads, once per (GPU model, driver, toolchain, task hash); later calls read the cache.
  // `stage`, when given, is called before each kernel it measures ("calibration: baseline",
  // "calibration: expert L1", ...): a preparation's stage boundary, which may throw to stop it
  // (nothing is stored then).
  CalibrationEntry calibrate(const tasks::Task& task, int gpu,
                             const std::function<void(const std::string&)>& stage = {});

  // Measures the copy bandwidth of `gpu` in a fresh runner (waits for the GPU's evaluations).
  CopyBandwidth measure_copy_bandwidth(int gpu);

  // Builds (and caches) a trusted .cu of the task.
  std::filesystem::path build_trusted(const tasks::Task& task, const std::filesystem::path& cu);

  // The GPU's evaluation lock, for other work that must not overlap an evaluation there (the agent
  // tools of sandbox/tools); and the configuration the runners are started with.
  std::unique_lock<std::mutex> lock_gpu(int gpu);
  const EvalConfig& config() const { return config_; }

 private:
  EvalResult evaluate_once(const EvalRequest& request);
  struct Gpu;
  EvalConfig config_;
  std::vector<DeviceInfo> gpus_;
  std::string probe_error_;
  std::vector<std::unique_ptr<Gpu>> per_gpu_;
  std::unique_ptr<sandbox::Compiler> compiler_;
  std::mutex build_mu_;
  std::map<std::string, std::filesystem::path> built_;  // task hash + file → .so
  std::mutex budget_mu_;
  std::map<std::string, double> reference_s_;  // task hash + request shape → reference wall time
  std::unique_ptr<CalibrationCache> calibration_;
};

// Builds the runner job for a task's workloads (exposed for tests). Throws WireError
// ("generator_unsupported", "bad_job") for what the runner cannot generate.
Job make_job(const tasks::Task& task, const std::vector<const tasks::Workload*>& workloads,
             const std::vector<std::uint64_t>& seeds, const std::string& so_path, const TimingSpec& timing);

// True when `r` was flagged on the parent's clock alone (time_below_outside_bound,
// tail_beyond_bound): a flag that a transient foreign load on the GPU can raise, so the evaluator
// confirms it with a fresh run (EvalConfig::clock_flag_retries). Flags backed by evidence (a forged
// frame, rewritten outputs, a foreign thread) are never retried.
bool flag_needs_confirmation(const EvalResult& r);

// The candidate's GPU time budget for `job` (see EvalConfig::budget_factor).
double candidate_budget_s(const EvalConfig& cfg, const Job& job, std::optional<double> reference_s);

// The tight bound: true when `claimed` (samples = every call in the window, warm-ups included) is
// below bound.fraction of the parent-measured time less overheads and slack; `unexplained_s`
// receives the excess.
bool claim_below_parent_clock(const TimingResult& claimed, double window_s, double per_call_overhead_s, double batch_s,
                              const ParentBound& bound, double* unexplained_s);
// The tight bound's slack for `calls` calls, and the claimed fraction of the parent-measured call
// time below which it flags (0 when the window leaves no call time).
double bound_slack_s(int calls, double per_call_overhead_s, double batch_s, const ParentBound& bound);
double flag_below_fraction(int calls, double window_s, double per_call_overhead_s, double batch_s,
                           const ParentBound& bound);
// GPU-resident: what a phase's output snapshot adds to the phase's window: the parent's time from
// asking the owner to its reply, less the copy's own time (at the rate the owner measured before
// the candidate ran) and bound.snapshot_allow_s; never negative. A non-finite time charges nothing
// (the evaluator then fails the snapshot instead).
double snapshot_charge_s(double took_s, double copy_s, const ParentBound& bound);

// GPU-resident path with an input arena (issue 23, class 11): has the owner make workload w's first
// `calls` timed calls' inputs from `key` in its arena; false with `error` when it could not.
// (Calls [from, calls): a train's fill is from 0 to the train's count, the phase's from there on.)
using FillPhase = std::function<bool(std::size_t w, std::uint64_t key, int calls, int from, std::string& error)>;
// The parent's answer to a timed phase's timing_ready (workload w, its key and warm-up count, the
// phase's `calls` = warm-ups + sample slots). With `fill` (GPU-resident): the key goes to the owner
// through it and the agent runner gets the keyless go line; without: the key line goes to the runner
// (host path). `record` >= 0: the warm-up whose launches are recorded (class 13), in the line.
// Returns the time of the runner's line (the window's start, RunnerProcess::send_line), or -1 with
// `error` when the owner could not make the inputs.
double release_phase(RunnerProcess& runner, std::size_t w, std::uint64_t key, int warmup, int calls,
                     const FillPhase& fill, std::string& error, int record = -1, int from = 0);
// The train's room for a workload (EvalConfig::train; 0 when off).
int train_calls_for(const EvalConfig& cfg, const WireWorkload& wl);
// The GPU memory a job's timed calls take on the GPU-resident path: twice the output layout (the
// owner's slots and its snapshot copy), the owner's copies of the earlier trains (train_snaps) and
// the input arena.
std::uint64_t resident_job_bytes(const Job& job);
// Until resident_job_bytes(job) <= budget: shortens the longest trains (by their output bytes, an
// eighth at a time) down to cfg.train_keep_calls, then drops trains (the most copied bytes first)
// down to one per workload, then shortens further, never below cfg.train_min_calls. Returns
// whether it fits.
bool fit_trains(const EvalConfig& cfg, Job& job, std::uint64_t budget);
// The split train (cfg.train_split): each workload whose room holds at least 2 × train_min_calls
// gets split = room / 2 (its first half's calls); the others, and every one without the split, 0.
// After fit_trains (the rooms it leaves are what is split).
void assign_splits(const EvalConfig& cfg, Job& job);
// A split train's time per call: the back-to-back half's (queued_s), never below
// (1 - bound.split_eps) × (the synced half's (synced_s) - the sync's own cost (sync_call_s, >= 0,
// at most bound.split_sync_cap × synced_s)).
// `floored` says whether the floor set it.
double split_train_time_s(double synced_s, double queued_s, double sync_call_s, const ParentBound& bound,
                          bool* floored = nullptr);
// Whether a split train's halves (per-call times on the parent's clock) disagree by more than
// `band`: the floor of split_train_time_s above (1 + band) × queued_s, or queued_s above (1 + band) ×
// (synced_s - sync_call_s). False for calls so short that the sync cost passes its cap (the floor
// sets their time by design) and for halves that are not positive. band = -1: every other train.
bool split_train_disturbed(double synced_s, double queued_s, double sync_call_s, const ParentBound& bound,
                           double band);
// Whether the parent makes a split train again (EvalConfig::train_retries, while retries are
// left): its halves are disturbed (above) and, when the same train was made before (previous_s > 0:
// that making's split_train_time_s), this making's time is not within `band` of it (a disagreement
// that repeats is the kernel's or the runner process's own: kept).
bool split_train_retry(double synced_s, double queued_s, double sync_call_s, double previous_s,
                       const ParentBound& bound, double band);
// The train's per-call time: (window_s + charge) / calls, the charge being the owner's own time of
// the train's fill (fill_took_s) beyond (1 + bound.fill_rel_slack) × its replay of the same fill
// (fill_ref_s) + bound.fill_allow_s; `charge_s` receives it. 0 when calls <= 0 or the window is not finite.
double train_time_s(double window_s, int calls, double fill_took_s, double fill_ref_s, const ParentBound& bound,
                    double* charge_s);
// The most the candidate's tail may take, given the reference's end (result frame to reap).
double tail_allowance_s(double reference_exit_s, const ParentBound& bound);

// The parent's outside check of one timed workload: true when the claimed time is far below what
// the parent's clock allows. `outside_s` receives the per-sample bound.
// `room_wall_s` (>= 0): the wall time the "more calls than room" test uses instead of
// phase_wall_s (the evaluator passes the whole window: a trusted batch measured longer than the
// candidate's window is the reference's slowness, never the candidate's forgery).
bool claimed_time_implausible(const TimingResult& claimed, double phase_wall_s, double sample_overhead_s,
                              double factor, double slack_s, double fixed_slack_s, double* outside_s,
                              double room_wall_s = -1);
// The keyed hash of a timed output slot that the parent takes at its phase's end (host path), from
// the output file and from a buffer (both give the same value for the same bytes and key).
std::uint64_t keyed_hash_fd(int fd, std::uint64_t offset, std::uint64_t bytes, std::uint64_t key);
// The CPU that process `pid`'s main thread last ran on (field 39 of /proc/<pid>/stat), or -1
// (diagnosis: a train's runner_cpu).
int last_cpu_of(pid_t pid);
std::uint64_t keyed_hash(const char* p, std::uint64_t bytes, std::uint64_t key);
// The per-call floor of a timed phase's time (WorkloadEval::median_floor_s).
double parent_floor_per_call_s(int calls, double window_s, double per_call_overhead_s, double batch_s, const ParentBound& bound);

}  // namespace d2k::runner
