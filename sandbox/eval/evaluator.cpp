#include "sandbox/eval/evaluator.hpp"

#include "sandbox/eval/frames.hpp"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <tuple>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <set>
#include <stdexcept>
#include <thread>

#include "sandbox/eval/runner_path.hpp"
#include "sandbox/runner/fd_pass.hpp"

#include <future>

namespace d2k::runner {

using sandbox::Outcome;
namespace {

constexpr std::size_t kCompareThreads = 4;  // output comparison threads per evaluation

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::chrono::milliseconds ms(double s) { return std::chrono::milliseconds(static_cast<long long>(s * 1000)); }

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string tail(const std::string& s, std::size_t n) { return s.size() <= n ? s : s.substr(s.size() - n); }

std::string now_iso() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::uint64_t fresh_secret() {
  static thread_local std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// What one runner did with one job, as seen from the parent.
struct RunOutcome {
  std::unique_ptr<RunnerProcess> proc;
  std::string failure;            // "", not_ready, timeout, malformed, no_result
  std::string detail;
  std::optional<RunnerResult> result;
  std::optional<DeviceInfo> device;
  Exit exit;
  // workload → parent time: the write of the phase's key (the window opens on the parent's own
  // action) and the arrival of timing_end.
  std::map<std::size_t, double> timing_begin, timing_end;
  std::map<std::size_t, std::uint64_t> keys;               // workload → the key released to it
  std::map<std::size_t, int> announced_samples;            // workload → timing_end's count
  std::map<std::size_t, int> warmups;                      // workload → the warm-up count sent with its key
  std::map<std::size_t, int> records;                      // workload → the recorded warm-up (-1: none)
  // One train (class 3) of one workload, on the parent's clock unless said otherwise.
  struct Train {
    std::uint64_t key = 0;          // its inputs' key (the last train's is the phase's)
    std::optional<double> fill_s;   // the owner's fill of the train's inputs (round trip)
    std::optional<double> begin;    // the train line's write: the window opens
    std::optional<double> end;      // train_end's arrival (or the freeze after it) plus the snapshot's charge
    int calls = 0;                  // the calls the train made (train_end; 0 until then)
    std::optional<double> mid;      // a split train: train_half's arrival (the first half's end)
    int half_calls = 0;             // a split train: the first half's calls (train_half)
    double late = 0;                // the train snapshot's charge (inside end)
    double claim_self_s = 0, claim_first_s = 0, claim_median_s = 0;  // the runner's own: diagnosis only
    // Where the two ends ran at train_end (diagnosis: does a runner's dearer sync follow its CPU?):
    // the CPU the runner's main thread last ran on (/proc, read after the snapshot), the parent's.
    int runner_cpu = -1, parent_cpu = -1;
  };
  std::map<std::size_t, std::vector<Train>> trains;  // workload → its trains, in order (the last one: the current)
  std::map<std::size_t, int> retried;                 // workload → times its current train was discarded and made again (TrainRetry)
  std::size_t calls = 0;          // "call" events seen (one per workload and seed)
  bool all_frames = false;        // every call and timing frame the job makes due arrived
  std::vector<std::string> protocol_flags;
  double wait_ready_s = 0, run_s = 0;
  double eof_s = -1;              // the result channel's end, since the job was sent
  double result_t = -1;           // arrival of the result frame, since the job was sent
  // A staying owner (Job::stay) whose result was ok: run_job returned at the result, the process
  // lives on (its next "ready" follows once it has let go of this job) and `exit` is not known.
  bool stayed = false;
  double last_work_t = -1;        // arrival of the last call or timing_end frame (agent code ran before it)
  // The output-rewrite defence (host path): each timed phase's outputs as they were when the phase
  // ended, taken while the runner was frozen (keyed hash of each slot; the key is drawn per run and
  // never leaves the parent). (workload, seed index, argument) → hash.
  std::uint64_t hash_key = 0;
  std::map<std::tuple<std::size_t, int, std::size_t>, std::uint64_t> phase_hashes;
  double frozen_s = 0;            // time the runner spent frozen for those snapshots
  std::map<std::size_t, double> snapshot_late_s;  // resident: a phase's snapshot later than its copy time
  std::string snapshot_error;     // a phase's outputs could not be read when it ended
  std::vector<std::pair<std::string, double>> timeline;  // each frame's arrival since the job, then the reap
};

// GPU-resident hooks: `on_slots` runs when an owner's "slots" frame arrives (the loop waits for it);
// `pass_fd` (>= 0) is sent on the runner's slots socket right after the job.
using SlotsHook = std::function<void(RunnerProcess&, const Event&)>;

// One train's figures on the parent's clock (its begin and end set; a split train's mid too, in
// order): its window per call with the fill's charge (the owner's own time of the train's fill,
// fill_s, against its replay of it, fill_ref_s; NaN: not known yet, no charge), and for a split
// train each half the same way and the time by split_train_time_s with the owner's sync cost o_s.
WorkloadEval::TrainEval train_eval(const RunOutcome::Train& tr, bool split, double fill_s, double fill_ref_s, double o_s,
                                   const ParentBound& bound) {
  WorkloadEval::TrainEval te;
  te.calls = tr.calls;
  te.window_s = *tr.end - *tr.begin;
  te.fill_s = fill_s;
  te.late_s = tr.late;
  te.claim_median_call_s = tr.claim_median_s;
  te.runner_cpu = tr.runner_cpu;
  te.parent_cpu = tr.parent_cpu;
  te.s = train_time_s(te.window_s, tr.calls, fill_s, fill_ref_s, bound, &te.fill_charge_s);
  if (split) {
    te.half_calls = tr.half_calls;
    te.half_s = train_time_s(*tr.mid - *tr.begin, tr.half_calls, fill_s, fill_ref_s, bound, nullptr);
    te.queued_s = train_time_s(*tr.end - *tr.mid, tr.calls - tr.half_calls, fill_s, fill_ref_s, bound, nullptr);
    te.sync_call_s = o_s;
    te.s = split_train_time_s(te.half_s, te.queued_s, o_s, bound, &te.floored);
  }
  return te;
}

}  // namespace

// A keyed 64-bit hash of an output slot: four lanes of 8-byte words (word i to lane i % 4, each lane
// a chain of a bijective mix seeded from the key, so the lanes run in parallel), folded at the end;
// a tail shorter than 32 bytes goes through lane 0 zero-padded. Without the key a changed content
// cannot be made to keep its hash. The state carries across chunks that are multiples of 32 bytes.
struct KeyedHash {
  std::uint64_t lane[4];
  std::uint64_t total = 0;
  KeyedHash(std::uint64_t key, std::uint64_t bytes)
      : lane{key ^ bytes, key + 0x9e3779b97f4a7c15ull, key ^ 0xc2b2ae3d27d4eb4full, key + 0x165667b19e3779f9ull} {}
  static std::uint64_t mix(std::uint64_t x) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
  }
  void update(const unsigned char* p, std::size_t n) {
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      std::uint64_t w[4];
      std::memcpy(w, p + i, 32);
      for (int l = 0; l < 4; ++l) lane[l] = mix(lane[l] ^ w[l]) + 0x9e3779b97f4a7c15ull;
    }
    for (; i < n; i += 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, p + i, std::min<std::size_t>(8, n - i));
      lane[0] = mix(lane[0] ^ w ^ (static_cast<std::uint64_t>(n - i) << 56)) + 0x9e3779b97f4a7c15ull;
    }
    total += n;
  }
  std::uint64_t digest() const {
    return mix(lane[0] ^ mix(lane[1] ^ mix(lane[2] ^ mix(lane[3] ^ total))));
  }
};

std::uint64_t keyed_hash_fd(int fd, std::uint64_t offset, std::uint64_t bytes, std::uint64_t key) {
  thread_local std::vector<unsigned char> buf(8u << 20);  // a multiple of 32 bytes
  KeyedHash h(key, bytes);
  std::uint64_t done = 0;
  while (done < bytes) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), bytes - done));
    std::size_t got = 0;
    while (got < want) {
      const ssize_t n = ::pread(fd, buf.data() + got, want - got, static_cast<off_t>(offset + done + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("output file shorter than its layout");
      got += static_cast<std::size_t>(n);
    }
    h.update(buf.data(), want);
    done += want;
  }
  return h.digest();
}

int last_cpu_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!pid || !std::getline(in, stat)) return -1;
  const auto close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 1));
  std::string f;
  for (int i = 3; i <= 39 && (fields >> f); ++i)
    if (i == 39) return std::atoi(f.c_str());
  return -1;
}

std::uint64_t keyed_hash(const char* p, std::uint64_t bytes, std::uint64_t key) {
  KeyedHash h(key, bytes);
  // The same chunking as keyed_hash_fd's (8 MiB), so that both see the same tail.
  constexpr std::uint64_t kChunk = 8u << 20;
  for (std::uint64_t done = 0; done < bytes; done += kChunk)
    h.update(reinterpret_cast<const unsigned char*>(p) + done, static_cast<std::size_t>(std::min(kChunk, bytes - done)));
  return h.digest();
}

namespace {

// One message (a line) from a SOCK_SEQPACKET socket within `timeout_ms`.
// `spin`: for a reply whose round trip is charged, poll without sleeping for its first 200 ms (no
// wake-up of a sleeping thread inside the round trip), then as usual.
bool recv_line(int sock, int timeout_ms, std::string& line, std::string& error, bool spin = false) {
  pollfd p{sock, POLLIN, 0};
  int rc = 0;
  const auto start = Clock::now();
  if (spin) {
    const auto until = start + std::chrono::milliseconds(std::min(timeout_ms, 200));
    do {
      p.revents = 0;
      rc = ::poll(&p, 1, 0);
    } while (rc == 0 && Clock::now() < until);
  }
  if (rc == 0) {
    const int left = timeout_ms - static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
    rc = ::poll(&p, 1, std::max(0, left));
  }
  if (rc <= 0) {
    error = rc == 0 ? "no reply from the owner runner" : std::string("poll: ") + std::strerror(errno);
    return false;
  }
  char buf[4096];
  const ssize_t got = ::recv(sock, buf, sizeof buf, 0);
  if (got <= 0) {
    error = "the owner runner closed its slots socket";
    return false;
  }
  line.assign(buf, static_cast<std::size_t>(got));
  while (!line.empty() && line.back() == '\n') line.pop_back();
  return true;
}

// GPU-resident path: takes workload w's first `calls` timed slots into the owner's own memory (the
// agent runner is frozen meanwhile); returns the seconds by which the snapshot was later than its
// own copy time allows (agent GPU work still running after timing_end), or -1 with `error`.
using SnapPhase = std::function<double(std::size_t w, int from, int calls, int train, std::string& error)>;

// Called once when the runner's result frame has arrived, before its exit is awaited (the process,
// its CUDA context and any GPU work it left may still exist): announced samples are filled in.
using OnResult = std::function<void(const RunOutcome&)>;

// Called at a split train's train_end (its snapshot taken) while retries are left: true discards
// the train (EvalConfig::train_retries) and the phase makes it again from fresh inputs. `attempt`:
// how often this train was discarded already (0: its first making).
using TrainRetry = std::function<bool(std::size_t w, const RunOutcome::Train&, int attempt)>;

// How long the parent waits for a train's train_end spinning: twice the train's cap and 50 ms (an
// honest train ends by its cap plus one call); a train that runs longer is a slow kernel's, whose
// window is long enough that a wake-up's hop does not matter, or a hung one.
Clock::time_point train_spin_until(const EvalConfig& cfg) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(2 * std::max(0.0, cfg.train_cap_s) + 0.05));
}

