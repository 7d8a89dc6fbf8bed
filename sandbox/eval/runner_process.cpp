#include "sandbox/eval/runner_process.hpp"

#include <sys/socket.h>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

namespace d2k::runner {
namespace {

std::optional<struct stat> stat_of(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return st;
}

int ms_until(RunnerProcess::Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RunnerProcess::Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1000));
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
  sandbox::ProcessExit e;
  e.exited = exited;
  e.status = status;
  e.signal = signal;
  return e.describe();
}

std::unique_ptr<RunnerProcess> RunnerProcess::start(const SpawnSpec& spec) {
  std::unique_ptr<RunnerProcess> p(new RunnerProcess());
  p->spec_ = spec;
  sandbox::Pipe result;
  try {
    result = sandbox::make_pipe();
  } catch (const std::exception&) {
    throw std::runtime_error("pipe failed");
  }
  try {
    p->out_ = sandbox::make_memfd("d2k-outputs");
  } catch (const std::exception&) {
    throw std::runtime_error("memfd_create failed");
  }

  // fd 5: a unix socket for one descriptor (the GPU-resident output slots: the owner sends its
  // export to the parent, the parent sends it to the agent runner).
  int sv[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) throw std::runtime_error("socketpair failed");
  p->slots_ = sandbox::Fd(sv[0]);
  sandbox::Fd child_slots(sv[1]);

  sandbox::SpawnSpec s;
  s.argv = {spec.runner.string(), "--mode", std::string(mode_name(spec.mode)), "--result-fd", "3", "--out-fd", "4",
            "--slots-fd", "5"};
  if (spec.isolate && spec.mode != Mode::probe && spec.mode != Mode::bandwidth) s.argv.push_back("--isolate");
  if (spec.keep_net) s.argv.push_back("--keep-net");
  s.argv.insert(s.argv.begin(), spec.wrapper.begin(), spec.wrapper.end());
  std::map<std::string, std::string> env = {{"PATH", "/usr/bin:/bin"}, {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}, {"HOME", "/"},
                                            {"LANG", "C"}, {"CUDA_MODULE_LOADING", "LAZY"}};
  if (spec.gpu >= 0) env["CUDA_VISIBLE_DEVICES"] = std::to_string(spec.gpu);
  if (const char* ld = std::getenv("LD_LIBRARY_PATH")) env["LD_LIBRARY_PATH"] = ld;
  for (const auto& [k, v] : spec.extra_env) env[k] = v;
  s.env = std::move(env);
  s.in = sandbox::Stdio::piped();    // the job, one JSON line
  s.out = sandbox::Stdio::piped();   // stdout and stderr: drained, capped
  s.err = sandbox::Stdio::with_stdout();
  s.keep_fds = {{result.write.get(), 3}, {p->out_.get(), 4}, {child_slots.get(), 5}};
  s.own_process_group = true;
  s.die_with_parent = true;
  try {
    p->child_ = sandbox::spawn(s);
  } catch (const sandbox::SpawnError& e) {
    // Forked but not started (execve failed, ...): this answers like a runner that failed at once,
    // a setup_error result and exit status 127, read by wait_ready.
    const std::string message = std::string(e.step) + ": " + std::strerror(e.code().value());
    p->lines_.push_back(nlohmann::json{{"event", "result"}, {"status", "setup_error"}, {"message", message}}.dump());
    p->result_eof_ = true;
    Exit gone;
    gone.exited = true;
    gone.status = 127;
    p->exit_ = gone;
    p->started_ = Clock::now();
    return p;
  }
  p->job_ = p->child_.take_stdin();
  p->log_ = p->child_.take_stdout();
  p->result_ = std::move(result.read);
  fcntl(p->result_.get(), F_SETFL, O_NONBLOCK);
  fcntl(p->log_.get(), F_SETFL, O_NONBLOCK);
  p->started_ = Clock::now();
  if (const auto st = stat_of("/proc/" + std::to_string(p->child_.pid()) + "/exe"))
    p->exe_ = FileId{st->st_dev, st->st_ino, st->st_size, st->st_mtim.tv_sec * 1000000000ll + st->st_mtim.tv_nsec};
  return p;
}

