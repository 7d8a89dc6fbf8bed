// Readies every task on every GPU in the background (issue 15 item 3, docs/pipeline.md): one
// preparation thread per GPU asks the backend to prepare each task in turn (trusted builds and
// calibration, persisted by the backend), so no agent's step pays for them. An evaluation whose
// task is not ready yet on its GPU is parked here, its task moves to the front of that GPU's
// order, and it goes on to the GPU queue the moment the task is ready: it waits, it never fails.
//
// Demand first: preparing a task nobody waits for never delays one somebody waits for.
//  * A task with a parked evaluation is picked before any other.
//  * A task being prepared that nobody waits for yields at its next stage (each call of the
//    backend's progress callback) to a task with a parked evaluation: it goes back to pending (what
//    the backend persisted, e.g. trusted builds in the build cache, is kept) and is taken up again
//    later, from its first stage.
//  * While the GPU's queue has work (set_busy: evaluations queued or running), no task nobody waits
//    for starts, and one under way pauses at its next stage until the queue is idle (progress()
//    says "paused"): background calibration never competes with evaluations for the GPU.
//  * Shutdown (release/stop): a task under way stops at its next stage boundary and stays
//    unprepared (what the backend persisted is kept); the calibration reports a stage per kernel
//    it measures, so a stop waits for at most one build or one calibration run.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "env/gpu_backend.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::env {

class Preparation {
 public:
  enum class State { pending, preparing, ready, failed };
  // Runs once the task is ready (or its preparation failed: the backend then does inline what it
  // lacks, as before preparation existed); `waited_s` is the time spent parked (0: not parked).
  using Continue = std::function<void(double waited_s)>;
  using Log = std::function<void(const std::string&)>;
  // True while `gpu`'s queue has work (evaluations or tools queued or running); polled.
  using Busy = std::function<bool(int gpu)>;

  // `tasks` must outlive this object (the server's TaskSet). Nothing runs before start().
  Preparation(std::shared_ptr<GpuBackend> backend, std::vector<const tasks::Task*> tasks, std::size_t gpus,
              Log log = {});
  ~Preparation();
  Preparation(const Preparation&) = delete;
  Preparation& operator=(const Preparation&) = delete;

  // Before start(): what tells the threads that a GPU's queue has work (default: never).
  void set_busy(Busy busy);
  void start();  // one thread per GPU
  // Stops preparing further tasks and runs every parked continuation now (shutdown: their
  // evaluations go on as before, without preparation). Waits for no thread.
  void release();
  // release(), then joins the threads (a task being prepared stops at its next stage boundary).
  void stop();

  // Calls `then(0)` now, on this thread, when `task` is ready or failed on `gpu` (or preparation
  // was released, or the task is not one of ours); else parks it for `session` and returns true.
  bool when_ready(int gpu, const tasks::Task& task, const std::string& session, Continue then);

  State state(int gpu, const std::string& task) const;
  // info.queue for a parked session: {state: "waiting_for_preparation", task, gpu, stage,
  // waited_s, message}; nullopt when the session has nothing parked here.
  std::optional<nlohmann::json> waiting(const std::string& session) const;
  std::size_t parked(int gpu) const;
  // stats.gpus[i].preparation: {tasks, ready, failed, pending, done, current, stage, seconds,
  // paused (held back: the GPU's queue has work and nobody waits for the task), yields (times a
  // task under way gave way to one somebody waits for), errors: {task: reason}}.
  nlohmann::json progress(int gpu) const;
  bool done() const;  // every task ready or failed on every GPU
  // Blocks until done() or `timeout` has passed; true when done.
  bool wait_done(std::chrono::milliseconds timeout) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Parked {
    std::string session;
    Continue then;
    Clock::time_point since;
  };
  struct Entry {
    const tasks::Task* task = nullptr;
    State state = State::pending;
    std::string stage;
    std::string error;
    double seconds = 0;
    Clock::time_point started{};
    std::vector<Parked> parked;
  };
  struct Gpu {
    std::vector<Entry> entries;  // in the order they are prepared when nobody waits
    Clock::time_point started{};
    double seconds = 0;  // start to done
    bool paused = false;
    std::size_t yields = 0;
  };
  struct Yielded {};  // thrown through the backend's prepare() (not a std::exception: nothing catches it by accident)
  struct Stopped {};  // likewise, at a stage boundary after release(): the task stays unprepared

  void work(int gpu);
  // At a stage boundary of `current` (the backend's progress callback): returns to go on, throws
  // Yielded to give way to a task somebody waits for, Stopped after release(), waits while the
  // GPU's queue has work.
  void checkpoint(int gpu, Entry& current);
  bool demanded_locked(const Gpu& g, const Entry* except) const;
  bool busy(int gpu) const;
  void run(Parked& p);  // its continuation; an exception is logged, never the thread's end
  Entry* find_locked(int gpu, const std::string& task);
  const Entry* find_locked(int gpu, const std::string& task) const;

  std::shared_ptr<GpuBackend> backend_;
  Log log_;
  mutable std::mutex mu_;
  mutable std::condition_variable wake_;  // work to do, or stopping
  mutable std::condition_variable done_;  // an entry reached ready or failed
  std::vector<Gpu> gpus_;
  std::vector<std::thread> threads_;
  Busy busy_;
  bool released_ = false;
};

const char* to_string(Preparation::State s);

}  // namespace d2k::env