RunOutcome run_job(RunnerPool& pool, const Job& job, const EvalConfig& cfg, double budget_s,
                   const SlotsHook& on_slots = {}, const std::vector<int>& pass_fds = {},
                   const std::function<void()>& before_key = {}, const Layout* snapshot = nullptr,
                   const SnapPhase& snap_phase = {}, const FillPhase& fill_phase = {},
                   const OnResult& on_result = {}, const TrainRetry& retry_train = {},
                   std::unique_ptr<RunnerProcess> given = nullptr) {
  RunOutcome o;
  if (snapshot != nullptr) o.hash_key = fresh_secret();
  o.proc = given ? std::move(given) : pool.take();  // given: a warm owner, ready again after its last job
  const auto t0 = Clock::now();
  const auto ready = o.proc->wait_ready(ms(cfg.ready_timeout_s));
  o.wait_ready_s = since(t0);
  if (!ready) {
    o.failure = "not_ready";
    o.detail = o.proc->error();
    o.proc->kill();
    o.exit = o.proc->wait();
    return o;
  }
  try {
    if (ready->contains("device")) o.device = device_from_json(ready->at("device"));
  } catch (const WireError&) {
  }
  FrameChecker frames(job);
  if (std::string why = frames.ready(*ready); !why.empty()) {
    o.failure = "forged_frame";
    o.detail = why;
    o.proc->kill();
    o.exit = o.proc->wait();
    return o;
  }
  const auto t1 = Clock::now();
  o.proc->send_job(job);
  for (const int pass_fd : pass_fds) {  // resident: the owner's output slots, then its input arena
    if (std::string e = send_fd(o.proc->slots_socket(), pass_fd); !e.empty()) {
      o.failure = "not_ready";
      o.detail = "passing the output slots: " + e;
      o.proc->kill();
      o.exit = o.proc->wait();
      return o;
    }
  }
  const auto job_deadline = t1 + ms(budget_s);  // fixed at dispatch: no frame extends it
  auto take_frames = [&] {  // what the frame checker saw: at the result frame, and again at the reap
    o.all_frames = frames.all_done();
    for (std::size_t w = 0; w < job.workloads.size(); ++w)
      if (frames.announced_samples(w) >= 0) o.announced_samples[w] = frames.announced_samples(w);
  };
  // The train line: the window opens at its write; its end is train_end's arrival, waited for spinning.
  auto open_train = [&](std::size_t w) {
    const int room = job.workloads[w].train;
    const int queue = job.workloads[w].split > 0 ? cfg.train_split_queue : cfg.train_queue;
    o.trains[w].back().begin = o.proc->send_line(train_line(w, std::min(room, std::max(1, cfg.train_min_calls)), cfg.train_cap_s, queue));
    o.proc->set_spin_until(train_spin_until(cfg));
  };
  // The next train of workload w: the owner makes the inputs of the whole room (from the train's
  // own key: the last train's is the phase's, so that the phase's calls follow it) and poisons its
  // slots; then the prime line (the train line follows "primed") or the train line. The train stops
  // at the room or at the time cap (after its least calls) and says how many it made. False when
  // the owner could not make the inputs: the run has failed ("arena") and the runner is killed.
  auto start_train = [&](std::size_t w) -> bool {
    auto& runs = o.trains[w];
    const bool last = static_cast<int>(runs.size()) + 1 >= std::max(1, job.workloads[w].trains);
    RunOutcome::Train t;
    t.key = last ? o.keys[w] : fresh_secret();
    runs.push_back(t);
    const auto t_fill = Clock::now();
    std::string err;
    if (!fill_phase(w, t.key, job.workloads[w].train, 0, err)) {
      o.failure = "arena";
      o.detail = err.empty() ? "the owner did not make the train's inputs" : err;
      o.proc->kill();
      return false;
    }
    runs.back().fill_s = since(t_fill);
    if (cfg.train_prime) {
      if (o.proc->send_line(prime_line(w)) < 0) o.proc->kill();  // gone: its events tell
      return true;
    }
    open_train(w);
    return true;
  };
  // GPU-resident: freeze the agent runner (it queues no more GPU work), have the owner copy workload
  // w's slots of calls [from, calls) into its own memory, thaw. Returns the freeze's time (-1: it
  // did not freeze) and the snapshot's charge beyond its copy (-1: it failed, err says why).
  auto frozen_snapshot = [&](std::size_t w, int from, int calls, std::string& err, int train = -1) {
    const double frozen = o.proc->freeze(std::chrono::milliseconds(2000));
    const auto t_snap = Clock::now();
    const double late = snap_phase(w, from, calls, train, err);
    const double thawed = o.proc->thaw();
    o.last_work_t = std::max(o.last_work_t, thawed);
    o.frozen_s += since(t_snap);
    return std::pair{frozen, late};
  };
  bool have_result = false;
  for (;;) {
    // After the result only a short wait for the exit; before it, the inactivity deadline.
    const auto deadline = have_result ? Clock::now() + std::chrono::seconds(2)
                                      : std::min(job_deadline, Clock::now() + ms(cfg.call_timeout_s));
    Event ev;
    const auto r = o.proc->next(ev, deadline);
    if (r == RunnerProcess::Read::eof) {
      o.eof_s = since(t1);
      break;
    }
    if (r == RunnerProcess::Read::timeout) {
      if (!have_result) {
        o.failure = "timeout";
        o.detail = Clock::now() >= job_deadline
                       ? "the evaluation ran past its GPU time budget of " + std::to_string(static_cast<int>(budget_s)) + " s"
                       : "no answer from the runner for " + std::to_string(static_cast<int>(cfg.call_timeout_s)) +
                             " s (a kernel that never ends?)";
      }
      o.proc->kill();
      break;
    }
    if (r == RunnerProcess::Read::malformed) {
      o.failure = "malformed";
      o.detail = "malformed data on the runner's result channel";
      o.proc->kill();
      break;
    }
    const std::string name = ev.body.at("event").get<std::string>();
    if (o.timeline.size() < 256) o.timeline.emplace_back(name, ev.t);
    if (have_result) {
      o.protocol_flags.push_back("data_after_result");
      continue;
    }
    if (std::string why = frames.accept(ev.body); !why.empty()) {
      o.failure = "forged_frame";
      o.detail = "a frame the protocol does not allow on the runner's channel: " + why;
      o.proc->kill();
      break;
    }
    if (name == "slots") {
      if (on_slots) on_slots(*o.proc, ev);
    } else if (name == "call") {
      ++o.calls;
      o.last_work_t = ev.t;

    } else if (name == "timing_ready") {
      // Released only now: the inputs of this phase's calls did not exist before this line.
      const auto w = ev.body.at("workload").get<std::size_t>();
      if (before_key) before_key();  // before the window opens: it is not charged to the candidate
      const std::uint64_t key = fresh_secret();
      const int warmup = draw_warmup(job.timing, fresh_secret());  // never in the job (class 1)
      o.keys[w] = key;
      o.warmups[w] = warmup;
      // Class 13: with launch records, one warm-up's launches are recorded too, drawn here.
      const int record = job.record_launches && warmup > 0 ? static_cast<int>(fresh_secret() % static_cast<std::uint64_t>(warmup)) : -1;
      o.records[w] = record;
      const int room = job.workloads[w].train;
      std::string err;
      if (room > 0 && fill_phase && snap_phase) {
        // The trains (class 3): the window of each opens at its train line; the warm-ups' and
        // samples' inputs come after the last one's train_end.
        o.trains[w].clear();
        if (!start_train(w)) break;
        continue;
      }
      if (room > 0) {
        o.failure = "arena";
        o.detail = "a train without the owner's arena";
        o.proc->kill();
        break;
      }
      const double begin =
          release_phase(*o.proc, w, key, warmup, warmup + timed_slots(job, w), fill_phase, err, record);
      if (!err.empty()) {
        o.failure = "arena";
        o.detail = err;
        o.proc->kill();
        break;
      }
      o.timing_begin[w] = begin;
    } else if (name == "primed") {
      // The runner's context is the GPU's current one: the train's window opens with its line.
      const auto w = ev.body.at("workload").get<std::size_t>();  // frames checked it: the train due
      // The prime line went out right after the train's fill (with train_prime): none before it.
      const auto& runs = o.trains[w];
      if (!cfg.train_prime || runs.empty() || !runs.back().fill_s || runs.back().begin) {
        o.failure = "forged_frame";
        o.detail = "a frame the protocol does not allow on the runner's channel: primed without a prime line";
        o.proc->kill();
        break;
      }
      open_train(w);
    } else if (name == "train_half") {
      // A split train's first half ended (frames checked the count and that one is due): the
      // parent's clock divides the train's window here. The wait for train_end goes on spinning.
      const auto w = ev.body.at("workload").get<std::size_t>();
      auto& runs = o.trains[w];
      if (runs.empty() || !runs.back().begin || runs.back().mid) {
        o.failure = "forged_frame";
        o.detail = "a frame the protocol does not allow on the runner's channel: train_half before its train line";
        o.proc->kill();
        break;
      }
      runs.back().mid = ev.t;
      runs.back().half_calls = ev.body.at("calls").get<int>();
    } else if (name == "train_end") {
      o.proc->set_spin_until({});
      // The train's end: freeze the agent runner, have the owner take the train's slots (as at a
      // phase's end: what agent code writes there later is never compared), thaw; then the rest of
      // the phase: its warm-ups' and samples' inputs, and the go line.
      const auto w = ev.body.at("workload").get<std::size_t>();
      const int train = ev.body.at("calls").get<int>();  // frames checked it: in the room
      auto& runs = o.trains[w];
      if (runs.empty() || !runs.back().begin) {  // a train_end before its train line
        o.failure = "forged_frame";
        o.detail = "a frame the protocol does not allow on the runner's channel: train_end before its train line";
        o.proc->kill();
        break;
      }
      RunOutcome::Train& cur = runs.back();
      const int due = std::max(1, job.workloads[w].trains);
      const bool last = static_cast<int>(runs.size()) >= due;
      cur.calls = train;
      o.last_work_t = ev.t;
      if (train < std::min(job.workloads[w].train, std::max(1, cfg.train_min_calls))) {
        o.failure = "forged_frame";
        o.detail = "a frame the protocol does not allow on the runner's channel: a train shorter than its line's least calls";
        o.proc->kill();
        break;
      }
      std::string err;
      // An earlier train's snapshot goes to its own place (the next train's fill poisons the room).
      const auto [frozen, late] = frozen_snapshot(w, 0, train, err, last ? -1 : static_cast<int>(runs.size()) - 1);
      if (late < 0) {
        o.failure = "snapshot";
        o.detail = err;
        o.proc->kill();
        break;
      }
      cur.end = (frozen >= 0 ? frozen : ev.t) + late;
      cur.late = late;
      cur.runner_cpu = last_cpu_of(o.proc->pid());
      cur.parent_cpu = ::sched_getcpu();
      auto claim = [&](const char* k) {  // untrusted: a number or nothing
        const auto it = ev.body.find(k);
        return it != ev.body.end() && it->is_number() ? it->get<double>() : 0.0;
      };
      cur.claim_self_s = claim("self_s");
      cur.claim_first_s = claim("first_s");
      cur.claim_median_s = claim("median_s");
      if (retry_train && cur.mid && o.retried[w] < std::min(cfg.train_retries, kMaxExtraTrains) &&
          retry_train(w, cur, o.retried[w])) {
        // A disturbed train (EvalConfig::train_retries): discarded whole, made again from fresh
        // inputs (the last train's came from the phase's key: the phase gets a fresh one) into the
        // same slots, its snapshot to the same place; the runner reads the next line as a train's.
        ++o.retried[w];
        runs.pop_back();
        if (last) o.keys[w] = fresh_secret();
        frames.train_again();
        if (!start_train(w)) break;
        continue;
      }
      o.retried[w] = 0;  // the next train (trains > 1) has retries of its own
      if (!last) {  // the next train: fresh inputs from a key of its own
        if (!start_train(w)) break;
        continue;
      }
      const int warmup = o.warmups[w];
      const double begin = release_phase(*o.proc, w, o.keys[w], warmup, train + warmup + timed_slots(job, w), fill_phase,
                                         err, o.records[w], train);
      if (!err.empty()) {
        o.failure = "arena";
        o.detail = err;
        o.proc->kill();
        break;
      }
      o.timing_begin[w] = begin;
    } else if (name == "timing_end") {
      const auto w = ev.body.at("workload").get<std::size_t>();
      o.timing_end[w] = ev.t;
      o.last_work_t = ev.t;
      if (snap_phase) {
        // The output-rewrite defence, GPU-resident path: freeze the agent runner (it queues no more
        // GPU work), have the owner copy this phase's timed slots into its own memory, thaw. GPU
        // work the agent queued before the freeze that runs ahead of the owner's copy delays it:
        // that delay (beyond the copy's own time) is charged to the phase's window.
        std::string err;
        const auto tr = o.trains.find(w);
        const int train = tr != o.trains.end() && !tr->second.empty() ? tr->second.back().calls : 0;  // taken at train_end already
        const auto [frozen, late] =
            frozen_snapshot(w, train, train + o.warmups[w] + ev.body.at("samples").get<int>(), err);
        if (late < 0) {
          o.failure = "snapshot";
          o.detail = err;
          o.proc->kill();
          break;
        }
        if (frozen >= 0) o.timing_end[w] = frozen;
        o.timing_end[w] += late;
        o.snapshot_late_s[w] = late;
      } else if (snapshot != nullptr && o.proc->output_fd() >= 0) {
        // The output-rewrite defence: freeze the runner, take this phase's outputs (every timed
        // call it announced), let it go on. Its window closes at the freeze (anything it did before
        // is inside it); its tail starts at the thaw (the snapshot is the parent's own time).
        const double frozen = o.proc->freeze(std::chrono::milliseconds(2000));
        struct Thaw {
          RunOutcome& o;
          ~Thaw() {
            const double t = o.proc->thaw();
            o.last_work_t = std::max(o.last_work_t, t);
          }
        } thaw{o};
        if (frozen >= 0) o.timing_end[w] = frozen;
        const int calls = o.warmups[w] + ev.body.at("samples").get<int>();  // frames checked its count
        const auto t_snap = Clock::now();
        std::vector<const Slot*> todo;
        for (const Slot& s : snapshot->slots)
          if (s.workload == w && s.seed_index < 0 && -1 - s.seed_index < calls) todo.push_back(&s);
        std::vector<std::uint64_t> hashes(todo.size());
        std::vector<std::string> errs(todo.size());
        std::atomic<std::size_t> next{0};
        auto hash_some = [&] {
          for (std::size_t i = next++; i < todo.size(); i = next++) {
            try {
              hashes[i] = keyed_hash_fd(o.proc->output_fd(), todo[i]->offset, todo[i]->bytes, o.hash_key);
            } catch (const std::exception& e) {  // its output file shrunk (it may ftruncate its end)
              errs[i] = e.what();
            }
          }
        };
        std::vector<std::thread> helpers;
        const std::size_t nthreads = std::min<std::size_t>({todo.size(), 4, std::max(1u, std::thread::hardware_concurrency())});
        for (std::size_t t = 1; t < nthreads; ++t) helpers.emplace_back(hash_some);
        hash_some();
        for (auto& t : helpers) t.join();
        for (std::size_t i = 0; i < todo.size(); ++i) {
          if (!errs[i].empty() && o.snapshot_error.empty()) o.snapshot_error = errs[i];
          o.phase_hashes[{todo[i]->workload, todo[i]->seed_index, todo[i]->arg}] = hashes[i];
        }
        o.frozen_s += since(t_snap);
      }
    } else if (name == "result") {
      try {
        o.result = result_from_json(ev.body);
        o.result_t = ev.t;
        have_result = true;
        // A staying owner's ok result: it lives on for its next job (no EOF, no reap here).
        if (job.stay && o.result->status == Outcome::ok) {
          take_frames();
          o.run_s = since(t1);
          o.stayed = true;
          return o;
        }
      } catch (const WireError& e) {
        o.failure = "malformed";
        o.detail = std::string("malformed result: ") + e.what();
        o.proc->kill();
        break;
      }
      take_frames();
      if (on_result) on_result(o);
    }
  }
  o.exit = o.proc->wait();
  o.run_s = since(t1);  // to the reap: the process, its CUDA context and any work it left, are gone
  o.timeline.emplace_back("reaped", o.run_s);
  take_frames();
  if (o.failure.empty() && !o.result) {
    o.failure = "no_result";
    o.detail = "the runner " + o.exit.describe() + " without a result";
  }
  return o;
}