std::string RunnerProcess::spare_defect() {
  if (exit_ || child_.exited()) return "exited";
  const std::string proc = "/proc/" + std::to_string(child_.pid());
  std::ifstream status(proc + "/status");
  std::string line;
  bool seen_state = false;
  while (std::getline(status, line)) {
    if (line.rfind("State:", 0) == 0) {
      seen_state = true;
      const auto c = line.find_first_not_of(" \t", 6);
      const char state = c == std::string::npos ? '?' : line[c];
      if (state == 'T' || state == 't' || state == 'Z' || state == 'X') return std::string("state ") + state;
    } else if (line.rfind("TracerPid:", 0) == 0 && std::atol(line.c_str() + 10) != 0) {
      return "traced";
    }
  }
  if (!seen_state) return "no /proc status";
  const auto exe = stat_of(proc + "/exe");
  if (!exe || !exe_) return "executable unknown";
  const FileId now{exe->st_dev, exe->st_ino, exe->st_size, exe->st_mtim.tv_sec * 1000000000ll + exe->st_mtim.tv_nsec};
  if (!(now == *exe_)) return "executable changed since start";
  const auto disk = stat_of(spec_.runner.string());
  if (!disk || disk->st_dev != exe_->dev || disk->st_ino != exe_->ino) return "runner binary replaced on disk";
  pump(0);
  if (!line_buf_.empty() || lines_.size() > 1) return "unexpected output before its job";
  if (lines_.size() == 1) {
    const auto ev = nlohmann::json::parse(lines_.front(), nullptr, false);
    if (!ev.is_object() || ev.value("event", std::string()) != "ready") return "unexpected output before its job";
  }
  return {};
}

bool RunnerProcess::said_ready() {
  if (exit_ || result_eof_) return true;
  pump(0);
  return !lines_.empty() || result_eof_;
}

RunnerProcess::~RunnerProcess() {
  if (child_.pid() > 0 && !exit_) {
    kill();
    wait();
  }
}

