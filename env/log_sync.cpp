#include "env/log_sync.hpp"

#include <unistd.h>

#include <cerrno>

namespace d2k::env {

LogSyncer::LogSyncer(std::size_t threads, Done done, Hook hook) : done_(std::move(done)), hook_(std::move(hook)) {
  for (std::size_t i = 0; i < std::max<std::size_t>(1, threads); ++i) threads_.emplace_back([this] { work(); });
}

LogSyncer::~LogSyncer() { stop(); }

void LogSyncer::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void LogSyncer::enqueue(const std::string& session, Pending& p) {
  p.queued = true;
  ready_.push(p.tenant, session);
}

void LogSyncer::request(const std::string& session, std::shared_ptr<LogFile> file, std::uint64_t record,
                        const std::string& tenant) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && threads_.empty()) return;
    Pending& p = pending_[session];
    p.file = std::move(file);
    p.record = std::max(p.record, record);
    if (p.running || p.queued) return;  // folded into the sync running or queued for this file
    p.tenant = tenant;
    enqueue(session, p);
  }
  wake_.notify_one();
}

void LogSyncer::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
    if (ready_.empty()) return;  // stopping, and every sync asked for has run
    const std::string session = ready_.pop();
    Pending& p = pending_.at(session);
    p.queued = false;
    p.running = true;
    const std::shared_ptr<LogFile> file = p.file;
    const std::uint64_t record = p.record;  // what was written before this fdatasync starts
    lock.unlock();
    if (hook_) hook_(session);
    int error = 0;
    while (::fdatasync(file->fd) != 0) {
      if (errno == EINTR) continue;
      error = errno;
      break;
    }
    done_(session, record, error);
    lock.lock();
    Pending& q = pending_.at(session);
    q.running = false;
    if (q.record > record) {  // more records came while it ran: one more fdatasync for all of them
      enqueue(session, q);
      wake_.notify_one();
    } else {
      pending_.erase(session);
    }
  }
}

}  // namespace d2k::env
