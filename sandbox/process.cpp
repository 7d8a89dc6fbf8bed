// The spawn helper. Parent: resolve argv[0], open the redirections, build argv/envp and the list
// of descriptor moves, fork. Child: only async-signal-safe calls, each step returning 0 or an
// errno; the first failure goes to a close-on-exec pipe as {step, errno}, EOF there means execve
// succeeded (the same pattern as the jail).
#include "sandbox/process.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <new>
#include <system_error>

extern char** environ;

namespace d2k::sandbox {

void Fd::reset(int fd) noexcept {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

Pipe make_pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  return {Fd(fds[0]), Fd(fds[1])};
}

Fd make_memfd(const char* name) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "memfd_create");
  return Fd(fd);
}

std::string ProcessExit::describe() const {
  if (exited) return "exited with status " + std::to_string(status);
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return std::string("killed by signal ") + (name != nullptr ? std::string("SIG") + name : std::to_string(signal));
  }
  return "still running";
}

namespace {

// ---------------------------------------------------------------------------------------------
// Child side: no allocation, no exceptions.

enum Step : int { kGroup, kParentDeath, kLiftFds, kCloseFds, kMoveFds, kSignals, kChdir, kExec, kStepCount };
constexpr const char* kStepNames[kStepCount] = {"process group", "parent-death signal", "lift descriptors",
                                                "close descriptors", "redirect descriptors", "signals",
                                                "chdir", "execve"};

struct Failure {
  std::int32_t step;
  std::int32_t error;
};

struct Move {
  int source;  // the parent's descriptor
  int target;  // its number in the child
  int lifted;  // the child's copy above every target
};

struct ChildPlan {
  int err_w = -1;
  bool own_group = false;
  bool die_with_parent = false;
  pid_t parent = 0;
  Move* moves = nullptr;
  std::size_t n_moves = 0;
  int first_free = 3;     // lowest number above every target (and above 2)
  rlim_t max_fds = 1024;  // for the close_range fallback
  const char* cwd = nullptr;
  const char* exe = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
};

[[noreturn]] void child_fail(const ChildPlan& p, Step step, int err) {
  Failure f{step, err};
  ssize_t n;
  do n = ::write(p.err_w, &f, sizeof f); while (n < 0 && errno == EINTR);
  _exit(127);
}

int child_steps(ChildPlan& p, Step& step) {
  step = kGroup;
  if (p.own_group && setpgid(0, 0) != 0) return errno;
  step = kParentDeath;
  if (p.die_with_parent) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return errno;
    if (getppid() != p.parent) return ESRCH;  // the parent died before the request took hold
  }
  // Lift every source above every target first: a source may sit on another target's number
  // (dup2 onto it would clobber it), and the error pipe must not be overwritten either.
  step = kLiftFds;
  {
    const int e = fcntl(p.err_w, F_DUPFD_CLOEXEC, p.first_free);
    if (e < 0) return errno;
    p.err_w = e;
  }
  for (std::size_t i = 0; i < p.n_moves; ++i) {
    p.moves[i].lifted = fcntl(p.moves[i].source, F_DUPFD_CLOEXEC, p.first_free);
    if (p.moves[i].lifted < 0) return errno;
  }
  // Every descriptor above stderr closes at exec (the parent's sockets, logs, other children's
  // pipes), then dup2 clears the flag on the ones the child keeps.
  step = kCloseFds;
  if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
    for (rlim_t fd = 3; fd < p.max_fds; ++fd) fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  }
  step = kMoveFds;
  for (std::size_t i = 0; i < p.n_moves; ++i)
    if (dup2(p.moves[i].lifted, p.moves[i].target) < 0) return errno;
  step = kSignals;
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);  // fails harmlessly for KILL/STOP
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, nullptr) != 0) return errno;
  step = kChdir;
  if (p.cwd != nullptr && chdir(p.cwd) != 0) return errno;
  step = kExec;
  execve(p.exe, p.argv, p.envp);
  return errno;
}

// ---------------------------------------------------------------------------------------------
// Parent side.

std::string lookup_env(const SpawnSpec& spec, const std::string& name) {
  if (spec.env) {
    auto it = spec.env->find(name);
    return it == spec.env->end() ? std::string() : it->second;
  }
  if (auto it = spec.env_overrides.find(name); it != spec.env_overrides.end()) return it->second;
  const char* v = std::getenv(name.c_str());
  return v != nullptr ? v : "";
}

