#include "sandbox/eval/runner_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace d2k::runner {
namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

int ms_until(RunnerProcess::Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RunnerProcess::Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1000));
}

[[noreturn]] void child_fail(int fd, const char* what) {
  // Async-signal-safe only: the child of a threaded parent.
  const char* err = strerror(errno);
  static constexpr char head[] = "{\"event\":\"result\",\"status\":\"setup_error\",\"message\":\"";
  (void)!::write(fd, head, sizeof head - 1);
  (void)!::write(fd, what, strlen(what));
  (void)!::write(fd, ": ", 2);
  (void)!::write(fd, err, strlen(err));
  (void)!::write(fd, "\"}\n", 3);
  _exit(127);
}

}  // namespace

std::string_view mode_name(Mode m) {
  switch (m) {
    case Mode::agent: return "agent";
    case Mode::trusted: return "trusted";
    case Mode::probe: return "probe";
    case Mode::bandwidth: return "bandwidth";
  }
  return "agent";
}

std::string Exit::describe() const {
  if (exited) return "exited with status " + std::to_string(status);
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return std::string("killed by signal ") + (name != nullptr ? std::string("SIG") + name : std::to_string(signal));
  }
  return "still running";
}

std::unique_ptr<RunnerProcess> RunnerProcess::start(const SpawnSpec& spec) {
  std::unique_ptr<RunnerProcess> p(new RunnerProcess());
  p->spec_ = spec;
  int job[2], result[2], log[2];
  if (pipe2(job, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  if (pipe2(result, O_CLOEXEC) != 0) {
    ::close(job[0]); ::close(job[1]);
    throw std::runtime_error("pipe failed");
  }
  if (pipe2(log, O_CLOEXEC) != 0) {
    ::close(job[0]); ::close(job[1]); ::close(result[0]); ::close(result[1]);
    throw std::runtime_error("pipe failed");
  }
  const int out = static_cast<int>(syscall(SYS_memfd_create, "d2k-outputs", MFD_CLOEXEC));
  if (out < 0) {
    for (int fd : {job[0], job[1], result[0], result[1], log[0], log[1]}) ::close(fd);
    throw std::runtime_error("memfd_create failed");
  }

  // Everything the child needs is prepared before fork (no allocation after it).
  const std::string runner = spec.runner.string();
  std::vector<std::string> args = {runner, "--mode", std::string(mode_name(spec.mode)), "--result-fd", "3",
                                   "--out-fd", "4"};
  if (spec.isolate && spec.mode != Mode::probe && spec.mode != Mode::bandwidth) args.push_back("--isolate");
  std::vector<std::string> envs = {"PATH=/usr/bin:/bin", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "HOME=/",
                                   "LANG=C", "CUDA_MODULE_LOADING=LAZY"};
  if (spec.gpu >= 0) envs.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(spec.gpu));
  if (const char* ld = std::getenv("LD_LIBRARY_PATH")) envs.push_back(std::string("LD_LIBRARY_PATH=") + ld);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {job[0], job[1], result[0], result[1], log[0], log[1], out}) ::close(fd);
    throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    // Lift every source above the targets first: a parent whose stdin was closed gets a pipe end
    // as fd 0 (dup2(0, 0) would keep its close-on-exec flag), and a source may sit on another
    // target's number (dup2 onto 3 would clobber it).
    const int j = fcntl(job[0], F_DUPFD_CLOEXEC, 10), r = fcntl(result[1], F_DUPFD_CLOEXEC, 10);
    const int l = fcntl(log[1], F_DUPFD_CLOEXEC, 10), o = fcntl(out, F_DUPFD_CLOEXEC, 10);
    if (j < 0 || r < 0 || l < 0 || o < 0) _exit(126);
    if (dup2(r, 3) < 0) _exit(126);
    if (dup2(j, 0) < 0 || dup2(l, 1) < 0 || dup2(l, 2) < 0 || dup2(o, 4) < 0) child_fail(3, "dup2");
    if (syscall(SYS_close_range, 5u, ~0u, 0u) != 0)
      for (int fd = 5; fd < 1024; ++fd) ::close(fd);
    for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argv[0], argv.data(), envp.data());
    child_fail(3, "execve");
  }
  setpgid(pid, pid);  // also in the parent, so kill(-pid) works at once
  ::close(job[0]);
  ::close(result[1]);
  ::close(log[1]);
  p->pid_ = pid;
  p->job_fd_ = job[1];
  p->result_fd_ = result[0];
  p->log_fd_ = log[0];
  p->out_fd_ = out;
  fcntl(p->result_fd_, F_SETFL, O_NONBLOCK);
  fcntl(p->log_fd_, F_SETFL, O_NONBLOCK);
  p->started_ = Clock::now();
  return p;
}

RunnerProcess::~RunnerProcess() {
  if (pid_ > 0 && !exit_) {
    kill();
    wait();
  }
  close_fd(job_fd_);
  close_fd(result_fd_);
  close_fd(log_fd_);
  close_fd(out_fd_);
}

