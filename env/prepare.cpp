#include "env/prepare.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <utility>

namespace d2k::env {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// How often a thread held back by a busy GPU looks again (the queue's counters are polled; a
// parked evaluation wakes it at once).
constexpr auto kBusyPoll = std::chrono::milliseconds(50);

std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

const char* to_string(Preparation::State s) {
  switch (s) {
    case Preparation::State::pending: return "pending";
    case Preparation::State::preparing: return "preparing";
    case Preparation::State::ready: return "ready";
    case Preparation::State::failed: return "failed";
  }
  return "unknown";
}

Preparation::Preparation(std::shared_ptr<GpuBackend> backend, std::vector<const tasks::Task*> tasks,
                         std::size_t gpus, Log log)
    : backend_(std::move(backend)), log_(std::move(log)), gpus_(gpus) {
  for (auto& g : gpus_)
    for (const tasks::Task* t : tasks) {
      g.entries.emplace_back();
      g.entries.back().task = t;
    }
}

Preparation::~Preparation() { stop(); }

void Preparation::set_busy(Busy busy) {
  std::lock_guard lock(mu_);
  busy_ = std::move(busy);
}

bool Preparation::busy(int gpu) const {
  // Without mu_: the callback reads the GPU queue's own counters. busy_ is set before start().
  return busy_ && busy_(gpu);
}

bool Preparation::demanded_locked(const Gpu& g, const Entry* except) const {
  return std::any_of(g.entries.begin(), g.entries.end(), [&](const Entry& e) {
    return &e != except && e.state == State::pending && !e.parked.empty();
  });
}

void Preparation::checkpoint(int gpu, Entry& current) {
  Gpu& g = gpus_[static_cast<std::size_t>(gpu)];
  for (;;) {
    const bool gpu_busy = busy(gpu);
    std::unique_lock lock(mu_);
    // Released (shutdown): the task under way stops here, unprepared (a server's stop waited for
    // its whole preparation before: 81 s for conv2d's calibration on the H200).
    if (released_) {
      g.paused = false;
      throw Stopped{};
    }
    // Somebody waits for it: go on.
    if (!current.parked.empty() || (!gpu_busy && !demanded_locked(g, &current))) {
      g.paused = false;
      return;
    }
    if (demanded_locked(g, &current)) {
      g.paused = false;
      throw Yielded{};
    }
    g.paused = true;  // nobody waits for it and the GPU's queue has work: evaluations first
    wake_.wait_for(lock, kBusyPoll);
  }
}

void Preparation::start() {
  std::lock_guard lock(mu_);
  if (!threads_.empty() || released_) return;
  for (std::size_t i = 0; i < gpus_.size(); ++i) {
    gpus_[i].started = Clock::now();
    threads_.emplace_back([this, i] { work(static_cast<int>(i)); });
  }
}

void Preparation::release() {
  std::vector<Parked> parked;
  {
    std::lock_guard lock(mu_);
    if (released_) return;
    released_ = true;
    for (auto& g : gpus_)
      for (auto& e : g.entries) {
        for (auto& p : e.parked) parked.push_back(std::move(p));
        e.parked.clear();
      }
  }
  wake_.notify_all();
  done_.notify_all();
  for (auto& p : parked) run(p);
}

void Preparation::run(Parked& p) {
  try {
    p.then(seconds_since(p.since));
  } catch (const std::exception& e) {
    if (log_) log_(std::string("a parked evaluation could not go on: ") + e.what());
  }
}

void Preparation::stop() {
  release();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

Preparation::Entry* Preparation::find_locked(int gpu, const std::string& task) {
  if (gpu < 0 || static_cast<std::size_t>(gpu) >= gpus_.size()) return nullptr;
  for (auto& e : gpus_[static_cast<std::size_t>(gpu)].entries)
    if (e.task->id == task) return &e;
  return nullptr;
}

const Preparation::Entry* Preparation::find_locked(int gpu, const std::string& task) const {
  return const_cast<Preparation*>(this)->find_locked(gpu, task);
}

bool Preparation::when_ready(int gpu, const tasks::Task& task, const std::string& session, Continue then) {
  {
    std::lock_guard lock(mu_);
    Entry* e = find_locked(gpu, task.id);
    if (e && !released_ && (e->state == State::pending || e->state == State::preparing)) {
      e->parked.push_back({session, std::move(then), Clock::now()});
      wake_.notify_all();  // the thread picks a task somebody waits for first
      return true;
    }
  }
  then(0.0);
  return false;
}

Preparation::State Preparation::state(int gpu, const std::string& task) const {
  std::lock_guard lock(mu_);
  const Entry* e = find_locked(gpu, task);
  return e ? e->state : State::ready;
}

std::optional<nlohmann::json> Preparation::waiting(const std::string& session) const {
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < gpus_.size(); ++i)
    for (const auto& e : gpus_[i].entries)
      for (const auto& p : e.parked)
        if (p.session == session) {
          const std::string stage = e.state == State::preparing ? e.stage : "queued for preparation";
          return nlohmann::json{
              {"state", "waiting_for_preparation"},
              {"task", e.task->id},
              {"gpu", i},
              {"stage", stage},
              {"waited_s", seconds_since(p.since)},
              {"message", "the evaluation waits for task " + e.task->id + " to be prepared on GPU " +
                              std::to_string(i) + " (" + stage + "); it runs as soon as that is done"}};
        }
  return std::nullopt;
}

std::size_t Preparation::parked(int gpu) const {
  std::lock_guard lock(mu_);
  if (gpu < 0 || static_cast<std::size_t>(gpu) >= gpus_.size()) return 0;
  std::size_t n = 0;
  for (const auto& e : gpus_[static_cast<std::size_t>(gpu)].entries) n += e.parked.size();
  return n;
}

nlohmann::json Preparation::progress(int gpu) const {
  std::lock_guard lock(mu_);
  if (gpu < 0 || static_cast<std::size_t>(gpu) >= gpus_.size()) return nlohmann::json::object();
  const Gpu& g = gpus_[static_cast<std::size_t>(gpu)];
  std::size_t ready = 0, failed = 0, pending = 0;
  nlohmann::json current = nullptr, stage = nullptr, errors = nlohmann::json::object();
  for (const auto& e : g.entries) {
    if (e.state == State::ready) ++ready;
    if (e.state == State::failed) {
      ++failed;
      errors[e.task->id] = e.error;
    }
    if (e.state == State::pending) ++pending;
    if (e.state == State::preparing) {
      current = e.task->id;
      stage = e.stage;
    }
  }
  const bool done = ready + failed == g.entries.size();
  const bool started = g.started != Clock::time_point{};
  return {{"tasks", g.entries.size()},
          {"paused", g.paused},
          {"yields", g.yields},
          {"ready", ready},
          {"failed", failed},
          {"pending", pending},
          {"done", done},
          {"current", current},
          {"stage", stage},
          {"seconds", done ? g.seconds : started ? seconds_since(g.started) : 0.0},
          {"errors", errors}};
}

bool Preparation::done() const {
  std::lock_guard lock(mu_);
  for (const auto& g : gpus_)
    for (const auto& e : g.entries)
      if (e.state == State::pending || e.state == State::preparing) return false;
  return true;
}

bool Preparation::wait_done(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return done_.wait_for(lock, timeout, [&] {
    for (const auto& g : gpus_)
      for (const auto& e : g.entries)
        if (e.state == State::pending || e.state == State::preparing) return false;
    return true;
  });
}

void Preparation::work(int gpu) {
  Gpu& g = gpus_[static_cast<std::size_t>(gpu)];
  const std::string where = " on GPU " + std::to_string(gpu);
  for (;;) {
    Entry* next = nullptr;
    for (;;) {
      const bool gpu_busy = busy(gpu);  // outside mu_ (see busy())
      std::unique_lock lock(mu_);
      if (released_) return;
      // A task somebody waits for goes first; else the configured order, once the GPU's queue is idle.
      for (std::size_t i = 0; i < g.entries.size() && !next; ++i)
        if (g.entries[i].state == State::pending && !g.entries[i].parked.empty()) next = &g.entries[i];
      const bool pending =
          std::any_of(g.entries.begin(), g.entries.end(), [](const Entry& e) { return e.state == State::pending; });
      for (std::size_t i = 0; i < g.entries.size() && !next && !gpu_busy; ++i)
        if (g.entries[i].state == State::pending) next = &g.entries[i];
      if (next) {
        g.paused = false;
        next->state = State::preparing;
        next->stage = "starting";
        next->started = Clock::now();
        break;
      }
      g.paused = pending;
      // Only this thread makes an entry pending again (a yield): with none left, wait for the end.
      if (pending) wake_.wait_for(lock, kBusyPoll);
      else wake_.wait(lock, [&] { return released_; });
    }
    const tasks::Task& task = *next->task;
    std::string error;
    try {
      backend_->prepare(task, gpu, [&](const std::string& stage) {
        {
          std::lock_guard lock(mu_);
          next->stage = stage;
        }
        if (log_) log_("preparing " + task.id + where + ": " + stage);
        checkpoint(gpu, *next);
      });
    } catch (const Stopped&) {
      {
        std::lock_guard lock(mu_);
        next->state = State::pending;  // not ready: a later server prepares it (from what was persisted)
        next->stage.clear();
      }
      if (log_) log_("preparation of " + task.id + where + " stopped (shutdown)");
      return;
    } catch (const Yielded&) {
      std::string to;
      {
        std::lock_guard lock(mu_);
        next->state = State::pending;  // taken up again later, from its first stage
        next->stage.clear();
        ++g.yields;
        for (const auto& e : g.entries)
          if (e.state == State::pending && !e.parked.empty() && to.empty()) to = e.task->id;
      }
      if (log_) log_("preparation of " + task.id + where + " gives way to " + to + " (an evaluation waits for it)");
      continue;
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "preparation failed";
    } catch (...) {
      error = "preparation failed (unknown exception)";
    }
    std::vector<Parked> parked;
    std::size_t ready = 0, total = 0;
    bool all_done = true;
    double took = 0;
    {
      std::lock_guard lock(mu_);
      next->state = error.empty() ? State::ready : State::failed;
      next->error = error;
      next->stage.clear();
      next->seconds = took = seconds_since(next->started);
      parked.swap(next->parked);
      total = g.entries.size();
      for (const auto& e : g.entries) {
        if (e.state == State::ready) ++ready;
        if (e.state == State::pending || e.state == State::preparing) all_done = false;
      }
      if (all_done) g.seconds = seconds_since(g.started);
    }
    done_.notify_all();
    if (log_) {
      if (error.empty())
        log_("prepared " + task.id + where + " in " + fixed1(took) + " s (" + std::to_string(ready) + "/" +
             std::to_string(total) + " ready)");
      else
        log_("preparation of " + task.id + where + " failed after " + fixed1(took) +
             " s; its evaluations prepare inline: " + error);
      if (all_done)
        log_("GPU " + std::to_string(gpu) + " prepared: " + std::to_string(ready) + "/" + std::to_string(total) +
             " task(s) ready in " + fixed1(g.seconds) + " s");
    }
    for (auto& p : parked) run(p);
  }
}

}  // namespace d2k::env