// argv[0] as a path: as given when it has a slash, else the first executable of that name in
// the child's PATH (as execvp would, but decided before fork).
std::string resolve_exe(const SpawnSpec& spec) {
  const std::string& name = spec.argv.front();
  if (name.find('/') != std::string::npos) return name;
  std::string path = lookup_env(spec, "PATH");
  if (path.empty()) path = "/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    const std::string cand = dir + "/" + name;
    std::error_code ec;
    if (std::filesystem::is_regular_file(cand, ec) && ::access(cand.c_str(), X_OK) == 0) return cand;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  throw std::system_error(ENOENT, std::generic_category(), "cannot start " + name + ": not found in PATH");
}

std::vector<std::string> environment(const SpawnSpec& spec) {
  std::map<std::string, std::string> env;
  if (spec.env) {
    env = *spec.env;
  } else {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string kv = *e;
      const auto eq = kv.find('=');
      if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
    }
  }
  for (const auto& [k, v] : spec.env_overrides) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) {
    if (k.empty() || k.find('=') != std::string::npos) throw std::invalid_argument("bad environment name: " + k);
    out.push_back(k + "=" + v);
  }
  return out;
}

Fd open_or_throw(const std::filesystem::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path.string());
  return Fd(fd);
}

}  // namespace

Child::Child(Child&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), group_(o.group_), pidfd_(std::move(o.pidfd_)), in_(std::move(o.in_)),
      out_(std::move(o.out_)), err_(std::move(o.err_)), exit_(std::exchange(o.exit_, std::nullopt)) {}

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    this->~Child();
    new (this) Child(std::move(o));
  }
  return *this;
}

Child::~Child() {
  if (pid_ > 0 && !exit_) {
    kill();
    reap(true);
  }
}

void Child::signal(int sig) {
  if (pid_ <= 0 || exit_) return;
  // Unreaped, the child's pid (and so its group id) cannot be reused.
  if (group_) ::kill(-pid_, sig);
  ::kill(pid_, sig);
}

void Child::reap(bool block) {
  if (pid_ <= 0 || exit_) return;
  siginfo_t info{};
  int rc;
  do rc = waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | (block ? 0 : WNOHANG));
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {  // not our child any more (SIGCHLD ignored?): nothing to wait for
    exit_ = ProcessExit{};
    return;
  }
  if (info.si_pid == 0) return;  // still running
  ProcessExit e;
  if (info.si_code == CLD_EXITED) {
    e.exited = true;
    e.status = info.si_status;
  } else {
    e.signal = info.si_status;
  }
  exit_ = e;
}

bool Child::exited() const {
  if (exit_) return true;
  if (!pidfd_) return false;
  pollfd p{pidfd_.get(), POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

std::optional<ProcessExit> Child::try_wait() {
  reap(false);
  return exit_;
}

ProcessExit Child::wait() {
  reap(true);
  return exit_.value_or(ProcessExit{});
}

Child spawn(const SpawnSpec& spec) {
  if (spec.argv.empty() || spec.argv.front().empty()) throw std::invalid_argument("spawn: empty argv");
  if (spec.in.kind == Stdio::merge || spec.out.kind == Stdio::merge)
    throw std::invalid_argument("spawn: only stderr can be merged (with stdout)");

  // Everything the child needs, prepared before fork.
  const std::string exe = resolve_exe(spec);
  std::vector<std::string> arg_store(spec.argv.begin(), spec.argv.end());
  std::vector<char*> argv;
  for (auto& a : arg_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store = environment(spec);
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string cwd = spec.cwd.string();

  Child child;
  std::vector<Fd> child_ends;  // the parent's copies of what the child gets; closed after fork
  std::vector<Move> moves;
  int out_source = 1;  // what stderr joins when merged
  auto stream = [&](const Stdio& s, int target, Fd& parent_end) {
    int source = -1;
    switch (s.kind) {
      case Stdio::inherit: return;
      case Stdio::null: child_ends.push_back(open_or_throw("/dev/null", target == 0 ? O_RDONLY : O_WRONLY)); break;
      case Stdio::fd:
        if (s.descriptor < 0) throw std::invalid_argument("spawn: no descriptor for stream " + std::to_string(target));
        source = s.descriptor;
        break;
      case Stdio::file:
        child_ends.push_back(open_or_throw(s.path, target == 0 ? O_RDONLY : O_WRONLY | O_CREAT | O_TRUNC));
        break;
      case Stdio::pipe: {
        Pipe p = make_pipe();
        parent_end = std::move(target == 0 ? p.write : p.read);
        child_ends.push_back(std::move(target == 0 ? p.read : p.write));
        break;
      }
      case Stdio::merge: source = out_source; break;
    }
    if (source < 0) source = child_ends.back().get();
    if (target == 1) out_source = source;
    moves.push_back({source, target, -1});
  };
  stream(spec.in, 0, child.in_);
  stream(spec.out, 1, child.out_);
  stream(spec.err, 2, child.err_);
  int first_free = 3;
  for (const auto& [source, target] : spec.keep_fds) {
    if (source < 0 || target < 3) throw std::invalid_argument("spawn: keep_fds needs a descriptor and a number above 2");
    moves.push_back({source, target, -1});
  }
  for (const Move& m : moves) first_free = std::max(first_free, m.target + 1);

  ChildPlan plan;
  Pipe errors = make_pipe();
  plan.err_w = errors.write.get();
  plan.own_group = spec.own_process_group;
  plan.die_with_parent = spec.die_with_parent;
  plan.parent = getpid();
  plan.moves = moves.data();
  plan.n_moves = moves.size();
  plan.first_free = first_free;
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    plan.max_fds = std::min<rlim_t>(nofile.rlim_cur, 1u << 20);
  plan.cwd = cwd.empty() ? nullptr : cwd.c_str();
  plan.exe = exe.c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();

  const pid_t pid = fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (pid == 0) {
    Step step = kGroup;
    const int err = child_steps(plan, step);
    child_fail(plan, step, err);
  }
  child.pid_ = pid;
  child.group_ = spec.own_process_group;
  errors.write.reset();
  child_ends.clear();

  Failure f{};
  ssize_t n;
  do n = ::read(errors.read.get(), &f, sizeof f); while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof f)) {
    child.wait();
    const char* step = f.step >= 0 && f.step < kStepCount ? kStepNames[f.step] : "unknown step";
    throw SpawnError(f.error, step, "cannot start " + exe + " (" + step + ")");
  }
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int e = errno;
    child.kill();
    child.wait();
    throw std::system_error(e, std::generic_category(), "pidfd_open");
  }
  child.pidfd_.reset(pidfd);
  return child;
}

