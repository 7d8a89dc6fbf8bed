#include "sandbox/runner/runner_seccomp.hpp"

#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <stdexcept>
#include <string>

#include "sandbox/seccomp.hpp"

namespace d2k::runner {

namespace {

// Async-signal-safe: the number in decimal, one write, then EPERM as the call's result.
void refused_under_tool(int, siginfo_t* info, void* context) {
  char line[80] = "d2k-runner: refused system call ";
  std::size_t n = std::strlen(line);
  char digits[16];
  int d = 0;
  unsigned v = static_cast<unsigned>(info->si_syscall);
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && d < 15);
  while (d > 0) line[n++] = digits[--d];
  line[n++] = '\n';
  const ssize_t ignored = ::write(STDERR_FILENO, line, n);
  (void)ignored;
  static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RAX] = -EPERM;
}

}  // namespace

void install_agent_filter(bool tool_mode) {
  if (tool_mode) {
    struct sigaction sa{};
    sa.sa_sigaction = refused_under_tool;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGSYS, &sa, nullptr) != 0) throw std::runtime_error("SIGSYS handler for the tool mode");
  }
  // Both profiles are tables in sandbox/seccomp.cpp. The shared `runner` profile first (no exec,
  // threads only, signals to itself only, AF_UNIX only, no kernel-admin calls), then the stricter
  // agent layer stacked on it (the strictest answer wins); both on every thread of the process.
  sandbox::FilterOptions options;
  options.self_pid = getpid();
  options.all_threads = true;
  options.tool_mode = tool_mode;
  if (const std::string err = sandbox::load_seccomp(sandbox::SeccompProfile::runner, options); !err.empty())
    throw std::runtime_error("runner seccomp profile: " + err);
  if (const std::string err = sandbox::load_seccomp(sandbox::SeccompProfile::runner_agent_layer, options); !err.empty())
    throw std::runtime_error("runner agent seccomp layer: " + err);
  // Last: the gate (prctl allowlist, no filters of the agent's own); after it no filter can be added.
  if (const std::string err = sandbox::load_seccomp(sandbox::SeccompProfile::runner_agent_gate, options); !err.empty())
    throw std::runtime_error("runner agent seccomp gate: " + err);
}

}  // namespace d2k::runner
