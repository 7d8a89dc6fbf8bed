// Seccomp profiles: a syscall filter per kind of jailed work, each a table of rules in seccomp.cpp
// built by one builder. The jail loads one last before execve; the agent-mode GPU runner loads
// `runner` and then `runner_agent_layer` itself, after CUDA start-up.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace d2k::sandbox {

enum class SeccompProfile {
  none,      // no filter (tests and trusted helpers only)
  compiler,  // nvcc and its tools: exec allowed; no network, no tracing, no kernel-admin calls
  runner,    // compiler's rules plus: no exec, no fork, threads only, signals to itself only
  runner_agent_layer,  // stacked on `runner` in the agent-mode runner: kills what only an attack
                       // does, no new files, no AF_UNIX sockets
  runner_agent_gate,   // stacked last (hand-built BPF: libseccomp cannot say "every value but
                       // these"): prctl only from an allowlist, no further seccomp filters
};

struct FilterOptions {
  pid_t self_pid = 0;  // runner: the only pid kill/tgkill may target (0: getpid() when built)
  bool all_threads = true;  // in-process load: apply to every thread (SECCOMP_FILTER_FLAG_TSYNC)
  // An agent runner under a GPU tool (runner/tool_host.hpp), whose Landlock view grants file
  // creation in one private tmpfs only and whose network namespace holds only loopback:
  //  - runner_agent_layer leaves out its "no new files" rules (creat, O_CREAT opens, mkdir, rename,
  //    unlink, rmdir; links, symlinks, device nodes and truncate stay refused) and lets AF_INET and
  //    AF_INET6 sockets connect (the tool's injection library reaches its front end over
  //    127.0.0.1; bind, listen and accept stay refused);
  //  - every profile traps (SIGSYS to the thread, the call not made) where it would kill, so the
  //    runner can name the refused call (runner_main.cpp) instead of dying silently under the tool.
  bool tool_mode = false;
};

// prctl options the agent gate allows (reads, and settings that only restrict the caller), and
// those it kills (only an attack on the harness sets them); every other option answers EPERM.
extern const int kGatePrctlAllowed[];
extern const unsigned kGatePrctlAllowedCount;
extern const int kGatePrctlKilled[];
extern const unsigned kGatePrctlKilledCount;

const char* to_string(SeccompProfile profile);

// Builds the profile's filter as a classic BPF program, for loading between fork and exec
// (building allocates; loading does not). Throws std::runtime_error on a libseccomp failure.
std::vector<sock_filter> build_seccomp_program(SeccompProfile profile, const FilterOptions& options = {});

// Builds and loads the profile into the calling process (sets no_new_privs). Returns an empty
// string on success, otherwise what failed. A `none` profile loads nothing.
std::string load_seccomp(SeccompProfile profile, const FilterOptions& options = {});

// Async-signal-safe: loads a program built by build_seccomp_program. Returns 0 or an errno.
int load_seccomp_program(const sock_filter* program, unsigned short length) noexcept;

// "socket" for a syscall number of the native architecture ("syscall 41" when unknown).
std::string syscall_name(int number);

}  // namespace d2k::sandbox
