#include "sandbox/runner/runner_seccomp.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <string>

#include <seccomp.h>

#include "sandbox/seccomp.hpp"

namespace d2k::runner {
namespace {

struct Filter {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  ~Filter() { if (ctx != nullptr) seccomp_release(ctx); }
  void rule(std::uint32_t action, const char* name, unsigned n = 0, const scmp_arg_cmp* cmp = nullptr) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return;  // not on this architecture
    const int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    if (rc != 0) throw std::runtime_error(std::string("seccomp rule for ") + name + " failed: " + std::to_string(rc));
  }
  void kill(const char* name) { rule(SCMP_ACT_KILL_PROCESS, name); }
  void deny(const char* name, int err = EPERM) { rule(SCMP_ACT_ERRNO(err), name); }
};

}  // namespace

void install_agent_filter() {
  // The sandbox's shared `runner` profile first (no exec, threads only, signals to itself only,
  // AF_UNIX only, no kernel-admin calls), on every thread of the process.
  sandbox::FilterOptions options;
  options.self_pid = getpid();
  options.all_threads = true;
  if (const std::string err = sandbox::load_seccomp(sandbox::SeccompProfile::runner, options); !err.empty())
    throw std::runtime_error("runner seccomp profile: " + err);

  // Then this stricter layer (stacked filters: the strictest answer wins). Attempts that only an
  // attack makes are turned into a kill, so the parent can report sandbox_violation.
  Filter f;
  if (f.ctx == nullptr) throw std::runtime_error("seccomp_init failed");
  if (seccomp_attr_set(f.ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0 ||
      seccomp_attr_set(f.ctx, SCMP_FLTATR_CTL_TSYNC, 1) != 0)
    throw std::runtime_error("seccomp attributes failed");
  const auto self = static_cast<scmp_datum_t>(getpid());

  // No new programs, no debugging of others, no foreign memory.
  for (const char* s : {"execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev",
                        "kcmp", "pidfd_open", "pidfd_getfd", "pidfd_send_signal"})
    f.kill(s);
  // No processes: fork/vfork die; clone only with CLONE_THREAD; clone3 answers ENOSYS so glibc
  // falls back to clone (its flags live in memory seccomp cannot read).
  f.kill("fork");
  f.kill("vfork");
  {
    const scmp_arg_cmp no_thread = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0);
    f.rule(SCMP_ACT_KILL_PROCESS, "clone", 1, &no_thread);
  }
  f.deny("clone3", ENOSYS);
  // Signals only to ourselves (abort/raise use tgkill on our own pid).
  {
    const scmp_arg_cmp other = SCMP_A0(SCMP_CMP_NE, self);
    f.rule(SCMP_ACT_KILL_PROCESS, "kill", 1, &other);
    f.rule(SCMP_ACT_KILL_PROCESS, "tgkill", 1, &other);
    f.rule(SCMP_ACT_KILL_PROCESS, "rt_sigqueueinfo", 1, &other);
    f.rule(SCMP_ACT_KILL_PROCESS, "rt_tgsigqueueinfo", 1, &other);
    f.deny("tkill");
  }
  // No network (the runner also sits in an empty network namespace). AF_UNIX gets EPERM (libraries
  // probe it), any other family is an attack.
  {
    const scmp_arg_cmp not_unix = SCMP_A0(SCMP_CMP_NE, AF_UNIX);
    const scmp_arg_cmp is_unix = SCMP_A0(SCMP_CMP_EQ, AF_UNIX);
    f.rule(SCMP_ACT_KILL_PROCESS, "socket", 1, &not_unix);
    f.rule(SCMP_ACT_ERRNO(EPERM), "socket", 1, &is_unix);
    f.rule(SCMP_ACT_KILL_PROCESS, "socketpair", 1, &not_unix);
    f.rule(SCMP_ACT_ERRNO(EPERM), "socketpair", 1, &is_unix);
  }
  for (const char* s : {"connect", "bind", "listen", "accept", "accept4"}) f.deny(s);
  // io_uring bypasses seccomp for the operations it performs.
  for (const char* s : {"io_uring_setup", "io_uring_enter", "io_uring_register"}) f.deny(s);
  // No changes to the process's view or the kernel.
  for (const char* s : {"mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "move_mount",
                        "open_tree", "fsopen", "fsmount", "fsconfig", "mount_setattr", "bpf",
                        "perf_event_open", "init_module", "finit_module", "delete_module",
                        "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "keyctl",
                        "add_key", "request_key", "userfaultfd", "acct", "quotactl", "settimeofday",
                        "clock_settime", "adjtimex", "clock_adjtime", "syslog", "vhangup",
                        "name_to_handle_at", "open_by_handle_at", "iopl", "ioperm", "landlock_restrict_self"})
    f.kill(s);
  // No new files (disk bombs, leaving things behind for other episodes). Writing to files already
  // open stays possible and RLIMIT_FSIZE bounds it.
  for (const char* s : {"creat", "mkdir", "mkdirat", "mknod", "mknodat", "link", "linkat", "symlink",
                        "symlinkat", "rename", "renameat", "renameat2", "unlink", "unlinkat", "rmdir",
                        "truncate", "memfd_create", "memfd_secret"})
    f.deny(s);
  {
    const scmp_arg_cmp creat1 = SCMP_A1(SCMP_CMP_MASKED_EQ, O_CREAT, O_CREAT);
    const scmp_arg_cmp creat2 = SCMP_A2(SCMP_CMP_MASKED_EQ, O_CREAT, O_CREAT);
    f.rule(SCMP_ACT_ERRNO(EPERM), "open", 1, &creat1);
    f.rule(SCMP_ACT_ERRNO(EPERM), "openat", 1, &creat2);
    f.deny("openat2", ENOSYS);  // its flags are in memory; glibc falls back to openat
  }
  // Thread names stay as the driver set them (the runner tells agent threads from driver threads
  // by name).
  {
    const scmp_arg_cmp set_name = SCMP_A0(SCMP_CMP_EQ, PR_SET_NAME);
    f.rule(SCMP_ACT_ERRNO(EPERM), "prctl", 1, &set_name);
  }
  if (const int rc = seccomp_load(f.ctx); rc != 0)
    throw std::runtime_error("seccomp_load failed: " + std::to_string(rc));
}

}  // namespace d2k::runner