std::vector<char> read_slot(int fd, const Slot& s) {
  std::vector<char> buf(s.bytes);
  std::size_t done = 0;
  while (done < s.bytes) {
    const ssize_t n = ::pread(fd, buf.data() + done, s.bytes - done, static_cast<off_t>(s.offset + done));
    if (n <= 0) throw std::runtime_error("output file shorter than its layout");
    done += static_cast<std::size_t>(n);
  }
  return buf;
}

bool returns_int(const tasks::Task& task) {
  const auto pos = task.signature.find(task.entry);
  const std::string prefix = task.signature.substr(0, pos == std::string::npos ? 0 : pos);
  return prefix.find("void") == std::string::npos;
}

std::string sanitize(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return s;
}

}  // namespace

Job make_job(const tasks::Task& task, const std::vector<const tasks::Workload*>& workloads,
             const std::vector<std::uint64_t>& seeds, const std::string& so_path, const TimingSpec& timing) {
  Job job;
  job.so_path = so_path;
  job.entry = task.entry;
  job.returns_int = returns_int(task);
  job.seeds = seeds;
  job.timing = timing;
  for (const tasks::Workload* w : workloads) {
    WireWorkload ww;
    ww.name = w->name;
    ww.time = w->timed;  // an untimed workload is checked for correctness only (class 9)
    for (const tasks::Arg& a : task.args) {
      WireArg wa;
      const auto dt = parse_dtype(tasks::to_string(task.dtype_of(a, *w)));
      if (!dt) throw WireError("bad_job", "unknown dtype of argument " + a.name);
      wa.dtype = *dt;
      try {
        if (a.role == tasks::Role::scalar) {
          wa.role = ArgRole::scalar;
          try {
            wa.scalar = static_cast<double>(tasks::eval_size_expr(a.value, w->sizes));
          } catch (const std::exception&) {
            wa.scalar = std::stod(a.value);  // a float literal
          }
        } else {
          wa.role = a.role == tasks::Role::input ? ArgRole::input : ArgRole::output;
          std::uint64_t count = 1;
          for (const auto& dim : a.shape) {
            const std::int64_t d = tasks::eval_size_expr(dim, w->sizes);
            if (d <= 0) throw WireError("bad_job", "argument " + a.name + " has a non-positive dimension");
            count *= static_cast<std::uint64_t>(d);
          }
          wa.count = count;
          if (wa.role == ArgRole::input) wa.gen = parse_generator(task.init_of(a, *w), w->sizes, w->params);
        }
      } catch (const WireError&) {
        throw;
      } catch (const std::exception& e) {
        throw WireError("bad_job", "workload " + w->name + ", argument " + a.name + ": " + e.what());
      }
      ww.args.push_back(wa);
    }
    job.workloads.push_back(std::move(ww));
  }
  return job;
}

bool claimed_time_implausible(const TimingResult& claimed, double phase_wall_s, double sample_overhead_s,
                              double factor, double slack_s, double fixed_slack_s, double* outside_s,
                              double room_wall_s) {
  if (claimed.samples <= 0 || !(claimed.median_s > 0)) return true;
  const double n = claimed.samples;
  const double unexplained = phase_wall_s - n * sample_overhead_s;  // time the calls themselves took
  if (outside_s != nullptr) *outside_s = std::max(0.0, unexplained / n);
  // More samples than the parent's clock had room for, even for empty calls. The overhead is the
  // reference runner's, which exceeded the candidate's by more than 50 % on the H200 (2026-12-01:
  // 256 MiB hand-over copies into a fresh memfd), so only a claim of 3x the room is refused here.
  if (n * sample_overhead_s > (room_wall_s >= 0 ? room_wall_s : phase_wall_s) * 3 + 1e-3) return true;
  const double mean = claimed.mean_s > 0 ? claimed.mean_s : claimed.median_s;
  return unexplained > factor * n * mean + n * slack_s + fixed_slack_s;
}

double candidate_budget_s(const EvalConfig& cfg, const Job& job, std::optional<double> reference_s) {
  if (!reference_s) return cfg.job_timeout_s;
  double timed = 0;
  for (const auto& w : job.workloads)
    if (job.timing.enabled && w.time) timed += 1;
  const double budget = cfg.budget_factor * *reference_s + cfg.budget_constant_s + timed * 2 * job.timing.time_cap_s;
  return std::min(cfg.job_timeout_s, budget);
}

double release_phase(RunnerProcess& runner, std::size_t w, std::uint64_t key, int warmup, int calls,
                     const FillPhase& fill, std::string& error, int record, int from) {
  if (!fill) return runner.send_line(phase_line(w, key, warmup, record));
  // GPU-resident with an input arena: the trusted owner makes every timed call's inputs from the
  // key; the agent runner gets a keyless go line, only once they exist (class 11).
  if (!fill(w, key, calls, from, error)) {
    if (error.empty()) error = "the owner did not make the phase's inputs";
    return -1;
  }
  return runner.send_line(phase_line(w, std::nullopt, warmup, record));
}

int train_calls_for(const EvalConfig& cfg, const WireWorkload& wl) {
  if (!cfg.train || !wl.time) return 0;
  const std::uint64_t bytes = std::max<std::uint64_t>(call_bytes(wl), 1);
  // train_bytes of calls, or train_window_calls of them when they fit in train_max_bytes (the
  // room's own cap, not the samples' batch: a long enough window for calls of hundreds of MiB).
  const std::uint64_t want = std::max<std::uint64_t>((cfg.train_bytes + bytes - 1) / bytes,
                                                     static_cast<std::uint64_t>(std::max(cfg.train_window_calls, 0)));
  const std::uint64_t most = std::max<std::uint64_t>(2, std::max(cfg.timing.batch_bytes, cfg.train_max_bytes) / bytes);
  const std::uint64_t lo = static_cast<std::uint64_t>(std::max(cfg.train_min_calls, 2));
  const std::uint64_t hi = static_cast<std::uint64_t>(std::max(cfg.train_max_calls, 2));
  return static_cast<int>(std::min({std::max(want, lo), hi, most}));
}

std::uint64_t resident_job_bytes(const Job& job) {
  const Layout layout = output_layout(job);
  return 2 * layout.total_bytes + train_snaps(job, layout).extra + input_arena_bytes(job);
}

void assign_splits(const EvalConfig& cfg, Job& job) {
  for (auto& wl : job.workloads)
    wl.split = cfg.train_split && wl.train >= 2 * std::max(1, cfg.train_min_calls) ? wl.train / 2 : 0;
}

bool fit_trains(const EvalConfig& cfg, Job& job, std::uint64_t budget) {
  const int least = std::max(cfg.train_min_calls, 2);
  // The workload whose train holds the most output bytes (all its trains' copies counted),
  // shortened by an eighth (at least one call), not below `floor`; false when none can be.
  auto shorten = [&](int floor) {
    WireWorkload* longest = nullptr;
    std::uint64_t most = 0;
    for (auto& wl : job.workloads) {
      const std::uint64_t bytes = static_cast<std::uint64_t>(std::max(wl.train, 0)) * static_cast<std::uint64_t>(std::max(wl.trains, 1)) *
                                  std::max<std::uint64_t>(output_bytes(wl), 1);
      if (wl.train > floor && bytes > most) {
        most = bytes;
        longest = &wl;
      }
    }
    if (longest == nullptr) return false;
    longest->train = std::max(floor, longest->train - std::max(1, longest->train / 8));
    return true;
  };
  // 1. Shorter rooms, down to train_keep_calls (several trains of fewer calls spread less than one
  // long train: EvalConfig::train_count).
  const int keep = std::max(least, cfg.train_keep_calls);
  while (resident_job_bytes(job) > budget)
    if (!shorten(keep)) break;
  // 2. Fewer trains (each earlier train holds a copy of its room): the workload whose copies hold
  // the most bytes loses one, until the job fits or every workload has one train.
  while (resident_job_bytes(job) > budget) {
    WireWorkload* most_copies = nullptr;
    std::uint64_t most = 0;
    for (auto& wl : job.workloads) {
      const std::uint64_t bytes = static_cast<std::uint64_t>(std::max(wl.trains - 1, 0)) *
                                  static_cast<std::uint64_t>(std::max(wl.train, 0)) * std::max<std::uint64_t>(output_bytes(wl), 1);
      if (wl.trains > 1 && bytes > most) {
        most = bytes;
        most_copies = &wl;
      }
    }
    if (most_copies == nullptr) break;
    --most_copies->trains;
  }
  // 3. Shorter rooms, down to train_min_calls.
  while (resident_job_bytes(job) > budget)
    if (!shorten(least)) return false;
  return true;
}

double split_train_time_s(double synced_s, double queued_s, double sync_call_s, const ParentBound& bound,
                          bool* floored) {
  const double cost = std::min(std::max(0.0, sync_call_s), bound.split_sync_cap * std::max(0.0, synced_s));
  const double floor = (1 - bound.split_eps) * std::max(0.0, synced_s - cost);
  if (floored != nullptr) *floored = floor > queued_s;
  return std::max(queued_s, floor);
}