bool RunnerProcess::pump(int timeout_ms) {
  pollfd fds[2] = {{result_fd_, POLLIN, 0}, {log_fd_, POLLIN, 0}};
  const nfds_t n = log_fd_ >= 0 ? 2 : 1;
  if (result_fd_ < 0) fds[0].fd = -1;
  const int rc = poll(fds, n, timeout_ms);
  if (rc < 0 && errno != EINTR) throw std::runtime_error("poll failed");
  char buf[65536];
  if (log_fd_ >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
    for (;;) {
      const ssize_t got = ::read(log_fd_, buf, sizeof buf);
      if (got > 0) {
        const std::size_t keep = std::min<std::size_t>(static_cast<std::size_t>(got),
                                                       spec_.max_output_bytes - std::min(spec_.max_output_bytes, output_.size()));
        output_.append(buf, keep);
        dropped_ += static_cast<std::uint64_t>(got) - keep;
        continue;
      }
      if (got == 0) close_fd(log_fd_);
      break;
    }
  }
  if (result_fd_ >= 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
    for (;;) {
      const ssize_t got = ::read(result_fd_, buf, sizeof buf);
      if (got > 0) {
        line_buf_.append(buf, static_cast<std::size_t>(got));
        std::size_t pos;
        while ((pos = line_buf_.find('\n')) != std::string::npos) {
          lines_.push_back(line_buf_.substr(0, pos));
          line_buf_.erase(0, pos + 1);
        }
        if (line_buf_.size() > (1u << 20)) {  // a runner that writes a megabyte without a newline
          lines_.push_back(std::move(line_buf_));
          line_buf_.clear();
        }
        continue;
      }
      if (got == 0) {
        close_fd(result_fd_);
        result_eof_ = true;
      }
      break;
    }
  }
  return !result_eof_;
}

RunnerProcess::Read RunnerProcess::next(Event& out, Clock::time_point deadline) {
  for (;;) {
    if (!lines_.empty()) {
      std::string line = std::move(lines_.front());
      lines_.pop_front();
      out.t = std::chrono::duration<double>(Clock::now() - job_sent_).count();
      try {
        out.body = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception&) {
        return Read::malformed;
      }
      if (!out.body.is_object() || !out.body.contains("event") || !out.body.at("event").is_string())
        return Read::malformed;
      return Read::event;
    }
    if (result_eof_) return Read::eof;
    if (Clock::now() >= deadline) return Read::timeout;
    pump(std::max(1, ms_until(deadline)));
  }
}

std::optional<nlohmann::json> RunnerProcess::wait_ready(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Event ev;
  switch (next(ev, deadline)) {
    case Read::event: {
      const auto name = ev.body.at("event").get<std::string>();
      if (name == "ready" || name == "probe" || name == "bandwidth") return ev.body;
      error_ = ev.body.value("message", std::string("runner failed before it was ready"));
      return std::nullopt;
    }
    case Read::timeout: error_ = "runner not ready within the start-up deadline"; return std::nullopt;
    case Read::eof: error_ = "runner exited during start-up"; return std::nullopt;
    case Read::malformed: error_ = "runner sent malformed data during start-up"; return std::nullopt;
  }
  return std::nullopt;
}

void RunnerProcess::send_job(const Job& job) {
  std::string line = to_json(job).dump();
  line.push_back('\n');
  job_sent_ = Clock::now();
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0 && job_fd_ >= 0) {
    const ssize_t n = ::write(job_fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the runner is gone; reading its events tells why
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  close_fd(job_fd_);
}

void RunnerProcess::kill() {
  if (pid_ > 0 && !exit_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    killed_ = true;
  }
}

Exit RunnerProcess::wait() {
  if (exit_) return *exit_;
  int status = 0;
  // A runner that sent its result exits at once; give it a moment, then kill.
  for (int i = 0; i < 200; ++i) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (r < 0) { status = -1; break; }
    if (i == 199) {
      kill();
      waitpid(pid_, &status, 0);
      break;
    }
    pump(10);  // keeps draining, doubles as the pause between checks
  }
  ::kill(-pid_, SIGKILL);  // anything left in its process group
  Exit e;
  if (status != -1 && WIFEXITED(status)) {
    e.exited = true;
    e.status = WEXITSTATUS(status);
  } else if (status != -1 && WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
  }
  e.killed_by_us = killed_;
  exit_ = e;
  while (log_fd_ >= 0 && pump(0)) {
    if (log_fd_ < 0) break;
  }
  return e;
}

RunnerPool::RunnerPool(SpawnSpec spec, std::size_t size)
    : spec_(std::move(spec)), size_(std::max<std::size_t>(1, size)) {
  thread_ = std::thread([this] { refill(); });
}

RunnerPool::~RunnerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  ready_.clear();  // kills and reaps
}

void RunnerPool::refill() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (ready_.size() >= size_) {
      cv_.wait(lock);
      continue;
    }
    lock.unlock();
    std::unique_ptr<RunnerProcess> p;
    std::string err;
    try {
      p = RunnerProcess::start(spec_);
    } catch (const std::exception& e) {
      err = e.what();
    }
    lock.lock();
    if (p) {
      ready_.push_back(std::move(p));
      last_error_.clear();
    } else {
      last_error_ = err;
    }
    cv_.notify_all();
    if (!p) cv_.wait_for(lock, std::chrono::seconds(1));  // do not spin when fork fails
  }
}

std::unique_ptr<RunnerProcess> RunnerPool::take() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!ready_.empty()) {
      auto p = std::move(ready_.front());
      ready_.pop_front();
      cv_.notify_all();
      return p;
    }
    if (!last_error_.empty()) throw std::runtime_error("cannot start a runner: " + last_error_);
    cv_.wait(lock);
  }
}

}  // namespace d2k::runner
