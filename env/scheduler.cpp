#include "env/scheduler.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace d2k::env {

Mailbox::Mailbox() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
}

Mailbox::~Mailbox() {
  if (fd_ >= 0) ::close(fd_);
}

void Mailbox::post(std::function<void()> completion) {
  {
    std::lock_guard lock(mutex_);
    items_.push_back(std::move(completion));
  }
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd_, &one, sizeof one);
}

std::size_t Mailbox::drain() {
  std::uint64_t count = 0;
  [[maybe_unused]] auto n = ::read(fd_, &count, sizeof count);
  std::deque<std::function<void()>> items;
  {
    std::lock_guard lock(mutex_);
    items.swap(items_);
  }
  for (auto& item : items) item();
  return items.size();
}

WorkerPool::WorkerPool(std::string name, std::size_t workers,
                       std::function<void(const std::string&)> on_error)
    : name_(std::move(name)), on_error_(std::move(on_error)) {
  if (workers == 0) workers = 1;
  threads_.reserve(workers);
  for (std::size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() { stop(); }

void WorkerPool::submit(std::function<void()> job, const std::string& tenant) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw std::runtime_error(name_ + ": pool is stopping");
    jobs_.push(tenant, std::move(job));
  }
  wake_.notify_one();
}

std::size_t WorkerPool::queued() const {
  std::lock_guard lock(mutex_);
  return jobs_.size();
}

double WorkerPool::busy_seconds() const { return static_cast<double>(busy_ns_.load()) * 1e-9; }

void WorkerPool::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    jobs_.clear();
  }
  wake_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void WorkerPool::work() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping and nothing left
      job = jobs_.pop();
      ++running_;
    }
    auto start = std::chrono::steady_clock::now();
    try {
      job();
    } catch (const std::exception& e) {
      if (on_error_) on_error_(name_ + ": " + e.what());
    } catch (...) {
      if (on_error_) on_error_(name_ + ": unknown exception");
    }
    busy_ns_ += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
            .count());
    --running_;
  }
}

}  // namespace d2k::env