bool split_train_disturbed(double synced_s, double queued_s, double sync_call_s, const ParentBound& bound,
                           double band) {
  if (!(synced_s > 0) || !(queued_s > 0) || !std::isfinite(synced_s) || !std::isfinite(queued_s)) return false;
  const double cost = std::max(0.0, sync_call_s);
  if (cost > bound.split_sync_cap * synced_s) return false;  // short calls: the capped floor is the rule
  const double rest = synced_s - cost;
  return (1 - bound.split_eps) * rest > (1 + band) * queued_s || queued_s > (1 + band) * rest;
}

bool split_train_retry(double synced_s, double queued_s, double sync_call_s, double previous_s,
                       const ParentBound& bound, double band) {
  if (!split_train_disturbed(synced_s, queued_s, sync_call_s, bound, band)) return false;
  if (!(previous_s > 0)) return true;
  const double s = split_train_time_s(synced_s, queued_s, sync_call_s, bound);
  return std::abs(s - previous_s) > band * previous_s;  // within the band: reproduced, kept
}

double train_time_s(double window_s, int calls, double fill_took_s, double fill_ref_s, const ParentBound& bound,
                    double* charge_s) {
  double charge = 0;
  if (std::isfinite(fill_took_s) && std::isfinite(fill_ref_s))
    charge = std::max(0.0, fill_took_s - (1 + bound.fill_rel_slack) * std::max(0.0, fill_ref_s) - bound.fill_allow_s);
  if (charge_s != nullptr) *charge_s = charge;
  if (calls <= 0 || !std::isfinite(window_s)) return 0;
  return std::max(0.0, window_s + charge) / calls;
}

double snapshot_charge_s(double took_s, double copy_s, const ParentBound& bound) {
  if (!std::isfinite(took_s) || !std::isfinite(copy_s)) return 0;
  return std::max(0.0, took_s - std::max(0.0, copy_s) - bound.snapshot_allow_s);
}

double tail_allowance_s(double reference_exit_s, const ParentBound& bound) {
  return bound.tail_fixed_s + bound.tail_factor * std::max(0.0, reference_exit_s);
}

double bound_slack_s(int calls, double per_call_overhead_s, double batch_s, const ParentBound& bound) {
  return bound.fixed_slack_s + calls * (bound.overhead_rel_slack * per_call_overhead_s + bound.call_slack_s) +
         bound.batch_rel_slack * batch_s;
}

double flag_below_fraction(int calls, double window_s, double per_call_overhead_s, double batch_s,
                           const ParentBound& bound) {
  const double real = window_s - calls * per_call_overhead_s - batch_s;
  if (!(real > 0)) return 0;
  return std::max(0.0, (bound.fraction * real - bound_slack_s(calls, per_call_overhead_s, batch_s, bound)) / real);
}

double parent_floor_per_call_s(int calls, double window_s, double per_call_overhead_s, double batch_s, const ParentBound& bound) {
  if (calls <= 0) return 0;
  const double real = window_s - calls * per_call_overhead_s - batch_s;
  const double floor = (bound.fraction * real - bound_slack_s(calls, per_call_overhead_s, batch_s, bound)) / calls;
  return std::isfinite(floor) ? std::max(0.0, floor) : 0;
}

bool claim_below_parent_clock(const TimingResult& claimed, double window_s, double per_call_overhead_s, double batch_s,
                              const ParentBound& bound, double* unexplained_s) {
  if (claimed.samples <= 0 || !(claimed.median_s > 0) || !(window_s >= 0) || !(batch_s >= 0)) return true;
  const double n = claimed.samples;
  const double mean = claimed.mean_s > 0 ? claimed.mean_s : claimed.median_s;
  // What the calls took, by the parent's clock: the window less the trusted batch and per-call overheads.
  const double real = window_s - n * per_call_overhead_s - batch_s;
  const double slack = bound_slack_s(claimed.samples, per_call_overhead_s, batch_s, bound);
  const double excess = bound.fraction * real - slack - n * mean;
  if (unexplained_s != nullptr) *unexplained_s = std::max(0.0, excess);
  return excess > 0;
}

struct Evaluator::Gpu {
  std::mutex mu;  // one evaluation per GPU at a time
  std::unique_ptr<RunnerPool> agent, trusted;
  // GPU-resident: the owner that stayed after its last evaluation (EvalConfig::owner_reuse), the
  // evaluations it has served, and the last owner end (result to reap) measured on this GPU.
  // Under `mu`.
  std::unique_ptr<RunnerProcess> warm_owner;
  int owner_jobs = 0;
  double last_owner_end_s = -1;
};

namespace {
// Bytes waiting on a socket, read and dropped (a warm owner's slots socket must hold none: a
// reply left from its last job would be read as the next job's).
std::size_t drain_socket(int fd) {
  std::size_t total = 0;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && total == 0 ? 1 : total;
    total += static_cast<std::size_t>(n);
  }
}
}  // namespace

std::unique_lock<std::mutex> Evaluator::lock_gpu(int gpu) {
  if (gpu < 0 || static_cast<std::size_t>(gpu) >= per_gpu_.size()) throw std::out_of_range("no GPU " + std::to_string(gpu));
  return std::unique_lock<std::mutex>(per_gpu_[static_cast<std::size_t>(gpu)]->mu);
}

Evaluator::Evaluator(EvalConfig config) : config_(std::move(config)) {
  config_.runner_path = locate_runner(config_.runner_path);  // runner_path.hpp: where it is looked for
  if (config_.state_dir.empty()) throw std::runtime_error("EvalConfig.state_dir is required");
  std::filesystem::create_directories(config_.state_dir);
  if (config_.seeds < 1) config_.seeds = 1;

  // Probe: a runner lists the GPUs (this process never touches CUDA).
  SpawnSpec probe{config_.runner_path, Mode::probe, -1, false};
  auto p = RunnerProcess::start(probe);
  const auto ready = p->wait_ready(ms(config_.ready_timeout_s));
  if (!ready) {
    probe_error_ = p->error() + (p->output().empty() ? "" : ": " + tail(p->output(), 500));
  } else {
    probe_error_ = ready->value("error", "");
    try {
      for (const auto& d : ready->at("devices")) gpus_.push_back(device_from_json(d));
    } catch (const std::exception& e) {
      probe_error_ = std::string("bad probe answer: ") + e.what();
      gpus_.clear();
    }
  }
  p->wait();
  for (int i = 0; i < gpu_count(); ++i) {
    auto g = std::make_unique<Gpu>();
    g->agent = std::make_unique<RunnerPool>(SpawnSpec{config_.runner_path, Mode::agent, i, config_.isolate},
                                            config_.agent_pool_size);
    g->trusted = std::make_unique<RunnerPool>(SpawnSpec{config_.runner_path, Mode::trusted, i, config_.isolate},
                                              config_.trusted_pool_size);
    per_gpu_.push_back(std::move(g));
  }
}

Evaluator::~Evaluator() = default;

std::filesystem::path Evaluator::build_trusted(const tasks::Task& task, const std::filesystem::path& cu) {
  std::lock_guard<std::mutex> lock(build_mu_);
  const std::string key = task.content_hash + "|" + cu.string();
  if (auto it = built_.find(key); it != built_.end()) return it->second;
  std::filesystem::path so;
  if (config_.build_trusted) {
    so = config_.build_trusted(task, cu);
  } else {
    if (!compiler_) {
      sandbox::CompilerConfig cc = config_.compiler;
      if (cc.cache_dir.empty()) cc.cache_dir = config_.state_dir / "trusted-cache";
      if (cc.scratch_dir.empty()) cc.scratch_dir = config_.state_dir / "trusted-scratch";
      std::filesystem::create_directories(cc.cache_dir);
      std::filesystem::create_directories(cc.scratch_dir);
      compiler_ = std::make_unique<sandbox::Compiler>(cc);
    }
    sandbox::CompileRequest req;
    req.files[task.main_file] = read_text(cu);
    req.main_file = task.main_file;
    req.flags = task.compile_flags;
    const auto out = compiler_->compile(req);
    if (!out.ok) throw std::runtime_error("trusted build of " + cu.string() + " failed: " + tail(out.log, 2000));
    so = out.artifact;
  }
  built_[key] = so;
  return so;
}

bool flag_needs_confirmation(const EvalResult& r) {
  if (r.status != Outcome::flagged) return false;
  for (const auto& f : r.flags)
    if (f != "time_below_outside_bound" && f != "tail_beyond_bound") return false;
  return !r.flags.empty();
}

EvalResult Evaluator::evaluate(const EvalRequest& req) {
  EvalResult res = evaluate_once(req);
  for (int retry = 0; retry < config_.clock_flag_retries && flag_needs_confirmation(res); ++retry) {
    const std::string first = res.message;
    const double spent = res.phases.total_s;
    res = evaluate_once(req);
    res.retried_flag = first;
    res.phases.total_s += spent;
  }
  return res;
}

