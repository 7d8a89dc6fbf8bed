// Starting a process, the one way: argv only (no shell), the environment given or inherited, each
// standard stream redirected as asked, every other descriptor closed, optionally its own process
// group and death with the parent. `spawn` starts a child and hands back its pipes; `run` starts
// one, feeds nothing, captures its output with a byte cap and kills its process group at a
// deadline. `Fd` is the one owner of a file descriptor.
//
// The jail (jail.hpp) is the other way a process starts: it needs namespaces and ordered steps
// between clone and exec, so it clones itself, but it holds its descriptors in the same `Fd`.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace d2k::sandbox {

// A move-only owner of one file descriptor (-1: none); closes it when destroyed.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept;  // closes the one held, then holds `fd`

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd read, write;
};
// Both ends close-on-exec. Throws std::system_error.
Pipe make_pipe();
// An anonymous memory file (close-on-exec). Throws std::system_error.
Fd make_memfd(const char* name);

// How a process ended.
struct ProcessExit {
  bool exited = false;  // exited normally: `status` holds its exit status
  int status = -1;
  int signal = 0;       // otherwise the signal that killed it
  bool ok() const { return exited && status == 0; }
  std::string describe() const;  // "exited with status 2", "killed by signal SIGKILL"
};

// Where one of the child's standard streams comes from or goes to.
struct Stdio {
  enum Kind {
    inherit,  // the parent's own
    null,     // /dev/null
    fd,       // a descriptor of the parent (borrowed: it stays the caller's)
    file,     // a file: read for stdin; created/truncated for stdout and stderr
    pipe,     // a pipe whose other end the parent gets (Child::take_stdin/out/err); `run` reads it
    merge,    // stderr only: the same as stdout
  } kind = inherit;
  int descriptor = -1;
  std::filesystem::path path;

  static Stdio inherited() { return {inherit, -1, {}}; }
  static Stdio dev_null() { return {null, -1, {}}; }
  static Stdio from_fd(int f) { return {fd, f, {}}; }
  static Stdio to_file(std::filesystem::path p) { return {file, -1, std::move(p)}; }
  static Stdio piped() { return {pipe, -1, {}}; }
  static Stdio with_stdout() { return {merge, -1, {}}; }
};

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0]: a path, or a bare name looked up in the child's PATH
  // The child's whole environment; nullopt inherits the parent's, with `env_overrides` applied.
  std::optional<std::map<std::string, std::string>> env;
  std::map<std::string, std::string> env_overrides;
  std::filesystem::path cwd;  // empty: the parent's
  Stdio in = Stdio::dev_null();
  Stdio out = Stdio::inherited();
  Stdio err = Stdio::inherited();
  // More descriptors the child keeps: {parent's descriptor, number in the child} (e.g. the
  // runner's result pipe on 3). Everything else above 2 is closed at exec.
  std::vector<std::pair<int, int>> keep_fds;
  bool own_process_group = true;  // so that a kill reaches the grandchildren too
  bool die_with_parent = false;   // PR_SET_PDEATHSIG SIGKILL (and not started if the parent is gone)
};

// A started child. Destroying one that is still running kills its process group and reaps it.
class Child {
 public:
  Child() = default;
  Child(Child&& o) noexcept;
  Child& operator=(Child&& o) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }  // readable once the child has exited
  bool reaped() const { return exit_.has_value(); }
  bool exited() const;  // has ended (perhaps not yet reaped); never blocks
  // The parent's ends of the `pipe` streams (empty where the stream was not a pipe).
  Fd take_stdin() { return std::move(in_); }
  Fd take_stdout() { return std::move(out_); }
  Fd take_stderr() { return std::move(err_); }

  // Sends `sig` to the child's process group (to the child alone without one). Never after the
  // child was reaped, so a reused pid cannot be hit.
  void signal(int sig);
  void kill() { signal(9); }
  std::optional<ProcessExit> try_wait();  // reaps if it has exited; nullopt while it runs
  ProcessExit wait();                     // blocks until it exits, then reaps

 private:
  friend Child spawn(const SpawnSpec& spec);
  void reap(bool block);
  pid_t pid_ = -1;
  bool group_ = false;
  Fd pidfd_, in_, out_, err_;
  std::optional<ProcessExit> exit_;
};

// A child that was forked but failed before its execve: which step, and the errno (code()).
struct SpawnError : std::system_error {
  SpawnError(int error, const char* failed_step, const std::string& what)
      : std::system_error(error, std::generic_category(), what), step(failed_step) {}
  const char* step;  // "execve", "chdir", "redirect descriptors", ...
};

// Starts the child and returns once it has exec'd. Throws SpawnError when the child failed before
// exec (argv[0] not executable, a bad cwd), std::system_error when it could not be started at all
// (argv[0] not found in PATH, a redirection that cannot be opened, fork).
Child spawn(const SpawnSpec& spec);

struct RunSpec : SpawnSpec {
  // Wall clock from the start; at the deadline the whole process group gets SIGKILL (0: none).
  std::chrono::milliseconds deadline{0};
  std::size_t max_output_bytes = 1u << 20;  // per captured stream; the rest is counted, dropped
  RunSpec() {
    out = Stdio::piped();
    err = Stdio::piped();
  }
};

struct RunResult {
  ProcessExit exit;
  bool timed_out = false;
  std::string out, err;  // captured (stdout with stderr when err is `merge`)
  std::uint64_t out_dropped = 0, err_dropped = 0;
  double seconds = 0;
};

// Runs one command to completion. `pipe` streams are captured (stdin given as `pipe` gets EOF at
// once). When the child exits, what is left of its process group is killed; output still
// arriving from processes outside it is read for at most 2 s more. Throws like `spawn`.
RunResult run(const RunSpec& spec);

// Splits a command line such as $EDITOR into words (no shell): blanks separate words; single
// quotes keep everything literally, double quotes keep all but `\"` and `\\`, a backslash
// outside quotes escapes the next character. Throws std::invalid_argument on an open quote.
std::vector<std::string> split_words(const std::string& line);

}  // namespace d2k::sandbox
