// GPU evaluation figures (prints them; asserts nothing). On a GPU machine:
//   (d) time to ready: a fresh server (empty state dir) prepares the chosen tasks (trusted builds,
//       calibration) in the background; then a second server on the same state dir (persisted);
//   (a) timing stability: the vector_add L3 expert evaluated N times, each in a fresh runner:
//       per timed workload the time (the train's, on the resident path) and the runner's sampled median, each with its CV;
//   (b) one evaluate per task through the server (client round trip), cold (a compile-cache miss)
//       and cached (median of --runs-b hits), split into the phases the reply reports;
//   (c) evaluations per hour with S concurrent sessions (each of --sessions) on one GPU per task
//       of --throughput, half the sessions evaluating a new source each time (compile misses),
//       half the same source (hits), with the GPU's real busy fraction: runner GPU time from
//       `stats` (busy_s, timed_s) and NVML utilisation sampled by nvidia-smi every 200 ms.
//   CUDA_VISIBLE_DEVICES=0 build/bin/bench_gpu [--runs 20] [--runs-b 5] [--sessions 8,32,64]
//       [--seconds 30] [--tasks vector_add,softmax|all] [--throughput vector_add,softmax] [--only dabc]
//       [--train-gib G] (a: the train's room in GiB, EvalConfig::train_bytes)
//       [--train-calls N] [--train-max-gib G] (a: EvalConfig::train_window_calls, train_max_bytes)
//       [--no-train] (a: sampled medians, as without EvalConfig::train) [--no-prime] (a: EvalConfig::train_prime off)
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "bench/bench_args.hpp"
#include "bench/bench_stats.hpp"
#include "env/gpu_setup.hpp"
#include "env/log.hpp"
#include "env/server.hpp"
#include "protocol/client.hpp"
#include "sandbox/compiler.hpp"
#include "sandbox/eval/evaluator.hpp"

extern char** environ;

using namespace std::chrono;
namespace fs = std::filesystem;
using d2k::protocol::Value;

namespace {

using d2k::bench::median;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

double since(steady_clock::time_point t) { return duration<double>(steady_clock::now() - t).count(); }

// The host's NUMA nodes (their CPUs) and each NVIDIA GPU's node and local CPUs, from sysfs: what
// (a)'s per-run CPUs are read against.
std::string cpu_topology() {
  auto trim = [](std::string v) {
    while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
    return v;
  };
  std::string out;
  std::error_code ec;
  std::vector<fs::path> nodes;
  for (const auto& e : fs::directory_iterator("/sys/devices/system/node", ec))
    if (e.path().filename().string().rfind("node", 0) == 0 && fs::exists(e.path() / "cpulist")) nodes.push_back(e.path());
  std::sort(nodes.begin(), nodes.end());
  for (const auto& n : nodes)
    out += (out.empty() ? "" : ", ") + n.filename().string() + " cpus " + trim(read(n / "cpulist"));
  if (out.empty()) out = "no NUMA nodes in sysfs";
  for (const auto& e : fs::directory_iterator("/sys/bus/pci/devices", ec)) {
    if (trim(read(e.path() / "vendor")) != "0x10de" || trim(read(e.path() / "class")).rfind("0x0302", 0) != 0) continue;
    out += "; GPU " + e.path().filename().string() + " node " + trim(read(e.path() / "numa_node")) + " local cpus " +
           trim(read(e.path() / "local_cpulist"));
  }
  return out;
}

// nvidia-smi sampling utilization.gpu of one GPU every 200 ms, in a child process, until stop().
class NvmlSampler {
 public:
  explicit NvmlSampler(int gpu) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    const std::string index = std::to_string(gpu);
    const char* argv[] = {"nvidia-smi",
                          "--query-gpu=utilization.gpu",
                          "--format=csv,noheader,nounits",
                          "-i",
                          index.c_str(),
                          "-lms",
                          "200",
                          nullptr};
    if (::posix_spawnp(&pid_, "nvidia-smi", &fa, nullptr, const_cast<char* const*>(argv), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    if (pid_ < 0) {
      ::close(fds[0]);
      return;
    }
    reader_ = std::thread([this, fd = fds[0]] {
      std::string line;
      char buf[512];
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
        for (ssize_t i = 0; i < n; ++i) {
          if (buf[i] != '\n') {
            line += buf[i];
            continue;
          }
          char* end = nullptr;
          const double v = std::strtod(line.c_str(), &end);
          if (end != line.c_str()) {
            std::lock_guard lock(mu_);
            samples_.push_back(v);
          }
          line.clear();
        }
      ::close(fd);
    });
  }
  ~NvmlSampler() { stop(); }
  // Mean utilisation in percent and the sample count (0 samples: nvidia-smi missing).
  std::pair<double, std::size_t> stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (reader_.joinable()) reader_.join();
    std::lock_guard lock(mu_);
    double sum = 0;
    for (double v : samples_) sum += v;
    return {samples_.empty() ? 0 : sum / static_cast<double>(samples_.size()), samples_.size()};
  }