EvalResult Evaluator::evaluate_once(const EvalRequest& req) {
  const auto t_start = Clock::now();
  EvalResult res;
  res.gpu = req.gpu;
  if (req.task == nullptr) {
    res.status = Outcome::bad_request;
    res.message = "no task";
    return res;
  }
  if (gpu_count() == 0) {
    res.status = Outcome::no_gpu;
    res.message = "no GPU on this host" + (probe_error_.empty() ? "" : " (" + probe_error_ + ")");
    return res;
  }
  if (req.gpu < 0 || req.gpu >= gpu_count()) {
    res.status = Outcome::bad_request;
    res.message = "no GPU with index " + std::to_string(req.gpu);
    return res;
  }
  res.gpu_name = gpus_[static_cast<std::size_t>(req.gpu)].name;
  const tasks::Task& task = *req.task;
  std::vector<const tasks::Workload*> workloads;
  for (const auto& w : task.workloads)
    if (req.workloads == WorkloadSet::all || w.visible) workloads.push_back(&w);

  // Secret seeds, fresh for every evaluation.
  std::random_device rd;
  std::vector<std::uint64_t> seeds;
  const int nseeds = req.seeds > 0 ? req.seeds : config_.seeds;
  for (int i = 0; i < nseeds; ++i) seeds.push_back((static_cast<std::uint64_t>(rd()) << 32) ^ rd());

  Job cand_job, ref_job;
  std::filesystem::path ref_so;
  const std::string budget_key = task.content_hash + (req.workloads == WorkloadSet::all ? "|all" : "|visible") +
                                 (req.timing ? "|timed" : "|untimed") + "|" + std::to_string(nseeds);
  try {
    TimingSpec timing = config_.timing;
    timing.enabled = req.timing;
    cand_job = make_job(task, workloads, seeds, req.so_path.string(), timing);
    // The train (class 3): GPU-resident agent-mode evaluations only; the owner's job keeps the
    // count too (the same slot layout and arena).
    if (config_.gpu_resident && !req.trusted && req.timing) {
      for (auto& wl : cand_job.workloads) {
        wl.train = train_calls_for(config_, wl);
        wl.trains = wl.train > 0 ? std::clamp(config_.train_count, 1, 16) : 1;
      }
      const std::uint64_t memory = gpus_[static_cast<std::size_t>(req.gpu)].memory_bytes;
      const std::uint64_t budget = config_.train_job_bytes > 0 ? config_.train_job_bytes
                                   : memory > 0 ? static_cast<std::uint64_t>(config_.train_job_fraction * static_cast<double>(memory))
                                                : std::numeric_limits<std::uint64_t>::max();
      fit_trains(config_, cand_job, budget);  // what still does not fit fails at the owner's allocation, as before
      // The split train: half the room synced after each call, half back to back (each half at
      // least train_min_calls).
      assign_splits(config_, cand_job);
    }
    ref_so = build_trusted(task, task.reference_path());
    ref_job = cand_job;
    ref_job.so_path = ref_so.string();
    ref_job.timing.enabled = false;
  } catch (const WireError& e) {
    res.status = Outcome::internal_error;
    res.message = "task cannot be evaluated: " + std::string(e.what());
    return res;
  } catch (const std::exception& e) {
    res.status = Outcome::internal_error;
    res.message = e.what();
    return res;
  }
  std::vector<std::string> hide;
  for (const auto& p : config_.hidden_paths) hide.push_back(p.string());
  hide.push_back(task.dir.string());
  hide.push_back(config_.state_dir.string());
  cand_job.hide_paths = hide;
  cand_job.record_launches = req.record_launches;
  cand_job.host_memory_bytes = config_.host_memory_bytes;
  // GPU-resident outputs (EvalConfig::gpu_resident): the trusted runner owns the candidate's output
  // slots on the GPU and compares them there once the candidate's result is in.
  const bool resident = config_.gpu_resident && !req.trusted;
  const ParentBound& bound = bound_for(resident);
  if (resident) {
    ref_job.gpu_slots = SlotsRole::owner;
    ref_job.timing = cand_job.timing;  // the same slot layout; an owner never times
    for (const auto& [dt, tol] : task.tolerances) ref_job.tolerances[dt] = Tolerance{tol.atol, tol.rtol};
    cand_job.gpu_slots = SlotsRole::user;
    if (req.timing) res.replayed_with = "reference.cu";  // untimed: nothing is replayed
    if (config_.replay_oracle && req.timing && std::filesystem::exists(task.expert_path(3))) {
      try {
        ref_job.oracle_so_path = build_trusted(task, task.expert_path(3)).string();
        res.replayed_with = "experts/L3.cu";
      } catch (const std::exception&) {
        ref_job.oracle_so_path.clear();  // the reference replays, as without the oracle
      }
    }
  }

  Gpu& g = *per_gpu_[static_cast<std::size_t>(req.gpu)];
  std::lock_guard<std::mutex> gpu_lock(g.mu);

  // 0. GPU-resident: the owner (a trusted runner, in its own thread here) allocates the slots and
  // exports them; its loop then waits for the "go" (the replay), sent once the candidate's result is in.
  RunOutcome ref;
  int slots_fd = -1;
  std::uint64_t slots_bytes = 0;
  int arena_fd = -1;  // the owner's input arena (class 11), when a workload is timed
  std::uint64_t arena_bytes = 0;
  struct OwnerExport {
    int slots_fd = -1;
    std::uint64_t slots_bytes = 0;
    int arena_fd = -1;
    std::uint64_t arena_bytes = 0;
  };
  std::promise<OwnerExport> slots_promise;
  std::unique_ptr<RunnerProcess> warm_owner;  // resident: the GPU's warm owner, handed to the owner's thread
  bool owner_was_warm = false;                // the owner that ran was the warm one (read after the join)
  std::promise<std::optional<json>> go_promise;
  bool go_sent = false;
  std::atomic<RunnerProcess*> owner_proc{nullptr};  // resident: the owner, while it waits for "go"
  std::thread owner;
  std::optional<Clock::time_point> go_at;  // when the owner's go (its replay) was sent
  auto send_go = [&](std::optional<json> go) {
    if (!owner.joinable() || go_sent) return;
    go_sent = true;
    go_at = Clock::now();
    go_promise.set_value(std::move(go));
  };
  auto release_owner = [&](std::optional<json> go) {
    if (!owner.joinable()) return;
    send_go(std::move(go));
    owner.join();
  };
  struct OwnerGuard {
    std::function<void()> f;
    ~OwnerGuard() { f(); }
  } owner_guard{[&] {
    release_owner(std::nullopt);
    if (slots_fd >= 0) ::close(slots_fd);
    if (arena_fd >= 0) ::close(arena_fd);
  }};
  // GPU-resident: no runner of this GPU starts CUDA while the candidate runs (the pools are held),
  // and each timed phase's key waits for start-ups already in flight (issue 15, item 6: on the
  // H200 the replacements' start-up overlapped the now short candidate's first timed phase).
  bool pools_held = false;
  auto release_pools = [&] {
    if (!pools_held) return;
    pools_held = false;
    g.agent->hold(false);
    g.trusted->hold(false);
  };
  struct PoolGuard {
    std::function<void()> f;
    ~PoolGuard() { f(); }
  } pool_guard{[&] { release_pools(); }};
  if (resident) {
    pools_held = true;
    g.agent->hold(true);
    g.trusted->hold(true);
    auto got_slots = std::make_shared<std::atomic<bool>>(false);
    auto go_future = go_promise.get_future().share();
    const double owner_budget = config_.job_timeout_s * 2;  // the candidate's run, then the reference's
    // The owner that stayed after the GPU's last evaluation, when it is still fit (else a pooled one).
    if (g.warm_owner && !g.warm_owner->spare_defect().empty()) g.warm_owner.reset();
    warm_owner = std::move(g.warm_owner);
    const int owner_job_no = warm_owner ? g.owner_jobs + 1 : 1;
    ref_job.stay = config_.owner_reuse > 1 && owner_job_no < config_.owner_reuse;
    owner = std::thread([&, got_slots, go_future, owner_job = ref_job] {
      const auto t = Clock::now();
      try {
        const SlotsHook on_slots = [&](RunnerProcess& proc, const Event& ev) {
          std::string err;
          const int fd = recv_fd(proc.slots_socket(), 10000, err);
          const auto bytes = ev.body.value("bytes", std::uint64_t{0});
          const auto abytes = ev.body.value("arena_bytes", std::uint64_t{0});
          const int afd = fd >= 0 && abytes > 0 ? recv_fd(proc.slots_socket(), 10000, err) : -1;
          owner_proc.store(&proc);  // the candidate's thread asks it for phase inputs and snapshots (below)
          res.phases.owner_export_s = since(t);
          got_slots->store(true);
          slots_promise.set_value({fd, bytes, afd, afd >= 0 ? abytes : 0});
          const std::optional<json> go = go_future.get();
          if (!go || fd < 0) {
            proc.kill();
            return;
          }
          proc.send_line(go->dump());
        };
        const bool warm = warm_owner != nullptr;
        ref = run_job(*g.trusted, owner_job, config_, owner_budget, on_slots, {}, {}, nullptr, {}, {}, {}, {},
                      std::move(warm_owner));
        owner_was_warm = warm;
        // A warm owner that did not say ready again: a pooled one instead (nothing was exported yet).
        if (warm && ref.failure == "not_ready" && !got_slots->load()) {
          owner_was_warm = false;
          ref = run_job(*g.trusted, owner_job, config_, owner_budget, on_slots);
        }
      } catch (const std::exception& e) {
        ref.failure = "not_ready";
        ref.detail = e.what();
      }
      res.phases.reference_s = since(t);
      if (!got_slots->load()) slots_promise.set_value({});
    });
    const OwnerExport slots = slots_promise.get_future().get();
    slots_fd = slots.slots_fd;
    slots_bytes = slots.slots_bytes;
    arena_fd = slots.arena_fd;
    arena_bytes = slots.arena_bytes;
    if (slots_fd < 0 || slots_bytes == 0 || (arena_fd < 0 && input_arena_bytes(ref_job) > 0)) {
      release_owner(std::nullopt);
      res.status = Outcome::internal_error;
      res.message = "the reference runner could not provide output slots: " +
                    (!ref.failure.empty() ? ref.failure + ": " + ref.detail
                     : ref.result ? ref.result->message : std::string("no descriptor"));
      return res;
    }
    cand_job.gpu_slots_bytes = slots_bytes;
    cand_job.input_arena_bytes = arena_bytes;
  }

  // GPU-resident: one request to the owner (on its stdin; the answer on its slots socket; the owner
  // waits for "go" meanwhile, blocked in its slots hook: only this thread talks to it until then):
  // the answer, or nothing and `error` (the owner gone, its own error, an answer about another
  // workload, a malformed line).
  auto ask_owner = [&](const std::string& line, const char* echo, std::size_t w, int timeout_ms,
                       const std::string& what, std::string& error, bool spin = false) -> std::optional<json> {
    RunnerProcess* op = owner_proc.load();
    if (op == nullptr) {
      error = "the owner runner is gone";
      return std::nullopt;
    }
    if (op->send_line(line) < 0) {
      error = "the owner runner does not take its " + what + " line";
      return std::nullopt;
    }
    std::string answer;
    if (!recv_line(op->slots_socket(), timeout_ms, answer, error, spin)) return std::nullopt;
    try {
      json r = json::parse(answer);
      if (!r.value("error", std::string()).empty()) {
        error = "the owner's " + what + " failed: " + r.at("error").get<std::string>();
        return std::nullopt;
      }
      if (r.at(echo).get<long long>() != static_cast<long long>(w)) {
        error = "the owner answered a " + what + " of another workload";
        return std::nullopt;
      }
      return r;
    } catch (const json::exception& e) {
      error = "malformed " + what + " reply: " + e.what();
      return std::nullopt;
    }
  };

  // GPU-resident: each timed phase's snapshot, taken by the owner.
  const SnapPhase snap_phase = [&](std::size_t w, int from, int calls, int train, std::string& error) -> double {
    const auto t0 = Clock::now();
    const auto r = ask_owner(snap_line(w, from, calls, train), "snapped", w, 10000, "snapshot", error, true);
    if (!r) return -1;
    const double took = since(t0);
    res.phases.snap_s += took;
    try {
      return snapshot_charge_s(took, r->at("copy_s").get<double>(), bound);
    } catch (const json::exception& e) {
      error = std::string("malformed snapshot reply: ") + e.what();
      return -1;
    }
  };

  // GPU-resident: each timed phase's inputs, made by the owner in its arena from the phase's key
  // (never sent to the agent runner), before the parent's go line opens the phase's window. A CSR
  // structure is host-built (about a second per 50 M nonzeros): a generous wait.
  std::map<std::size_t, std::vector<double>> owner_train_fill_s;  // the owner's own time of each train's fill (its reply)
  std::map<std::size_t, std::vector<double>> owner_sync_call_s;   // a split train's sync cost, measured by the owner at its fill
  const FillPhase fill_phase = [&](std::size_t w, std::uint64_t key, int calls, int from, std::string& error) -> bool {
    const auto t0 = Clock::now();
    const auto r = ask_owner(arena_fill_line(w, key, calls, from), "filled", w,
                             static_cast<int>(config_.job_timeout_s * 1000), "fill", error);
    res.phases.fill_s += since(t0);
    if (r && from == 0) owner_train_fill_s[w].push_back(r->value("took_s", since(t0)));
    if (r && from == 0 && r->contains("sync_call_s") && r->at("sync_call_s").is_number())
      owner_sync_call_s[w].push_back(r->at("sync_call_s").get<double>());
    return r.has_value();
  };

  // A disturbed split train (EvalConfig::train_retries): its halves on the parent's clock, raw (no
  // fill charge: the replay's fill is not known yet, and the charge is the same in both halves),
  // against the sync cost the owner measured at its fill. A
  // disagreement that the train's previous making reproduced (its time within the band of this
  // one's) is the kernel's own, not a stall: kept. When a train is discarded, so are its fill's
  // figures (the next fill's come in their place).
  std::map<std::size_t, std::vector<WorkloadEval::TrainEval>> retried_trains;
  const TrainRetry retry_train = [&](std::size_t w, const RunOutcome::Train& tr, int attempt) -> bool {
    if (!tr.mid || !tr.begin || !tr.end || tr.half_calls < 1 || tr.calls <= tr.half_calls) return false;
    auto& fills = owner_train_fill_s[w];
    auto& syncs = owner_sync_call_s[w];
    const WorkloadEval::TrainEval te =
        train_eval(tr, true, fills.empty() ? tr.fill_s.value_or(0.0) : fills.back(),
                   std::numeric_limits<double>::quiet_NaN(), syncs.empty() ? 0.0 : syncs.back(), bound);
    auto& gone = retried_trains[w];
    const double previous_s = attempt > 0 && !gone.empty() ? gone.back().s : 0.0;
    if (!split_train_retry(te.half_s, te.queued_s, te.sync_call_s, previous_s, bound, config_.train_retry_band)) return false;
    gone.push_back(te);
    if (!fills.empty()) fills.pop_back();
    if (!syncs.empty()) syncs.pop_back();
    return true;
  };

  // The owner's replay of every timed call the candidate made in each workload's phase: the key the
  // parent released to it, its warm-ups and the samples it announced (also set in ref_job).
  auto replay_of = [&](const RunOutcome& c) {
    json replay = json::array();
    for (std::size_t w = 0; w < ref_job.workloads.size(); ++w) {
      const auto key = c.keys.find(w);
      const auto n = c.announced_samples.find(w);
      const auto warm = c.warmups.find(w);
      if (key == c.keys.end() || n == c.announced_samples.end() || warm == c.warmups.end()) continue;
      const auto made = c.trains.find(w);
      const int train = made == c.trains.end() || made->second.empty() ? 0 : made->second.back().calls;
      const int calls = train + warm->second + n->second;
      if (calls <= 0) continue;
      ref_job.workloads[w].replay_key = key->second;
      ref_job.workloads[w].replay_samples = calls;  // the train, warm-ups and samples: every timed call is verified
      ref_job.workloads[w].replay_batch = train + warm->second + timed_slots(cand_job, w);  // the candidate's batch
      json entry = {{"workload", w}, {"key", key->second}, {"samples", calls},
                    {"batch", ref_job.workloads[w].replay_batch}, {"train", train}};
      // The earlier trains (trains > 1): each its own key and the calls it made.
      if (made != c.trains.end() && made->second.size() > 1) {
        json early = json::array();
        for (std::size_t t = 0; t + 1 < made->second.size(); ++t)
          early.push_back({{"key", made->second[t].key}, {"calls", made->second[t].calls}});
        entry["early_trains"] = early;
      }
      replay.push_back(entry);
    }
    return json{{"replay", replay}};
  };
  // GPU-resident: the owner's replay starts as soon as the candidate's (ok) result has arrived, while
  // the candidate's process and CUDA context are torn down (about 70 ms on the H200). What that
  // process could still do meanwhile cannot reach the verdict: its host code has ended, every timed
  // slot is compared from the owner's phase snapshot, and GPU work it left behind can only write
  // correctness slots, whose work is untimed. The tail bound still waits for its reap.
  // The pools are let go at the same moment: the candidate's timed phases are over, and its
  // replacement's CUDA start-up then runs beside its teardown and the replay instead of after the
  // reap (H200 05:17Z: the next evaluation's first key waited 72-79 ms for start-ups in flight).
  const OnResult early_replay = [&](const RunOutcome& c) {
    if (c.result && c.all_frames && c.failure.empty()) release_pools();  // (a forged early result: not)
    if (c.result && c.result->status == Outcome::ok && c.all_frames && c.failure.empty()) send_go(replay_of(c));
  };

  // 1. The candidate in a fresh runner (the parent releases each timed phase's key when it is due).
  // Host path: each timed phase's outputs are taken (hashed) when the phase ends, the runner frozen.
  const Layout cand_snapshot_layout = output_layout(cand_job);
  RunOutcome cand;
  try {
    const auto t = Clock::now();
    std::optional<double> known_reference;
    {
      std::lock_guard<std::mutex> lock(budget_mu_);
      if (auto it = reference_s_.find(budget_key); it != reference_s_.end()) known_reference = it->second;
    }
    cand = run_job(req.trusted ? *g.trusted : *g.agent, cand_job, config_,
                   candidate_budget_s(config_, cand_job, known_reference), {},
                   slots_fd < 0 ? std::vector<int>{} : arena_fd < 0 ? std::vector<int>{slots_fd} : std::vector<int>{slots_fd, arena_fd},
                   resident ? std::function<void()>([&] {
                     const auto t_wait = Clock::now();
                     const auto deadline = t_wait + ms(std::min(5.0, config_.ready_timeout_s));
                     g.agent->wait_started(deadline);
                     g.trusted->wait_started(deadline);
                     res.phases.start_wait_s += since(t_wait);
                   })
                            : std::function<void()>(),
                   resident ? nullptr : &cand_snapshot_layout, resident ? snap_phase : SnapPhase(),
                   resident && arena_fd >= 0 ? fill_phase : FillPhase(), resident ? early_replay : OnResult(),
                   resident && arena_fd >= 0 ? retry_train : TrainRetry());
    release_pools();
    if (slots_fd >= 0) {  // the candidate's runner has exited: its mapping is gone
      ::close(slots_fd);
      slots_fd = -1;
    }
    if (arena_fd >= 0) {
      ::close(arena_fd);
      arena_fd = -1;
    }
    res.phases.candidate_s = since(t) - cand.wait_ready_s;
    res.phases.candidate_frames = cand.timeline;
    res.phases.wait_ready_s = cand.wait_ready_s;
  } catch (const std::exception& e) {
    res.status = Outcome::internal_error;
    res.message = std::string("candidate runner: ") + e.what();
    return res;
  }
  if (!cand.timing_end.empty() && cand.eof_s >= 0) {
    double last_end = 0;
    for (const auto& [w, t] : cand.timing_end) last_end = std::max(last_end, t);
    // From the last timing_end (or the thaw after its snapshot) to the reap.
    res.phases.candidate_tail_s = std::max(0.0, cand.run_s - std::max(last_end, cand.last_work_t));
  }
  res.phases.snapshot_s = cand.frozen_s;
  res.runner_output = tail(cand.proc->output(), 4000);
  if (cand.proc->output_dropped() > 0)
    res.runner_output += "\n[" + std::to_string(cand.proc->output_dropped()) + " more bytes of output dropped]";
  res.flags = cand.protocol_flags;
  auto finish = [&](Outcome status, std::string message) {
    res.status = status;
    res.message = std::move(message);
    res.phases.total_s = since(t_start);
    return res;
  };

  // 3. How the candidate ended.
  if (cand.exit.signal == SIGSYS)
    return finish(Outcome::sandbox_violation, "the kernel's code made a forbidden system call (killed by the seccomp filter)");
  if (cand.failure == "not_ready") return finish(Outcome::internal_error, "candidate runner did not start: " + cand.detail);
  if (cand.failure == "snapshot") return finish(Outcome::internal_error, "a timed phase's output snapshot: " + cand.detail);
  if (cand.failure == "arena") return finish(Outcome::internal_error, "a timed phase's inputs in the owner's arena: " + cand.detail);
  if (cand.failure == "timeout") return finish(Outcome::timeout, cand.detail);
  if (cand.failure == "forged_frame") {
    res.flags.push_back("forged_result_channel");
    return finish(Outcome::flagged, cand.detail);
  }
  if (cand.failure == "malformed") {
    res.flags.push_back("forged_result_channel");
    return finish(Outcome::flagged, cand.detail);
  }
  if (cand.failure == "no_result") {
    std::string why = cand.detail;
    if (cand.exit.signal == SIGXFSZ) why += " (file size limit)";
    return finish(Outcome::runtime_error, why);
  }
  const RunnerResult& rr = *cand.result;
  for (const auto& f : rr.flags) res.flags.push_back(f);
  res.launches_error = rr.launches_error;
  res.input_arena = rr.input_arena;
  if (rr.status == Outcome::flagged) {
    res.flags.push_back(rr.message.substr(0, rr.message.find(':')));
    return finish(Outcome::flagged, rr.message);
  }
  const std::string runner_status(sandbox::to_string(rr.status));
  if (rr.status != Outcome::ok) {
    const Outcome verdict = sandbox::evaluator_outcome_of_runner(rr.status);
    // runtime_error, entry_error, load_error are the kernel's; any other runner failure is ours.
    if (verdict == Outcome::runtime_error) return finish(verdict, runner_status + ": " + rr.message);
    return finish(Outcome::internal_error, "runner " + runner_status + ": " + rr.message);
  }
  if (rr.workloads.size() != workloads.size() || cand.calls != workloads.size() * seeds.size() || !cand.all_frames) {
    res.flags.push_back("forged_result_channel");
    return finish(Outcome::flagged, "the runner's result does not list the workloads it was given");
  }

  // The calls the candidate's train made in workload w's phase (0: none).
  auto train_of = [&](std::size_t w) {
    const auto it = cand.trains.find(w);
    return it == cand.trains.end() || it->second.empty() ? 0 : it->second.back().calls;
  };
  // The calls of workload w's earlier trains (all but the last): compared by the owner too.
  auto early_train_calls = [&](std::size_t w) {
    int n = 0;
    const auto it = cand.trains.find(w);
    if (it != cand.trains.end())
      for (std::size_t t = 0; t + 1 < it->second.size(); ++t) n += it->second[t].calls;
    return n;
  };
  // Timed calls the candidate made in workload w's phase: the warm-ups its key asked for and the
  // samples it announced (-1: no phase).
  auto timed_calls = [&](std::size_t w) {
    const auto n = cand.announced_samples.find(w);
    const auto warm = cand.warmups.find(w);
    return n == cand.announced_samples.end() || warm == cand.warmups.end()
               ? -1
               : train_of(w) + warm->second + n->second;
  };
  // 2. The trusted reference with the same correctness seeds, and a replay of every timed call the
  // candidate made (the keys the parent released to it, its warm-ups and announced samples).
  const json replay = replay_of(cand);
  if (resident) {
    // The owner replays and compares (its go was sent when the candidate's result arrived, unless
    // that result was not ok: then now).
    const auto t = Clock::now();
    release_owner(replay);
    res.phases.reference_s = since(go_at.value_or(t));
    res.phases.reference_frames = ref.timeline;
  } else {
    try {
      const auto t = Clock::now();
      ref = run_job(*g.trusted, ref_job, config_, config_.job_timeout_s);
      res.phases.reference_s = since(t);
      res.phases.reference_frames = ref.timeline;
    } catch (const std::exception& e) {
      return finish(Outcome::internal_error, std::string("reference runner: ") + e.what());
    }
  }
  if (!ref.failure.empty() || !ref.result || ref.result->status != Outcome::ok ||
      ref.result->workloads.size() != ref_job.workloads.size()) {
    res.runner_output = tail(ref.proc ? ref.proc->output() : "", 4000);
    return finish(Outcome::internal_error,
                  "the task's reference failed: " +
                      (!ref.failure.empty() ? ref.failure + ": " + ref.detail
                       : ref.result ? std::string(sandbox::to_string(ref.result->status)) + ": " + ref.result->message
                                    : std::string("no result")));
  }
  // GPU-resident: an owner that stayed (its result ok) serves the GPU's next evaluation, unless its
  // slots socket holds anything (a reply never read). An owner reaped here gives its end (the
  // tail bound's reference when later owners stay).
  const bool owner_stayed = resident && ref.stayed && ref.proc != nullptr;
  if (resident) res.phases.owner_job = owner_was_warm ? g.owner_jobs + 1 : 1;
  if (owner_stayed) {
    if (drain_socket(ref.proc->slots_socket()) == 0) {
      g.owner_jobs = owner_was_warm ? g.owner_jobs + 1 : 1;
      g.warm_owner = std::move(ref.proc);
    }
  } else if (resident && ref.result_t >= 0 && ref.run_s > ref.result_t) {
    g.last_owner_end_s = ref.run_s - ref.result_t;
  }
  {
    // The next candidate of this task and request shape gets its GPU budget from this (class 15).
    std::lock_guard<std::mutex> lock(budget_mu_);
    double& known = reference_s_[budget_key];
    double reference_s = resident ? res.phases.reference_s : ref.run_s;  // an owner's run_s holds the candidate's
    // With the oracle the replay is the expert's, not the reference's: the budget stays what the
    // reference would have taken, each replayed call counted at the owner's mean correctness call
    // (the reference's, its inputs' making included).
    if (resident && !ref_job.oracle_so_path.empty() && ref.result)
      for (const auto& r : replay["replay"]) {
        const auto w = r.value("workload", std::size_t{0});
        if (w >= ref.result->workloads.size() || seeds.empty()) continue;
        double correctness_s = 0;
        for (const auto& [name, sec] : ref.result->workloads[w].replay_parts)
          if (name == "correctness") correctness_s = sec;
        int calls = r.value("samples", 0);
        for (const auto& e : r.value("early_trains", json::array())) calls += e.value("calls", 0);
        reference_s += calls * correctness_s / static_cast<double>(seeds.size());
      }
    known = std::max(known, reference_s);
  }

  // 4. Correctness: every output of every seed, and of every timed call (GPU-resident: compared by
  // the owner on the GPU; otherwise here, from both runners' output files).
  const auto t_cmp = Clock::now();
  if (resident) {
    const Layout cand_layout = output_layout(cand_job);
    bool all_ok = true;
    for (std::size_t w = 0; w < workloads.size(); ++w) {
      // The owner must have compared every slot the candidate filled: its seeds and announced samples.
      std::size_t expected = 0, per_call = 0;
      for (const Slot& s : cand_layout.slots) {
        if (s.workload != w) continue;
        if (s.seed_index == -1) ++per_call;
        if (s.seed_index < 0 && -1 - s.seed_index >= timed_calls(w)) continue;
        ++expected;
      }
      expected += per_call * static_cast<std::size_t>(early_train_calls(w));  // the earlier trains' calls
      const auto& rchecks = ref.result->workloads[w].checks;
      std::size_t compared = 0;  // the owner merges runs of timed slots' checks (TensorCheck::span)
      for (const TensorCheck& c : rchecks) compared += c.span;
      if (compared != expected)
        return finish(Outcome::internal_error, "the reference compared " + std::to_string(compared) + " outputs of " +
                                                   workloads[w]->name + ", expected " + std::to_string(expected));
      WorkloadEval we;
      we.name = workloads[w]->name;
      we.visible = workloads[w]->visible;
      we.correct = true;
      int failing_timed = 0;
      std::set<std::size_t> first_timed;  // outputs whose first timed check is kept (one per output:
                                          // each train's first call is a seed_index -1 too)
      for (TensorCheck c : rchecks) {
        if (c.arg_index >= task.args.size()) return finish(Outcome::internal_error, "the reference named no such output");
        c.arg = task.args[c.arg_index].name;
        const bool ok = c.ok();
        if (!ok) we.correct = false;
        const bool first = c.seed_index == -1 && first_timed.insert(c.arg_index).second;
        if (c.seed_index >= 0 || first || (!ok && failing_timed++ < 4)) we.checks.push_back(std::move(c));
      }
      we.timing = rr.workloads[w].timing;
      we.launches = rr.workloads[w].launches;
      all_ok = all_ok && we.correct;
      res.workloads.push_back(std::move(we));
    }
    res.phases.compare_s = 0;  // on the GPU, inside the reference phase
    if (!all_ok) {
      std::string which;
      for (const auto& we : res.workloads)
        if (!we.correct) which += (which.empty() ? "" : ", ") + we.name;
      return finish(Outcome::incorrect, "outputs differ from the reference on: " + which);
    }
  }
  bool all_correct = true;
  if (!resident) {
  const Layout cand_layout = output_layout(cand_job);
  const Layout ref_layout = output_layout(ref_job);
  try {
    // Every (candidate slot, reference slot) pair is compared on a few threads: large outputs times
    // (seeds + 1) take seconds on one core. Each thread holds two slots in memory at a time.
    struct Pair {
      const Slot* cand;
      const Slot* ref;
    };
    std::vector<Pair> pairs;
    for (const Slot& s : cand_layout.slots) {
      // timed call -1 - seed_index (warm-ups, then samples): only those the candidate made
      if (s.seed_index < 0 && -1 - s.seed_index >= timed_calls(s.workload)) continue;
      const Slot* rs = ref_layout.find(s.workload, s.seed_index, s.arg);
      if (rs == nullptr || rs->bytes != s.bytes) throw std::runtime_error("reference layout mismatch");
      pairs.push_back({&s, rs});
    }
    std::vector<TensorCheck> checks(pairs.size());
    std::vector<std::string> errors(pairs.size());
    std::atomic<bool> rewritten{false};  // a timed call's outputs changed after its phase ended
    std::atomic<std::size_t> next{0};
    auto worker = [&] {
      for (std::size_t i = next++; i < pairs.size(); i = next++) {
        try {
          const Slot& s = *pairs[i].cand;
          const auto got = read_slot(cand.proc->output_fd(), s);
          if (s.seed_index < 0) {  // a timed call: its outputs as they were when its phase ended
            const auto h = cand.phase_hashes.find({s.workload, s.seed_index, s.arg});
            if (h == cand.phase_hashes.end() || keyed_hash(got.data(), got.size(), cand.hash_key) != h->second) {
              rewritten = true;
              continue;
            }
          }
          const auto want = read_slot(ref.proc->output_fd(), *pairs[i].ref);
          double atol = 0, rtol = 0;
          if (auto it = task.tolerances.find(std::string(dtype_name(s.dtype))); it != task.tolerances.end()) {
            atol = it->second.atol;
            rtol = it->second.rtol;
          }
          checks[i] = compare_tensors(got.data(), want.data(), s.dtype, s.count, atol, rtol);
          checks[i].arg = task.args[s.arg].name;
          checks[i].seed_index = s.seed_index;
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      }
    };
    const std::size_t nthreads =
        std::min<std::size_t>({pairs.size(), kCompareThreads, std::max(1u, std::thread::hardware_concurrency())});
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < nthreads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
    if (rewritten || !cand.snapshot_error.empty()) {
      // Only the runner's hand-over writes a timed slot, and only inside its own phase: a change
      // afterwards is agent code fixing up outputs whose work no window held (issue 23).
      res.flags.push_back("outputs_rewritten");
      return finish(Outcome::flagged, cand.snapshot_error.empty()
                                          ? "a timed call's outputs changed after its phase had ended (work done "
                                            "outside the timed window)"
                                          : "a timed phase's outputs could not be read when it ended: " +
                                                cand.snapshot_error);
    }
    for (const auto& e : errors)
      if (!e.empty()) throw std::runtime_error(e);
    for (std::size_t w = 0; w < workloads.size(); ++w) {
      WorkloadEval we;
      we.name = workloads[w]->name;
      we.visible = workloads[w]->visible;
      we.correct = true;
      // Every check counts; the report lists the correctness seeds', the first timed sample's and at
      // most 4 failing timed samples' (a workload may have hundreds of verified timed calls).
      int failing_timed = 0;
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        if (pairs[i].cand->workload != w) continue;
        const bool ok = checks[i].ok();
        if (!ok) we.correct = false;
        const int seed_index = pairs[i].cand->seed_index;
        if (seed_index >= -1 || (!ok && failing_timed++ < 4)) we.checks.push_back(std::move(checks[i]));
      }
      we.timing = rr.workloads[w].timing;
      we.launches = rr.workloads[w].launches;
      all_correct = all_correct && we.correct;
      res.workloads.push_back(std::move(we));
    }
  } catch (const std::exception& e) {
    return finish(Outcome::internal_error, std::string("comparing outputs: ") + e.what());
  }
  res.phases.compare_s = since(t_cmp);
  }
  if (!all_correct) {
    std::string which;
    for (const auto& we : res.workloads)
      if (!we.correct) which += (which.empty() ? "" : ", ") + we.name;
    return finish(Outcome::incorrect, "outputs differ from the reference on: " + which);
  }

  // 5. Timing, bounded by the parent's clock.
  if (req.timing) {
    double log_sum = 0;
    int timed = 0;
    for (std::size_t w = 0; w < res.workloads.size(); ++w) {
      auto& we = res.workloads[w];
      if (!cand_job.workloads[w].time) {  // correctness only (`timed: false`): never timed, never weighed
        if (we.timing) {
          res.flags.push_back("forged_result_channel");
          return finish(Outcome::flagged, "the runner reported a timing for untimed workload " + we.name);
        }
        continue;
      }
      if (!we.timing) {
        res.flags.push_back("missing_timing");
        return finish(Outcome::flagged, "no timing for workload " + we.name);
      }
      const auto b = cand.timing_begin.find(w);
      const auto e = cand.timing_end.find(w);
      const auto announced = cand.announced_samples.find(w);
      if (b == cand.timing_begin.end() || e == cand.timing_end.end() || e->second < b->second ||
          we.timing->samples > config_.timing.max_samples || announced == cand.announced_samples.end() ||
          announced->second != we.timing->samples) {
        res.flags.push_back("forged_result_channel");
        return finish(Outcome::flagged, "timing of workload " + we.name + " does not match what the runner reported while running");
      }
      // The parent's window: its own write of the phase's key to the arrival of timing_end. It holds
      // the batch (every timed call's inputs and poisoned outputs, then the samples' hand-over; the
      // reference made and timed the same batch) and the warm-ups and samples, each with the empty
      // sample's trusted overhead (flush, syncs, bracket).
      const double per_call = ref.result->sample_overhead_s;
      const double batch = ref.result->workloads[w].batch_in_s + ref.result->workloads[w].batch_out_s;
      TimingResult all_calls = *we.timing;
      all_calls.samples = timed_calls(w) - train_of(w);  // warm-ups (drawn per phase) and samples
      const double window = e->second - b->second;
      double below = 0;
      we.window_s = window;
      we.call_overhead_s = per_call;
      we.batch_s = batch;
      we.calls = all_calls.samples;
      we.parent_call_s = (window - batch) / std::max(1, all_calls.samples) - per_call;
      we.flag_below_fraction = flag_below_fraction(all_calls.samples, window, per_call, batch, bound);
      // Both bounds allow the candidate's overheads to differ from the reference's by the bound's
      // relative slacks (two processes' flushes and batches differ by that much).
      we.runner_batch_s = rr.workloads[w].batch_in_s + rr.workloads[w].batch_out_s;
      we.replay_parts = ref.result->workloads[w].replay_parts;
      if (auto it = cand.snapshot_late_s.find(w); it != cand.snapshot_late_s.end()) we.snapshot_late_s = it->second;
      // The "room" test takes the whole window: a reference batch measured longer than the
      // candidate's window (H200, 2026-12-02 02:22Z) is the reference's slowness, not a forgery.
      const bool implausible = claimed_time_implausible(
          all_calls, window - batch * (1 + bound.batch_rel_slack), per_call, config_.flag_factor,
          config_.flag_slack_s + bound.overhead_rel_slack * per_call, config_.flag_fixed_slack_s, &we.outside_s,
          window);
      if (implausible || claim_below_parent_clock(all_calls, window, per_call, batch, bound, &below)) {
        res.flags.push_back("time_below_outside_bound");
        // Which bound fired, with its figures (a flag on an honest kernel must be diagnosable).
        char detail[256];
        if (implausible)
          std::snprintf(detail, sizeof detail,
                        "%d calls in a %.6f s window: %.3g s per call outside the runner's overhead, against a "
                        "claimed mean of %.3g s",
                        all_calls.samples, window, we.outside_s,
                        all_calls.mean_s > 0 ? all_calls.mean_s : all_calls.median_s);
        else
          std::snprintf(detail, sizeof detail, "%.6f s unexplained", below);
        return finish(Outcome::flagged, "claimed time of workload " + we.name +
                                            " is below what the parent's clock measured (" + detail + ")");
      }
      // The workload's time: the claimed median, raised to what the parent's clock guarantees per call.
      we.claimed_median_s = we.timing->median_s;
      const double bounded_mean = we.timing->mean_s > 0 ? we.timing->mean_s : we.timing->median_s;  // as the bounds take it
      we.median_floor_s = std::max(bound.median_of_mean * bounded_mean,
                                   parent_floor_per_call_s(all_calls.samples, window, per_call, batch, bound));
      we.timing->median_s = std::max(we.timing->median_s, we.median_floor_s);
      // With a train (class 3) the workload's time is the train's, on the parent's clock alone: the
      // sampled figures above are the runner's claims (bounded, reported, never the reward's).
      if (cand_job.workloads[w].train > 0) {
        const auto it = cand.trains.find(w);
        const auto own = owner_train_fill_s.find(w);
        const std::size_t due = static_cast<std::size_t>(std::max(1, cand_job.workloads[w].trains));
        bool matches = it != cand.trains.end() && it->second.size() == due;
        for (std::size_t t = 0; matches && t < it->second.size(); ++t) {
          const auto& tr = it->second[t];
          matches = tr.calls > 0 && tr.begin && tr.end && tr.fill_s && *tr.end >= *tr.begin;
        }
        if (!matches) {
          res.flags.push_back("forged_result_channel");
          return finish(Outcome::flagged, "the trains of workload " + we.name + " do not match what the runner reported while running");
        }
        we.train_fill_ref_s = ref.result->workloads[w].train_fill_s;
        if (const auto rt = retried_trains.find(w); rt != retried_trains.end()) we.retried_trains = rt->second;
        std::vector<double> times;
        for (std::size_t t = 0; t < it->second.size(); ++t) {
          const auto& tr = it->second[t];
          // The fill charge compares the owner's own time of the train's fill (GPU work by agent
          // code that time-slices with it lengthens it) with its replay of the same fill; the
          // parent's round trip is reported beside (its pipe hops hold no input generation: before
          // them the inputs do not exist, after them the window is open).
          const double fill_s = own != owner_train_fill_s.end() && t < own->second.size() ? own->second[t] : *tr.fill_s;
          // The split train: each half on the parent's clock (the fill's charge in both); the
          // time is the back-to-back half's, floored by the synced half's less the sync's cost
          // the owner measured right before the train (a missing one counts as 0: the floor's
          // highest). train_half is due in a split train (frames): without it, or with the halves
          // out of order, the run is flagged.
          const bool split = cand_job.workloads[w].split > 0;
          if (split && (!tr.mid || tr.half_calls < 1 || tr.half_calls >= tr.calls || *tr.mid < *tr.begin || *tr.end < *tr.mid)) {
            res.flags.push_back("forged_result_channel");
            return finish(Outcome::flagged, "the halves of workload " + we.name + "'s split train do not match its frames");
          }
          const auto sync = owner_sync_call_s.find(w);
          const double o_s = sync != owner_sync_call_s.end() && t < sync->second.size() ? sync->second[t] : 0.0;
          const WorkloadEval::TrainEval te = train_eval(tr, split, fill_s, we.train_fill_ref_s, o_s, bound);
          times.push_back(te.s);
          we.train_calls += te.calls;
          we.train_window_s += te.window_s;
          we.train_fill_s += te.fill_s;
          we.train_fill_roundtrip_s += *tr.fill_s;
          we.train_fill_charge_s += te.fill_charge_s;
          we.train_late_s += tr.late;
          we.train_claim_s += tr.claim_self_s;
          we.train_first_claim_s += tr.claim_first_s;
          we.trains.push_back(te);
        }
        // The median of the trains' times (each a window of its own work alone: fresh inputs that
        // did not exist before its fill, its outputs taken at its end and every one compared).
        std::sort(times.begin(), times.end());
        const std::size_t k = times.size();
        we.train_s = k % 2 == 1 ? times[k / 2] : 0.5 * (times[k / 2 - 1] + times[k / 2]);
        we.timing->median_s = we.train_s;
      }
      log_sum += std::log(std::max(we.timing->median_s, 1e-12));
      ++timed;
    }
    // The tail (issue 23 item 4): from the candidate's last call or timing_end to its reap, only the
    // runner's own end (SM clock, thread census, the result, CUDA teardown) is due. Agent code that
    // runs there (a timer signal's handler, say) does work no window holds: bounded by the
    // reference's own end (its result to its reap) and a constant.
    if (timed > 0 && cand.last_work_t >= 0 && ref.result_t >= 0) {
      res.phases.candidate_tail_s = std::max(0.0, cand.run_s - cand.last_work_t);
      res.phases.tail_allowed_s = tail_allowance_s(
          owner_stayed ? (g.last_owner_end_s >= 0 ? g.last_owner_end_s : bound.tail_reference_default_s) : ref.run_s - ref.result_t,
          bound);
      if (res.phases.candidate_tail_s > res.phases.tail_allowed_s) {
        res.flags.push_back("tail_beyond_bound");
        return finish(Outcome::flagged, "the candidate's runner took " + std::to_string(res.phases.candidate_tail_s) +
                                            " s from its last call to its exit (at most " +
                                            std::to_string(res.phases.tail_allowed_s) + " s allowed: work after the timed calls?)");
      }
    }
    if (timed > 0) res.time_s = std::exp(log_sum / timed);
  }
  return finish(Outcome::ok, "");
}

