// The jail: fork → own process group → rlimits → namespaces → file view → drop privileges →
// seccomp → exec, with a wall-clock deadline that kills everything the child started.
// Each step is a small function (see sandbox/README.md); the outcome is structured.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "sandbox/seccomp.hpp"

namespace d2k::sandbox {

struct Mount {               // one entry of the jail's file view (an allowlist)
  std::filesystem::path source;   // path outside (a directory or a file)
  std::filesystem::path target;   // path inside the jail
  bool writable = false;          // when running as root, the source is chowned to the jail's uid
};

struct JailSpec {
  std::vector<std::string> argv;                 // argv[0] is an absolute path inside the view
  std::map<std::string, std::string> env;        // the child's whole environment
  std::filesystem::path cwd = "/";               // inside the jail
  std::vector<Mount> mounts;                     // besides the base view (system dirs, /dev basics)
  bool network = false;                          // false: a fresh network namespace (loopback only)
  // Resource limits (0 = leave unset).
  std::uint64_t cpu_seconds = 60;
  std::uint64_t file_size_bytes = 256ull << 20;
  std::uint64_t address_space_bytes = 8ull << 30;
  std::uint64_t max_processes = 64;
  std::uint64_t max_open_files = 256;
  std::chrono::milliseconds deadline{60000};     // wall clock, whole process tree killed after it
  std::size_t max_output_bytes = 64u << 10;      // stdout+stderr kept; the rest is counted, dropped
  SeccompProfile seccomp = SeccompProfile::compiler;  // loaded last before execve (`runner` is
                                                 // refused here: it forbids execve; load it in-process)
  std::vector<std::filesystem::path> hidden_paths;  // masked (empty tmpfs / empty file) wherever the
                                                 // view would otherwise show them
  std::uint64_t tmp_size_bytes = 512ull << 20;   // the private /tmp (tmpfs) size
  std::filesystem::path cgroup;                  // a cgroup v2 directory the jail's first process
                                                 // joins before any step runs (so all it starts are
                                                 // in it too); empty: stay in the caller's cgroup
  std::vector<std::string> devices = {"null"};   // device nodes bound into /dev by name (plain names;
                                                 // the compile view needs only null: no random
                                                 // source, no /dev/zero to `#include`)  // /proc shows only the jail's own processes (procfs `subset=pid`): no /proc/cpuinfo, meminfo,
  // sys/kernel/random/boot_id or other host-wide files (issue 22.9; the toolchain needs only
  // /proc/self). false, or a kernel before 5.8: the whole procfs of the jail's pid namespace.
  bool proc_pids_only = true;
  // false: no procfs at all in the view (/proc is an empty read-only directory). The compile view
  // (issue 22): nvcc and the host compiler need none, and every process's /proc/self/mountinfo
  // would name the host paths of the view's bind mounts (the job dir under the server's state dir).
  bool mount_proc = true;
};

struct JailOutcome {
  bool started = false;        // false: setup failed before exec (setup_error says which step)
  std::string setup_error;
  int exit_status = -1;        // when exited normally
  int signal = 0;              // when killed by a signal
  bool timed_out = false;      // killed at the deadline
  bool seccomp_killed = false; // SIGSYS from the filter
  int violating_syscall = -1;  // syscall number on SIGSYS, when known (the kernel does not report
                               // it for SECCOMP_RET_KILL_PROCESS, so today always -1)
  std::string violation;       // human-readable, set when seccomp_killed
  std::string output;          // stdout+stderr interleaved, up to max_output_bytes
  std::uint64_t output_dropped = 0;
  double seconds = 0;          // wall time
};

// Runs one jailed command to completion. Thread-safe: many jails may run at once.
JailOutcome run_jailed(const JailSpec& spec);

// Hides `path` in the caller's mount namespace: an empty, mode-000, read-only tmpfs over a
// directory, /dev/null (read-only, nosuid, noexec) bound over a file. The one way paths are
// hidden: the jail's file view masks `hidden_paths` with it, the agent-mode runner its job's
// `hide_paths`. Async-signal-safe (no allocation); returns 0 or an errno.
int mask_path(const char* path, bool directory) noexcept;

// Kills every jail still running (used at server shutdown); later run_jailed calls return at once
// with started=false, setup_error="cancelled".
void cancel_all_jails();

}  // namespace d2k::sandbox
