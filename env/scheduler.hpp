// Long work off the server loop: a CPU pool for sandboxed compiles and a Mailbox that carries
// finished work back to the loop thread (the only thread that touches sessions).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "env/fair_queue.hpp"

namespace d2k::env {

// Completions posted from worker threads, run on the loop thread. `fd()` becomes readable when
// something is waiting, so the loop can poll it beside its sockets.
class Mailbox {
 public:
  Mailbox();
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  void post(std::function<void()> completion);
  // Runs everything posted so far; returns how many ran.
  std::size_t drain();
  int fd() const { return fd_; }

 private:
  int fd_ = -1;  // eventfd
  std::mutex mutex_;
  std::deque<std::function<void()>> items_;
};

// A fixed set of worker threads. Jobs are queued per tenant (the client that asked for them) and
// taken round-robin between tenants (env/fair_queue.hpp, issue 22.6). A job that throws is caught and reported through `on_error` (a
// worker never dies of it).
class WorkerPool {
 public:
  WorkerPool(std::string name, std::size_t workers, std::function<void(const std::string&)> on_error);
  ~WorkerPool();  // finishes running jobs, drops queued ones
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // `tenant`: whose job it is ("" for the server's own); jobs of one tenant run in this order.
  void submit(std::function<void()> job, const std::string& tenant = {});
  std::size_t workers() const { return threads_.size(); }
  std::size_t queued() const;
  std::size_t running() const { return running_.load(); }
  double busy_seconds() const;  // summed over workers since start
  void stop();                  // no new jobs; queued jobs are dropped; waits for running ones

 private:
  void work();

  std::string name_;
  std::function<void(const std::string&)> on_error_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  FairQueue<std::function<void()>> jobs_;  // per tenant, round-robin
  std::vector<std::thread> threads_;
  std::atomic<std::size_t> running_{0};
  std::atomic<std::uint64_t> busy_ns_{0};
  bool stopping_ = false;
};

}  // namespace d2k::env