CopyBandwidth Evaluator::measure_copy_bandwidth(int gpu) {
  CopyBandwidth bw;
  if (gpu < 0 || gpu >= gpu_count()) {
    bw.error = "no GPU with index " + std::to_string(gpu);
    return bw;
  }
  Gpu& g = *per_gpu_[static_cast<std::size_t>(gpu)];
  std::lock_guard<std::mutex> gpu_lock(g.mu);
  auto p = RunnerProcess::start(SpawnSpec{config_.runner_path, Mode::bandwidth, gpu, false});
  const auto answer = p->wait_ready(ms(config_.ready_timeout_s + config_.job_timeout_s));
  if (!answer) {
    bw.error = p->error() + (p->output().empty() ? "" : ": " + tail(p->output(), 500));
  } else if (answer->contains("error")) {
    bw.error = answer->value("error", std::string("unknown error"));
  } else {
    try {
      bw.bytes_per_s = answer->at("bytes_per_s").get<double>();
      bw.copy_bytes = answer->at("copy_bytes").get<std::uint64_t>();
      bw.median_s = answer->at("median_s").get<double>();
      bw.min_s = answer->value("min_s", 0.0);
      bw.samples = answer->at("samples").get<int>();
      bw.ok = std::isfinite(bw.bytes_per_s) && bw.bytes_per_s > 0;
      if (!bw.ok) bw.error = "bandwidth out of range";
    } catch (const json::exception& e) {
      bw.error = std::string("malformed bandwidth answer: ") + e.what();
    }
  }
  p->wait();
  return bw;
}