bool RunnerProcess::pump(int timeout_ms) {
  pollfd fds[2] = {{result_.get(), POLLIN, 0}, {log_.get(), POLLIN, 0}};
  const nfds_t n = log_ ? 2 : 1;
  const int rc = poll(fds, n, timeout_ms);
  if (rc < 0 && errno != EINTR) throw std::runtime_error("poll failed");
  char buf[65536];
  if (log_ && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
    for (;;) {
      const ssize_t got = ::read(log_.get(), buf, sizeof buf);
      if (got > 0) {
        const std::size_t keep = std::min<std::size_t>(static_cast<std::size_t>(got),
                                                       spec_.max_output_bytes - std::min(spec_.max_output_bytes, output_.size()));
        output_.append(buf, keep);
        dropped_ += static_cast<std::uint64_t>(got) - keep;
        continue;
      }
      if (got == 0) log_.reset();
      break;
    }
  }
  if (result_ && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
    for (;;) {
      const ssize_t got = ::read(result_.get(), buf, sizeof buf);
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
        result_.reset();
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
    pump(Clock::now() < spin_until_ ? 0 : std::max(1, ms_until(deadline)));
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

namespace {
// Writes all of `line`; false when the runner is gone (reading its events tells why). SIGPIPE is
// blocked for the write and a pending one consumed: a dead runner must not kill the server.
bool write_all(int fd, const std::string& line) {
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  const char* p = line.data();
  std::size_t left = line.size();
  bool ok = true;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      if (errno == EPIPE) {
        const timespec zero{0, 0};
        sigtimedwait(&pipe_set, nullptr, &zero);
      }
      break;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  return ok;
}
}  // namespace

void RunnerProcess::send_job(const Job& job) {
  std::string line = to_json(job).dump();
  line.push_back('\n');
  job_sent_ = Clock::now();
  if (job_ && !write_all(job_.get(), line)) job_.reset();
}

double RunnerProcess::send_line(const std::string& line) {
  const double t = std::chrono::duration<double>(Clock::now() - job_sent_).count();
  if (!job_ || !write_all(job_.get(), line + "\n")) {
    job_.reset();
    return -1;
  }
  return t;
}

namespace {
// Every thread of `pid` stopped (T/t) or the process gone (no /proc entry, zombie, dead).
bool all_threads_stopped(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return true;  // reaped or not ours to see: nothing of it runs
  for (const auto& e : it) {
    std::ifstream stat(e.path() / "stat");
    std::string text;
    if (!std::getline(stat, text)) continue;  // the thread ended meanwhile
    const auto close = text.rfind(')');       // the name may hold spaces and parentheses
    if (close == std::string::npos || close + 2 >= text.size()) continue;
    const char state = text[close + 2];
    if (state != 'T' && state != 't' && state != 'Z' && state != 'X') return false;
  }
  return true;
}
}  // namespace

double RunnerProcess::freeze(std::chrono::milliseconds timeout) {
  if (child_.pid() <= 0 || exit_) return -1;
  if (::kill(child_.pid(), SIGSTOP) != 0) return -1;
  const double t = now_t();
  const auto deadline = Clock::now() + timeout;
  while (!all_threads_stopped(child_.pid()) && Clock::now() < deadline) ::usleep(50);
  return t;
}

double RunnerProcess::thaw() {
  if (child_.pid() > 0 && !exit_) ::kill(child_.pid(), SIGCONT);
  return now_t();
}

void RunnerProcess::kill() {
  if (child_.pid() > 0 && !exit_) {
    child_.kill();  // the whole process group
    killed_ = true;
  }
}

Exit RunnerProcess::wait() {
  if (exit_) return *exit_;
  // A runner that sent its result exits at once; give it a moment, then kill.
  for (int i = 0; i < 200 && !child_.exited(); ++i) pump(10);  // keeps draining meanwhile
  if (!child_.exited()) kill();
  child_.signal(SIGKILL);  // anything left in its process group (the group id is still reserved)
  const sandbox::ProcessExit pe = child_.wait();
  Exit e;
  e.exited = pe.exited;
  e.status = pe.exited ? pe.status : -1;
  e.signal = pe.signal;
  e.killed_by_us = killed_;
  exit_ = e;
  while (log_ && pump(0)) {
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
    if (ready_.size() >= size_ || (held_ && !ready_.empty())) {
      cv_.wait(lock);
      continue;
    }
    starting_ = true;
    lock.unlock();
    std::unique_ptr<RunnerProcess> p;
    std::string err;
    try {
      p = RunnerProcess::start(spec_);
    } catch (const std::exception& e) {
      err = e.what();
    }
    lock.lock();
    starting_ = false;
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

void RunnerPool::hold(bool on) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = on;
  }
  cv_.notify_all();
}

bool RunnerPool::wait_started(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // A start in flight, or one the refill is about to make (fewer spares than the size, not held).
    bool busy = starting_ || (ready_.size() < size_ && !(held_ && !ready_.empty()) && last_error_.empty());
    for (auto& p : ready_)
      if (!busy && !p->said_ready()) busy = true;
    if (!busy) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    lock.lock();
  }
}

std::unique_ptr<RunnerProcess> RunnerPool::take() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!ready_.empty()) {
      auto p = std::move(ready_.front());
      ready_.pop_front();
      cv_.notify_all();
      if (!p->spare_defect().empty()) continue;  // killed and reaped here; the refill replaces it
      return p;
    }
    if (!last_error_.empty()) throw std::runtime_error("cannot start a runner: " + last_error_);
    cv_.wait(lock);
  }
}

}  // namespace d2k::runner