RunResult run(const RunSpec& spec) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  RunResult r;
  Child child = spawn(spec);
  child.take_stdin().reset();  // a piped stdin gets EOF at once
  Fd out = child.take_stdout(), err = child.take_stderr();
  for (const Fd* f : {&out, &err})
    if (*f) fcntl(f->get(), F_SETFL, O_NONBLOCK);

  const auto deadline = spec.deadline.count() > 0 ? t0 + spec.deadline : Clock::time_point::max();
  bool exited = false;
  std::optional<Clock::time_point> drain_until;
  char buf[65536];
  auto read_into = [&](Fd& fd, std::string& text, std::uint64_t& dropped) {
    for (;;) {
      const ssize_t got = ::read(fd.get(), buf, sizeof buf);
      if (got > 0) {
        const std::size_t room = spec.max_output_bytes - std::min(spec.max_output_bytes, text.size());
        const std::size_t keep = std::min(room, static_cast<std::size_t>(got));
        text.append(buf, keep);
        dropped += static_cast<std::uint64_t>(got) - keep;
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got == 0 || errno != EAGAIN) fd.reset();
      return;
    }
  };
  while (!exited || out || err) {
    const auto now = Clock::now();
    if (!exited && !r.timed_out && now >= deadline) {
      r.timed_out = true;
      child.kill();
    }
    if (drain_until && now >= *drain_until) break;
    const auto until = drain_until ? *drain_until : deadline;
    const long long left = until == Clock::time_point::max()
                               ? 60000
                               : std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1;
    pollfd fds[3] = {{out.get(), POLLIN, 0}, {err.get(), POLLIN, 0}, {exited ? -1 : child.pidfd(), POLLIN, 0}};
    const int n = poll(fds, 3, static_cast<int>(std::clamp<long long>(left, 0, 60000)));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (fds[0].revents != 0) read_into(out, r.out, r.out_dropped);
    if (fds[1].revents != 0) read_into(err, r.err, r.err_dropped);
    if (fds[2].revents != 0) {
      // Exited (a zombie until reaped): its group id is still reserved, so what is left of the
      // group can be killed safely; writers outside the group get two more seconds.
      exited = true;
      child.kill();
      drain_until = Clock::now() + std::chrono::seconds(2);
    }
  }
  r.exit = child.wait();
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'') {
      const std::size_t end = line.find('\'', i + 1);
      if (end == std::string::npos) throw std::invalid_argument("unterminated ' in: " + line);
      word += line.substr(i + 1, end - i - 1);
      i = end;
    } else if (c == '"') {
      std::size_t j = i + 1;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] == '\\' && j + 1 < line.size() && (line[j + 1] == '"' || line[j + 1] == '\\')) ++j;
        word += line[j];
      }
      if (j >= line.size()) throw std::invalid_argument("unterminated \" in: " + line);
      i = j;
    } else if (c == '\\' && i + 1 < line.size()) {
      word += line[++i];
    } else {
      word += c;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace d2k::sandbox