 private:
  pid_t pid_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::vector<double> samples_;
};

d2k::env::Config server_config(const fs::path& state, const fs::path& tasks_dir, const std::string& name) {
  d2k::env::Config cfg;
  cfg.endpoint = "ipc://" + (state / (name + ".sock")).string();
  cfg.tasks_dir = tasks_dir;
  cfg.state_dir = state;
  cfg.record = false;
  cfg.events_endpoint = "none";
  cfg.max_budget.max_evaluations = 1000000;
  cfg.max_budget.max_steps = 1000000;
  cfg.finalize();
  return cfg;
}

// A server on its own thread, with the GPU backend of its config.
struct BenchServer {
  BenchServer(const d2k::env::Config& cfg, std::string& note) {
    d2k::tasks::TaskSet set = d2k::tasks::load_tasks(cfg.tasks_dir);
    auto backend = d2k::env::make_gpu_backend(cfg, set, note);
    if (!backend) return;
    t0 = steady_clock::now();
    server = std::make_unique<d2k::env::Server>(cfg, std::move(set), backend);
    server->bind();
    loop = std::thread([this] { server->run(); });
  }
  ~BenchServer() {
    if (loop.joinable()) {
      server->request_stop();
      loop.join();
    }
  }
  // Seconds from construction until every GPU's preparation is done (polled through `stats`).
  double wait_ready(Value* last_stats) {
    d2k::Client c(server->endpoint());
    for (;;) {
      Value st = c.stats();
      bool done = true;
      for (const auto& g : st["gpus"]) done = done && g["preparation"].value("done", false);
      if (done) {
        if (last_stats) *last_stats = st;
        return since(t0);
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
  }
  steady_clock::time_point t0;
  std::unique_ptr<d2k::env::Server> server;
  std::thread loop;
};

// One session at L3 with the task's L3 expert (or the reference where there is none) as its kernel.
struct Session {
  std::string id, main_file, source;
};

Session open_session(d2k::Client& c, const d2k::tasks::Task& task, std::uint64_t seed) {
  Session s;
  s.main_file = task.main_file;
  s.source = read(fs::exists(task.expert_path(3)) ? task.expert_path(3) : task.reference_path());
  s.id =
      c.reset(task.id, 3, seed, {{"max_evaluations", 1000000}, {"max_steps", 1000000}})["session"].get<std::string>();
  return s;
}

void write_source(d2k::Client& c, const Session& s, const std::string& tag) {
  // A comment changes the source's hash, not its code: a compile-cache miss on demand.
  c.step(s.id, {{"type", "write_file"}, {"path", s.main_file}, {"content", s.source + "\n// " + tag + "\n"}});
}

std::string phases_text(const Value& last) {
  std::string out;
  char buf[96];
  if (last.contains("compile")) {
    std::snprintf(buf, sizeof buf, "compile %.3f s%s", last["compile"].value("seconds", 0.0),
                  last["compile"].value("cached", false) ? " (cache hit)" : "");
    out += buf;
  }
  if (last.contains("evaluation") && last["evaluation"].contains("phases"))
    for (const auto& [k, v] : last["evaluation"]["phases"].items())
      if (v.is_number()) {
        std::snprintf(buf, sizeof buf, ", %s %.3f", k.c_str(), v.get<double>());
        out += buf;
      }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 20, runs_b = 5;
  double seconds = 30, train_gib = 0, train_max_gib = 0;
  int train_calls_arg = 0, trains_arg = 0, train_queue = 1;
  bool no_train = false, no_prime = false, visible_a = false, no_split = false;
  int retries_arg = -1;
  std::string sessions_arg = "8,32,64", tasks_arg = "vector_add,softmax", throughput_arg = "vector_add,softmax",
              only = "dabc";
  d2k::bench::Args args("bench_gpu",
                        "GPU evaluation figures on one GPU (CUDA_VISIBLE_DEVICES=0); prints them, asserts nothing:\n"
                        "  (d) time to ready of a fresh server (trusted builds, calibration), then of one on the same state;\n"
                        "  (a) timing stability: the vector_add L3 expert evaluated --runs times, each in a fresh runner;\n"
                        "  (b) one evaluate per task through the server, cold and cached (median of --runs-b hits), in phases;\n"
                        "  (c) evaluations per hour at each --sessions count, half compile misses, with the GPU's busy fraction.\n"
                        "bench/README.md has the figures and the commands that made them.");
  args.option("--only", &only, "the parts to run, any of d, a, b, c");
  args.option("--runs", &runs, "(a) fresh runners");
  args.option("--runs-b", &runs_b, "(b) cached evaluations per task");
  args.option("--sessions", &sessions_arg, "(c) concurrent sessions, comma-separated counts");
  args.option("--seconds", &seconds, "(c) length of each throughput run");
  args.option("--tasks", &tasks_arg, "(b, d) task ids, comma-separated, or all");
  args.option("--throughput", &throughput_arg, "(c) task ids, comma-separated");
  args.option("--train-gib", &train_gib, "(a) the train's room in GiB (0: EvalConfig's default)");
  args.option("--train-calls", &train_calls_arg, "(a) calls of a train while they fit in its cap (EvalConfig::train_window_calls; 0: the default)");
  args.option("--train-max-gib", &train_max_gib, "(a) the train's cap in GiB (EvalConfig::train_max_bytes; 0: the default)");
  args.option("--trains", &trains_arg, "(a) trains per timed phase, their median the time (EvalConfig::train_count; 0: the default)");
  args.flag("--no-split", &no_split, "(a) EvalConfig::train_split off: the whole train with a device sync after every call");
  args.option("--retries", &retries_arg, "(a) disturbed split trains made again at most this often (EvalConfig::train_retries; 0: none; default: the config's)");
  args.option("--train-queue", &train_queue,
              "(a) measurement only: a whole train back to back (no split), this many in flight, one device sync after the last "
              "(EvalConfig::train_queue; 1: a sync after every call, the servers' train)");
  args.flag("--visible", &visible_a, "(a) the visible workloads only (as an agent's evaluate), not every workload");
  args.flag("--no-train", &no_train, "(a) sampled medians, as without EvalConfig::train");
  args.flag("--no-prime", &no_prime, "(a) EvalConfig::train_prime off");
  if (const int rc = args.parse(argc, argv); rc >= 0) return rc;
  if (only.find_first_not_of("dabc") != std::string::npos || only.empty()) {
    std::fprintf(stderr, "bench_gpu: --only '%s': letters among d, a, b, c\n", only.c_str());
    return 2;
  }
  if (runs < 1 || runs_b < 1 || seconds <= 0 || train_gib < 0 || train_max_gib < 0 || train_calls_arg < 0 ||
      trains_arg < 0 || trains_arg > 16 || train_queue < 1 || train_queue > 64) {
    std::fprintf(stderr, "bench_gpu: --runs and --runs-b must be at least 1, --seconds above 0, --train-gib, --train-max-gib and --train-calls at least 0, --trains in 0..16, --train-queue in 1..64\n");
    return 2;
  }
  auto want = [&](char part) { return only.find(part) != std::string::npos; };
  d2k::env::set_log_level("warn");
  char state_buf[] = "/tmp/d2k-gpubench-XXXXXX";
  if (!::mkdtemp(state_buf)) return 1;
  const fs::path state = state_buf;

  // The chosen tasks in a tasks dir of their own (copies: the loader refuses a task folder that is a
  // symlink), so each server prepares only those.
  d2k::tasks::TaskSet all = d2k::tasks::load_tasks(D2K_TASKS_DIR);
  const fs::path tasks_dir = state / "tasks";
  fs::create_directories(tasks_dir);
  std::vector<std::string> chosen;
  const std::vector<std::string> asked = split(tasks_arg);
  for (const auto& t : all.tasks)
    if (tasks_arg == "all" || std::find(asked.begin(), asked.end(), t.id) != asked.end()) {
      fs::copy(t.dir, tasks_dir / t.id, fs::copy_options::recursive);
      chosen.push_back(t.id);
    }
  for (const auto& t : split(throughput_arg))
    if (std::find(chosen.begin(), chosen.end(), t) == chosen.end() && all.find(t)) {
      fs::copy(all.find(t)->dir, tasks_dir / t, fs::copy_options::recursive);
      chosen.push_back(t);
    }
  d2k::tasks::TaskSet tasks = d2k::tasks::load_tasks(tasks_dir);
  for (const auto& e : tasks.errors) std::printf("bench_gpu: task %s: %s\n", e.file.c_str(), e.what());
  if (tasks.tasks.size() != chosen.size()) {
    std::printf("bench_gpu: %zu of %zu chosen task(s) loaded; nothing measured\n", tasks.tasks.size(), chosen.size());
    fs::remove_all(state);
    return 1;
  }

  // (a) the evaluator directly, fresh runners each time (before the server: it needs none, and a
  // server prepares every chosen task first).
  if (want('a') && tasks.find("vector_add")) {
    const d2k::tasks::Task* task = tasks.find("vector_add");
    d2k::runner::EvalConfig ec;
    ec.state_dir = state / "a" / "eval";
    ec.compiler.cache_dir = state / "a" / "cache";
    ec.compiler.scratch_dir = state / "a" / "scratch";
    fs::create_directories(ec.state_dir);
    if (train_gib > 0) ec.train_bytes = static_cast<std::uint64_t>(train_gib * double(1ull << 30));
    if (train_max_gib > 0) ec.train_max_bytes = static_cast<std::uint64_t>(train_max_gib * double(1ull << 30));
    if (train_calls_arg > 0) ec.train_window_calls = train_calls_arg;
    if (trains_arg > 0) ec.train_count = trains_arg;
    ec.train_queue = train_queue;
    if (no_split || train_queue > 1) ec.train_split = false;  // a whole train back to back: no halves
    if (retries_arg >= 0) ec.train_retries = retries_arg;
    if (no_train) ec.train = false;
    if (no_prime) ec.train_prime = false;
    std::printf("(a) vector_add L3, %d fresh runners, %s workloads, train %s%s%s%s (up to %d per phase, room %.1f GiB, batch cap %.1f GiB)\n",
                runs, visible_a ? "visible" : "every", ec.train ? "on" : "off", ec.train && !ec.train_prime ? " without its prime" : "",
                ec.train_split ? (", split (half synced, half back to back), disturbed trains made again up to " + std::to_string(ec.train_retries) + " times").c_str() : "",
                !ec.train_split && ec.train_queue > 1 ? (", calls back to back, " + std::to_string(ec.train_queue) + " in flight (measurement only)").c_str() : "",
                ec.train_count, double(ec.train_bytes) / double(1ull << 30), double(ec.timing.batch_bytes) / double(1ull << 30));
    std::printf("    host: %s\n", cpu_topology().c_str());  // beside each run's CPUs below (diagnosis)
    d2k::runner::Evaluator evaluator(ec);
    fs::path so = evaluator.build_trusted(*task, task->expert_path(3));
    std::vector<double> total;
    // Every timed workload: the workload's time (the train's, on the parent's clock, when
    // EvalConfig::train is on) and the runner's sampled median beside it, across the fresh runners.
    std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> per;
    std::map<std::string, int> train_calls, train_count;
    // The train's window in parts (diagnosis): the snapshot's charge, the runner's own claim of its
    // calls (untrusted), its first call, and the rest (the hops: train line, train_end, freeze).
    struct Parts {
      std::vector<double> window, late, claim, first, hops, charge;
    };
    std::map<std::string, Parts> parts;
    // Unsplit trains (--no-split): a median-based time (diagnosis; not what the evaluator reports): per train the runner's own
    // median call (a claim) but never below (1 - eps) of the train's window time, the trains'
    // median; per workload one list per eps (0: the window time itself; 1: the bare claim).
    const std::vector<double> eps_list = {0.0, 0.01, 0.02, 0.03, 1.0};
    std::map<std::string, std::vector<std::vector<double>>> robust;
    // The split train's halves per workload (every train of every run): synced, back to back, the
    // owner's sync cost, and how many trains the floor set.
    struct Halves {
      std::vector<double> synced, queued, cost;
      int floored = 0, trains = 0;
      int retried = 0, runs_retried = 0, most = 0;  // discarded trains, runs with one, most in one run
    };
    std::map<std::string, Halves> halves;
    for (int i = 0; i < runs; ++i) {
      d2k::runner::EvalRequest req;
      req.task = task;
      req.so_path = so;
      req.seeds = 1;
      req.workloads = visible_a ? d2k::runner::WorkloadSet::visible : d2k::runner::WorkloadSet::all;
      d2k::runner::EvalResult r = evaluator.evaluate(req);
      if (!r.ok()) {
        std::printf("  run %d: %s %s\n", i, std::string(d2k::sandbox::to_string(r.status)).c_str(), r.message.c_str());
        continue;
      }
      for (const auto& w : r.workloads) {
        if (!w.timing) continue;
        per[w.name].first.push_back(w.timing->median_s * 1e6);
        per[w.name].second.push_back(w.claimed_median_s * 1e6);
        train_calls[w.name] = w.train_calls;
        train_count[w.name] = static_cast<int>(w.trains.size());
        for (const auto& t : w.trains) {
          if (t.half_calls <= 0) continue;
          Halves& h = halves[w.name];
          h.synced.push_back(t.half_s * 1e6);
          h.queued.push_back(t.queued_s * 1e6);
          h.cost.push_back(t.sync_call_s * 1e6);
          h.floored += t.floored ? 1 : 0;
          ++h.trains;
        }
        if (!w.retried_trains.empty()) {
          Halves& h = halves[w.name];
          h.retried += static_cast<int>(w.retried_trains.size());
          ++h.runs_retried;
          h.most = std::max(h.most, static_cast<int>(w.retried_trains.size()));
        }
        // (A split train's time is already its back-to-back half's: the claim-based lines are for
        // unsplit trains only.)
        if (!w.trains.empty() && w.trains.front().half_calls <= 0) {
          auto& lists = robust[w.name];
          lists.resize(eps_list.size());
          for (std::size_t e = 0; e < eps_list.size(); ++e) {
            std::vector<double> each;
            for (const auto& t : w.trains) each.push_back(std::max(t.claim_median_call_s, (1 - eps_list[e]) * t.s) * 1e6);
            lists[e].push_back(median(each));
          }
        }
        if (w.train_calls > 0) {
          Parts& p = parts[w.name];
          p.window.push_back(w.train_window_s * 1e6);
          p.late.push_back(w.train_late_s * 1e6);
          p.claim.push_back(w.train_claim_s * 1e6);
          p.first.push_back(w.train_first_claim_s * 1e6);
          p.hops.push_back((w.train_window_s - w.train_late_s - w.train_claim_s) * 1e6);
          p.charge.push_back(w.train_fill_charge_s * 1e6);
          if (w.name == "pow2_64m") {
            std::string each;  // each train's time per call (the workload's time is their median)
            for (const auto& t : w.trains)
              each += (each.empty() ? "" : " ") + std::to_string(t.calls) + "@" + std::to_string(t.s * 1e6).substr(0, 6) +
                      (t.half_calls > 0 ? " (split: " + std::to_string(t.half_calls) + " synced @" + std::to_string(t.half_s * 1e6).substr(0, 6) +
                                              ", back to back @" + std::to_string(t.queued_s * 1e6).substr(0, 6) + ", sync cost " +
                                              std::to_string(t.sync_call_s * 1e6).substr(0, 5) + (t.floored ? ", floored)" : ")")
                                        : "") +
                      " (median call claimed " + std::to_string(t.claim_median_call_s * 1e6).substr(0, 6) + ")";
            for (const auto& t : w.retried_trains)  // discarded: disturbed
              each += " [made again: synced @" + std::to_string(t.half_s * 1e6).substr(0, 6) + ", back to back @" +
                      std::to_string(t.queued_s * 1e6).substr(0, 6) + ", sync cost " + std::to_string(t.sync_call_s * 1e6).substr(0, 5) + "]";
            std::printf("      run %2d %s: sampled median claimed %.1f us; %d calls in %zu trains (calls@us: %s), windows %.1f us = calls %.1f (first %.1f) + snapshot %.1f + hops %.1f; fill charge %.1f; cpu runner %d parent %d\n",
                        i, w.name.c_str(), w.claimed_median_s * 1e6, w.train_calls, w.trains.size(), each.c_str(), p.window.back(), p.claim.back(), p.first.back(), p.late.back(),
                        p.hops.back(), p.charge.back(), w.trains.empty() ? -1 : w.trains.back().runner_cpu,
                        w.trains.empty() ? -1 : w.trains.back().parent_cpu);
          }
        }
      }
      total.push_back(r.phases.total_s);
    }
    using d2k::bench::cv_percent;
    using d2k::bench::sd;
    for (auto& [name, v] : per)
      std::printf("    %-12s time %9.2f us (CV %.2f%%, %d train calls in %d trains) | runner's sampled median %9.2f us (CV %.2f%%)\n",
                  name.c_str(), median(v.first), cv_percent(v.first), train_calls[name], train_count[name], median(v.second),
                  cv_percent(v.second));
    for (auto& [name, lists] : robust) {
      std::string line;
      char buf[96];
      for (std::size_t e = 0; e < eps_list.size(); ++e) {
        if (eps_list[e] >= 1)
          std::snprintf(buf, sizeof buf, "%sclaim alone %.2f us CV %.2f%%", line.empty() ? "" : ", ", median(lists[e]), cv_percent(lists[e]));
        else
          std::snprintf(buf, sizeof buf, "%seps %.0f%% %.2f us CV %.2f%%", line.empty() ? "" : ", ", eps_list[e] * 100,
                        median(lists[e]), cv_percent(lists[e]));
        line += buf;
      }
      std::printf("      %-12s median call, at least (1 - eps) x the window's: %s\n", name.c_str(), line.c_str());
    }
    for (auto& [name, h] : halves)
      std::printf("      %-12s split train: synced half %.2f us (CV %.2f%%), back to back %.2f us (CV %.2f%%), the owner's "
                  "sync cost %.2f us (sd %.2f); the floor set the time in %d of %d trains; %d disturbed trains made again "
                  "(in %d runs, at most %d in one)\n",
                  name.c_str(), median(h.synced), cv_percent(h.synced), median(h.queued), cv_percent(h.queued),
                  median(h.cost), sd(h.cost), h.floored, h.trains, h.retried, h.runs_retried, h.most);
    for (auto& [name, p] : parts)
      std::printf("      %-12s train window %.1f us (sd %.1f) = runner's calls %.1f (sd %.1f; first call %.1f, sd %.1f) "
                  "+ snapshot charge %.1f (sd %.1f) + hops %.1f (sd %.1f); fill charge %.1f (sd %.1f)\n",
                  name.c_str(), median(p.window), sd(p.window), median(p.claim), sd(p.claim), median(p.first),
                  sd(p.first), median(p.late), sd(p.late), median(p.hops), sd(p.hops), median(p.charge),
                  sd(p.charge));
    const std::vector<double>& medians = per["pow2_64m"].first;  // the summary line's workload
    if (medians.empty())
      std::printf("(a) timing stability: nothing measured (no run timed pow2_64m; each run's reason is above)\n");
    else
      std::printf(
          "(a) timing stability, vector_add L3 on pow2_64m, %s path, %zu fresh runners: median of times %.1f us, "
          "min %.1f, max %.1f, CV of the times %.2f%%; evaluator total median %.3f s\n",
          ec.gpu_resident ? "GPU-resident" : "host", medians.size(), median(medians),
          *std::min_element(medians.begin(), medians.end()), *std::max_element(medians.begin(), medians.end()),
          cv_percent(medians), median(total));
    std::printf("    ncu: not run by this bench (bench/README.md has the kernel duration by ncu beside the train)\n");
    std::fflush(stdout);
  }

  if (!want('b') && !want('c') && !want('d')) {
    fs::remove_all(state);
    return 0;
  }
  const auto cfg = server_config(state / "server", tasks_dir, "s");
  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::string note;
  auto server = std::make_unique<BenchServer>(cfg, note);
  if (!server->server) {
    std::printf("bench_gpu: no usable GPU (%s); nothing measured\n", note.c_str());
    fs::remove_all(state);
    return 0;
  }
  std::printf("bench_gpu %s on %s; tasks: %s\n", date, note.c_str(),
              [&] {
                std::string s;
                for (const auto& t : chosen) s += (s.empty() ? "" : ",") + t;
                return s;
              }()
                  .c_str());
  std::fflush(stdout);

  // (d) time to ready, fresh and then persisted.
  Value st;
  const double fresh = server->wait_ready(&st);
  if (want('d')) {
    std::printf("(d) time to ready, fresh server (empty state dir), %zu task(s): %.1f s", chosen.size(), fresh);
    const auto& p = st["gpus"][0]["preparation"];
    std::printf(" (%d ready, %d failed)\n", p.value("ready", 0), p.value("failed", 0));
    for (const auto& [task, why] : p["errors"].items())
      std::printf("    %s failed: %s\n", task.c_str(), why.get<std::string>().c_str());
    server.reset();
    std::string note2;
    server = std::make_unique<BenchServer>(cfg, note2);
    std::printf("    restarted on the same state dir (persisted builds and calibration): %.1f s\n",
                server->wait_ready(nullptr));
    std::fflush(stdout);
  }

  // (b) one evaluation per task through the server: cold (compile miss), then cached.
  if (want('b')) {
    d2k::Client c(server->server->endpoint());
    std::printf("(b) one evaluate per task, client round trip, L3 expert, visible workloads:\n");
    for (const auto& id : chosen) {
      const d2k::tasks::Task& task = *tasks.find(id);
      Session s = open_session(c, task, 1);
      write_source(c, s, "cold " + std::to_string(::getpid()));
      auto t = steady_clock::now();
      Value r = c.step(s.id, {{"type", "evaluate"}});
      const double cold = since(t);
      const Value& last = r["observation"]["last"];
      std::printf("  %-20s cold   %.3f s  %s  [%s]\n", id.c_str(), cold,
                  last.value("ok", false) ? "ok" : last["error"].value("code", std::string("?")).c_str(),
                  phases_text(last).c_str());
      std::vector<double> rt;
      Value cached_last;
      for (int i = 0; i < runs_b; ++i) {
        t = steady_clock::now();
        r = c.step(s.id, {{"type", "evaluate"}});
        rt.push_back(since(t));
        if (i == runs_b / 2 || i == 0) cached_last = r["observation"]["last"];
      }
      std::printf("  %-20s cached %.3f s p50 of %d (min %.3f, max %.3f)  %s  [%s]\n", id.c_str(), median(rt), runs_b,
                  rt.empty() ? 0 : *std::min_element(rt.begin(), rt.end()),
                  rt.empty() ? 0 : *std::max_element(rt.begin(), rt.end()),
                  cached_last.value("ok", false) ? "ok" : cached_last["error"].value("code", std::string("?")).c_str(),
                  phases_text(cached_last).c_str());
      c.close(s.id);
      std::fflush(stdout);
    }
  }

  // (c) throughput at each session count, per task.
  if (want('c')) {
    for (const auto& id : split(throughput_arg)) {
      const d2k::tasks::Task* task = tasks.find(id);
      if (!task) continue;
      for (const auto& sessions_s : split(sessions_arg)) {
        const int sessions = std::atoi(sessions_s.c_str());
        d2k::Client sc(server->server->endpoint());
        const Value before = sc.stats();
        NvmlSampler nvml(0);
        std::atomic<int> done{0}, failed{0}, misses{0};
        std::mutex errors_mu;
        std::string first_error, first_failed;
        std::vector<std::thread> clients;
        const auto t0 = steady_clock::now();
        const auto stop_at = t0 + duration_cast<steady_clock::duration>(duration<double>(seconds));
        for (int s = 0; s < sessions; ++s)
          clients.emplace_back([&, s] {
            try {
              d2k::Client c(server->server->endpoint());
              Session sess = open_session(c, *task, static_cast<std::uint64_t>(s));
              write_source(c, sess, "session " + std::to_string(s));
              const bool fresh_each_time = s % 2 == 1;  // half the sessions: a compile miss each time
              for (int n = 0; steady_clock::now() < stop_at; ++n) {
                if (fresh_each_time)
                  write_source(c, sess, "session " + std::to_string(s) + " edit " + std::to_string(n));
                Value r = c.step(sess.id, {{"type", "evaluate"}});
                const Value& last = r["observation"]["last"];
                (last.value("ok", false) ? done : failed)++;
                if (!last.value("ok", false)) {
                  std::lock_guard lock(errors_mu);
                  if (first_failed.empty())
                    first_failed = last.contains("error") ? last["error"].dump() : last.dump().substr(0, 400);
                }
                if (last.contains("compile") && !last["compile"].value("cached", true)) ++misses;
              }
              c.close(sess.id);
            } catch (const std::exception& e) {  // a client error ends this session's loop, not the bench
              ++failed;
              std::lock_guard lock(errors_mu);
              if (first_error.empty()) first_error = e.what();
            }
          });
        for (auto& t : clients) t.join();
        const double elapsed = since(t0);
        const auto [util, util_samples] = nvml.stop();
        const Value after = sc.stats();
        const auto& g0 = before["gpus"][0];
        const auto& g1 = after["gpus"][0];
        const double busy = g1.value("busy_s", 0.0) - g0.value("busy_s", 0.0);
        const double timed = g1.value("timed_s", 0.0) - g0.value("timed_s", 0.0);
        const double occupancy = g1.value("queue_occupancy", 0.0) * after.value("uptime_s", 0.0) -
                                 g0.value("queue_occupancy", 0.0) * before.value("uptime_s", 0.0);
        std::printf(
            "(c) %-12s %2d sessions, %.0f s: %d ok, %d failed (%d compile misses) -> %.0f evaluations/hour; "
            "GPU: runner time %.1f%%, timed loops %.1f%%, queue occupancy %.1f%%, NVML utilisation %s\n",
            id.c_str(), sessions, elapsed, done.load(), failed.load(), misses.load(), 3600.0 * done.load() / elapsed,
            100 * busy / elapsed, 100 * timed / elapsed, 100 * occupancy / elapsed,
            util_samples ? (std::to_string(static_cast<int>(std::lround(util))) + "% mean of " +
                            std::to_string(util_samples) + " samples")
                               .c_str()
                         : "n/a (no nvidia-smi)");
        if (!first_error.empty()) std::printf("    first client error: %s\n", first_error.c_str());
        if (!first_failed.empty()) std::printf("    first failed evaluation: %s\n", first_failed.substr(0, 600).c_str());
        std::fflush(stdout);
      }
    }
  }
  server.reset();
  fs::remove_all(state);
  return 0;
}