CalibrationEntry Evaluator::calibrate(const tasks::Task& task, int gpu,
                                      const std::function<void(const std::string&)>& stage) {
  if (gpu < 0 || gpu >= gpu_count()) throw std::runtime_error("calibrate: no GPU with index " + std::to_string(gpu));
  const DeviceInfo& d = gpus_[static_cast<std::size_t>(gpu)];
  {
    // Preparation threads of several GPUs call this at once (env/prepare.hpp); the cache file has
    // its own lock, its creation this one.
    static std::mutex create_mu;
    std::lock_guard<std::mutex> lock(create_mu);
    if (!calibration_)
      calibration_ = std::make_unique<CalibrationCache>(config_.state_dir / "calibration" / (sanitize(d.name) + ".json"));
  }
  // The key carries the toolchain's version, which the trusted compiler knows once it exists: build
  // the reference first (needed anyway), or a fresh process would look up a key without it, miss
  // what an earlier run persisted, and calibrate again.
  if (config_.toolchain.empty() && !config_.build_trusted) build_trusted(task, task.reference_path());
  std::string toolchain = config_.toolchain;
  if (toolchain.empty() && compiler_) toolchain = compiler_->toolchain_version();
  const std::string driver = d.driver.empty() ? std::to_string(d.cuda_driver_version) : d.driver;
  // With the train (class 3) the experts are measured as an agent's kernel is (the GPU-resident
  // path, the train's time): the reward compares like with like. The key says which measure.
  const bool by_train = config_.train && config_.gpu_resident;
  // (Several trains per phase, their median: "|trainsN", so that a cache of single trains is not
  // taken; the split train, "|split": another measure; with disturbed trains made again, "|retryN".)
  const int trains = std::clamp(config_.train_count, 1, 16);
  const std::string retry = config_.train_split && config_.train_retries > 0 ? "|retry" + std::to_string(config_.train_retries) : "";
  const std::string measure = !by_train ? ""
                              : (trains == 1 ? "|train" : "|trains" + std::to_string(trains)) + (config_.train_split ? "|split" : "") + retry;
  const std::string key = CalibrationCache::key(d.name, driver, toolchain, task.content_hash + measure);
  if (auto hit = calibration_->find(key)) return *hit;

  auto time_of = [&](const std::filesystem::path& cu) {
    EvalRequest r;
    r.task = &task;
    r.so_path = build_trusted(task, cu);
    r.workloads = WorkloadSet::all;
    r.gpu = gpu;
    r.seeds = 1;
    r.trusted = !by_train;
    const EvalResult e = evaluate(r);
    if (!e.ok()) throw std::runtime_error("calibration of " + cu.filename().string() + ": " + std::string(sandbox::to_string(e.status)) + ": " + e.message);
    std::map<std::string, double> times;
    for (const auto& w : e.workloads)
      if (w.timing) times[w.name] = w.timing->median_s;
    return times;
  };
  CalibrationEntry entry;
  if (stage) stage("calibration: baseline");
  entry.baseline = time_of(task.baseline_path());
  for (int layer = 1; layer <= 3; ++layer)
    if (std::filesystem::exists(task.expert_path(layer))) {
      if (stage) stage("calibration: expert L" + std::to_string(layer));
      entry.experts[layer] = time_of(task.expert_path(layer));
    }
  entry.measured_at = now_iso();
  // The compiler exists now, so the key can carry its version when the config gave none.
  std::string final_toolchain = config_.toolchain;
  if (final_toolchain.empty() && compiler_) final_toolchain = compiler_->toolchain_version();
  calibration_->store(CalibrationCache::key(d.name, driver, final_toolchain, task.content_hash + measure), entry);
  return entry;
}

