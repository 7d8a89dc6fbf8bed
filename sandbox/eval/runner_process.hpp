// Host side of one d2k-runner: start it (sandbox::spawn: own process group, pipes, output file), wait
// for "ready", hand it one job, read its timestamped events with deadlines, kill and reap it.
// RunnerPool keeps a few started runners per GPU and mode so CUDA start-up is off the step's path;
// each runner is used once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/process.hpp"
#include "sandbox/runner/wire.hpp"

namespace d2k::runner {

enum class Mode { agent, trusted, probe, bandwidth };
std::string_view mode_name(Mode m);

struct SpawnSpec {
  std::filesystem::path runner;   // the d2k-runner executable
  Mode mode = Mode::agent;
  int gpu = -1;                   // CUDA_VISIBLE_DEVICES (PCI bus order); -1: all GPUs (probe)
  bool isolate = true;            // own user/mount/network namespaces
  std::size_t max_output_bytes = 64u << 10;  // stdout+stderr kept; the rest is counted and dropped
  // A GPU tool around the runner (sandbox/tools): argv before the runner's, the runner told to
  // stay in the tool host's network namespace, and more environment (the tool's TMPDIR).
  std::vector<std::string> wrapper;
  bool keep_net = false;
  std::map<std::string, std::string> extra_env;
};

// How a runner process ended.
struct Exit {
  bool exited = false;
  int status = -1;   // exit status when exited
  int signal = 0;    // killing signal otherwise
  bool killed_by_us = false;
  std::string describe() const;
};

struct Event {
  nlohmann::json body;
  double t = 0;      // seconds since the job was sent (parent's clock, on arrival)
};

class RunnerProcess {
 public:
  using Clock = std::chrono::steady_clock;
  // Starts the runner (sandbox::spawn); returns once it has exec'd (CUDA start-up runs in the
  // child). Throws std::runtime_error.
  static std::unique_ptr<RunnerProcess> start(const SpawnSpec& spec);
  RunnerProcess(const RunnerProcess&) = delete;
  RunnerProcess& operator=(const RunnerProcess&) = delete;
  ~RunnerProcess();  // kills and reaps if still running

  // Waits for the "ready" (or "probe") event. nullopt on timeout or early exit (error() says why).
  std::optional<nlohmann::json> wait_ready(std::chrono::milliseconds timeout);
  void send_job(const Job& job);   // one JSON line on stdin (stdin stays open for send_line)
  // One more line on stdin (a timed phase's key); returns the parent's time of the write, in
  // seconds since the job was sent (the same clock as Event::t). Negative when the runner is gone.
  double send_line(const std::string& line);
  enum class Read { event, eof, timeout, malformed };
  // Next event, waiting at most until `deadline`. Draining stdout/stderr happens meanwhile.
  Read next(Event& out, Clock::time_point deadline);
  // Until `until`, next() polls without sleeping (a busy loop on this thread): for a window on the
  // parent's clock whose end is a frame (a train), so that the frame's hop is the pipe's and not a
  // wake-up of this thread. Bounded, so that a kernel that hangs in the window costs a core only
  // that long; set_spin_until({}) ends it.
  void set_spin_until(Clock::time_point until) { spin_until_ = until; }
  void kill();                     // SIGKILL to the whole process group
  // Freezes the runner (SIGSTOP) and waits, at most `timeout`, until every one of its threads is
  // stopped (or it has ended): from then on none of its code runs, so nothing it writes to its
  // output file after this can be the product of work done while frozen. Returns the parent's time
  // of the signal (the Event::t clock), or a negative value when it is gone or cannot be signalled.
  // The output-rewrite defence (issue 23): a timed phase's outputs are taken while frozen.
  double freeze(std::chrono::milliseconds timeout);
  // Lets a frozen runner go on (SIGCONT); returns the parent's time of it (the Event::t clock).
  double thaw();
  // Seconds since the job was sent (the Event::t clock).
  double now_t() const { return std::chrono::duration<double>(Clock::now() - job_sent_).count(); }
  Exit wait();                     // reaps (kills first if still running after a short grace)
  int output_fd() const { return out_.get(); }  // the memfd holding the output tensors
  int slots_socket() const { return slots_.get(); }  // unix socket to its fd 5 (GPU-resident slots)
  const std::string& output() const { return output_; }  // captured stdout/stderr (capped)
  std::uint64_t output_dropped() const { return dropped_; }
  const std::string& error() const { return error_; }
  pid_t pid() const { return child_.pid(); }
  Mode mode() const { return spec_.mode; }
  Clock::time_point started() const { return started_; }
  // A spare runner is fit for use: still running, not stopped, traced or a zombie, the same
  // executable it was started as (same inode, unchanged on disk), and it has said nothing beyond
  // "ready". Empty when fit, otherwise why not. Never blocks.
  std::string spare_defect();
  // It has said "ready" (CUDA is up) or ended; never blocks, consumes nothing.
  bool said_ready();

 private:
  RunnerProcess() = default;
  bool pump(int timeout_ms);       // poll both pipes once; false when the result pipe hit EOF
  SpawnSpec spec_;
  sandbox::Child child_;
  sandbox::Fd job_, result_, log_, out_;  // its stdin, fd 3, stdout+stderr, fd 4 (memfd)
  sandbox::Fd slots_;                     // our end of its fd 5
  std::string line_buf_;
  std::deque<std::string> lines_;
  bool result_eof_ = false;
  std::string output_;
  std::uint64_t dropped_ = 0;
  std::string error_;
  std::optional<Exit> exit_;
  bool killed_ = false;
  Clock::time_point spin_until_{};
  Clock::time_point started_{}, job_sent_{};
  struct FileId {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    std::int64_t mtime_ns = 0;
    bool operator==(const FileId&) const = default;
  };
  std::optional<FileId> exe_;  // /proc/<pid>/exe right after start
};

// A few runners started ahead per (GPU, mode); take() hands one out and a background thread
// starts its replacement.
class RunnerPool {
 public:
  RunnerPool(SpawnSpec spec, std::size_t size);
  RunnerPool(const RunnerPool&) = delete;
  RunnerPool& operator=(const RunnerPool&) = delete;
  ~RunnerPool();
  // Blocks until one is started and passes spare_defect() (an unfit spare is killed and replaced);
  // throws when starting fails.
  std::unique_ptr<RunnerProcess> take();
  const SpawnSpec& spec() const { return spec_; }
  // While held, no replacement is started unless the pool is empty (a GPU-resident evaluation holds
  // its GPU's pools while its candidate runs: no CUDA start-up beside a timed phase).
  void hold(bool on);
  // Waits until no runner of this pool is starting (every spare has said ready or ended, no start
  // in flight); false at the deadline.
  bool wait_started(std::chrono::steady_clock::time_point deadline);

 private:
  void refill();
  SpawnSpec spec_;
  std::size_t size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<RunnerProcess>> ready_;
  std::string last_error_;
  bool stop_ = false;
  bool held_ = false;
  bool starting_ = false;
  std::thread thread_;
};

}  // namespace d2k::runner
