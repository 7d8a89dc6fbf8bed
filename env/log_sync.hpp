// Group commit for episode logs: the fdatasync of each record, off the server loop (issue 22.6).
//
// The loop writes a session's records (one write(2) each) and asks for a sync of that session's
// file up to its latest record; a few threads run the fdatasyncs, one session at a time per thread,
// and report "session S durable up to record N" (or the error). Requests for a session that arrive
// while its file is being synced are folded into the next fdatasync of that file (group commit),
// and a slow file holds only its own thread: other sessions are synced by the others. Sessions
// waiting for a thread are taken round-robin between tenants (the clients that opened them), so
// one client's many sessions do not make another's sync wait behind all of theirs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "env/episode_log.hpp"
#include "env/fair_queue.hpp"

namespace d2k::env {

class LogSyncer {
 public:
  // Called on a sync thread after each fdatasync: every record of `session` up to `record` (as
  // numbered by request) is durable when `error` is 0; else the fdatasync failed with that errno.
  using Done = std::function<void(const std::string& session, std::uint64_t record, int error)>;
  // Runs on a sync thread just before a session's fdatasync (tests: a hook that blocks makes that
  // session's log slow).
  using Hook = std::function<void(const std::string& session)>;
  LogSyncer(std::size_t threads, Done done, Hook hook = nullptr);
  // Runs the syncs asked for so far, then stops the threads.
  ~LogSyncer();
  LogSyncer(const LogSyncer&) = delete;
  LogSyncer& operator=(const LogSyncer&) = delete;

  // `file` holds `session`'s records up to `record` (written with write(2)): make them durable.
  // `tenant`: whose session it is (its turn among the tenants waiting).
  void request(const std::string& session, std::shared_ptr<LogFile> file, std::uint64_t record,
               const std::string& tenant = {});
  // Like the destructor: every sync asked for so far runs, then the threads end. Later requests are dropped.
  void stop();

 private:
  struct Pending {
    std::shared_ptr<LogFile> file;
    std::uint64_t record = 0;  // the latest record asked for
    bool running = false;      // a thread is syncing this file now
    bool queued = false;       // in ready_
    std::string tenant;
  };
  void work();
  void enqueue(const std::string& session, Pending& p);  // under mutex_
  Done done_;
  Hook hook_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::unordered_map<std::string, Pending> pending_;
  // Sessions with a sync to run and no thread on them, per tenant, round-robin.
  FairQueue<std::string> ready_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace d2k::env