json WorkloadEval::to_json() const {
  json checks_j = json::array();
  for (const auto& c : checks) checks_j.push_back(c.to_json());
  json j = {{"name", name}, {"visible", visible}, {"correct", correct}, {"checks", checks_j}};
  if (timing) {
    j["timing"] = runner::to_json(*timing);
    j["outside_s"] = outside_s;
    j["window_s"] = window_s;
    j["call_overhead_s"] = call_overhead_s;
    j["batch_s"] = batch_s;
    j["calls"] = calls;
    j["parent_call_s"] = parent_call_s;
    j["flag_below_fraction"] = flag_below_fraction;
    j["median_floor_s"] = median_floor_s;
    j["claimed_median_s"] = claimed_median_s;
    j["runner_batch_s"] = runner_batch_s;
    j["snapshot_late_s"] = snapshot_late_s;
    if (train_calls > 0) {
      j["train_calls"] = train_calls;
      j["train_window_s"] = train_window_s;
      j["train_fill_charge_s"] = train_fill_charge_s;
      j["train_fill_s"] = train_fill_s;
      j["train_fill_roundtrip_s"] = train_fill_roundtrip_s;
      j["train_fill_ref_s"] = train_fill_ref_s;
      j["train_s"] = train_s;
      j["train_late_s"] = train_late_s;
      j["train_claim_s"] = train_claim_s;
      j["train_first_claim_s"] = train_first_claim_s;
      auto trains_json = [](const std::vector<TrainEval>& v) {
        json ts = json::array();
        for (const auto& t : v) {
          json tj{{"calls", t.calls}, {"window_s", t.window_s}, {"fill_s", t.fill_s},
                  {"fill_charge_s", t.fill_charge_s}, {"late_s", t.late_s}, {"s", t.s},
                  {"runner_cpu", t.runner_cpu}, {"parent_cpu", t.parent_cpu}};
          if (t.half_calls > 0) {  // the split train's halves
            tj["half_calls"] = t.half_calls;
            tj["half_s"] = t.half_s;
            tj["queued_s"] = t.queued_s;
            tj["sync_call_s"] = t.sync_call_s;
            tj["floored"] = t.floored;
          }
          ts.push_back(tj);
        }
        return ts;
      };
      j["trains"] = trains_json(trains);
      if (!retried_trains.empty()) j["retried_trains"] = trains_json(retried_trains);
    }
  }
  if (launches) {
    json ls = json::array();
    for (const auto& l : *launches) ls.push_back(runner::to_json(l));
    j["launches"] = ls;
  }
  return j;
}

namespace {
json frames_json(const std::vector<std::pair<std::string, double>>& frames) {
  json out = json::array();
  for (const auto& [name, t] : frames) out.push_back({name, t});
  return out;
}
}  // namespace

json EvalResult::to_json() const {
  json wls = json::array();
  for (const auto& w : workloads) wls.push_back(w.to_json());
  return {{"status", sandbox::to_string(status)},
          {"message", message},
          {"flags", flags},
          {"workloads", wls},
          {"time_s", time_s},
          {"gpu", gpu},
          {"gpu_name", gpu_name},
          {"phases",
           {{"reference_s", phases.reference_s}, {"wait_ready_s", phases.wait_ready_s},
            {"candidate_s", phases.candidate_s}, {"compare_s", phases.compare_s}, {"total_s", phases.total_s},
            {"candidate_tail_s", phases.candidate_tail_s},
            {"tail_allowed_s", phases.tail_allowed_s}, {"snapshot_s", phases.snapshot_s},
            {"owner_export_s", phases.owner_export_s}, {"fill_s", phases.fill_s}, {"snap_s", phases.snap_s},
            {"start_wait_s", phases.start_wait_s}, {"owner_job", phases.owner_job},
            {"candidate_frames", frames_json(phases.candidate_frames)},
            {"reference_frames", frames_json(phases.reference_frames)}}},
          {"runner_output", runner_output},
          {"launches_error", launches_error},
          {"retried_flag", retried_flag},
          {"replayed_with", replayed_with},
          {"input_arena", input_arena}};
}

}  // namespace d2k::runner
