#include "sandbox/seccomp.hpp"

#include <errno.h>
#include <string.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace d2k::sandbox {
namespace {

// Why each action: KILL_PROCESS where the call only makes sense as an attack on the jail or the
// host (tracing, reading other processes' memory, kernel programs, mounts): the attempt ends the
// job and is reported as a violation. ERRNO where ordinary programs probe and cope with failure
// (sockets, namespaces, io_uring, keyrings, perf), so a tool that merely tries still works.
struct Rule {
  const char* name;
  enum Kind { kill, eperm, eacces, enosys } kind;
};

constexpr Rule kCompilerKills[] = {
    {"ptrace", Rule::kill},         {"process_vm_readv", Rule::kill}, {"process_vm_writev", Rule::kill},
    {"bpf", Rule::kill},            {"mount", Rule::kill},            {"umount2", Rule::kill},
    {"pivot_root", Rule::kill},     {"chroot", Rule::kill},           {"open_tree", Rule::kill},
    {"move_mount", Rule::kill},     {"fsopen", Rule::kill},           {"fsconfig", Rule::kill},
    {"fsmount", Rule::kill},        {"fspick", Rule::kill},           {"mount_setattr", Rule::kill},
    {"kexec_load", Rule::kill},     {"kexec_file_load", Rule::kill},  {"init_module", Rule::kill},
    {"finit_module", Rule::kill},   {"delete_module", Rule::kill},
};

constexpr Rule kCompilerErrnos[] = {
    {"io_uring_setup", Rule::eperm},   // io_uring submissions bypass seccomp entirely
    {"io_uring_enter", Rule::eperm},   {"io_uring_register", Rule::eperm},
    {"keyctl", Rule::eperm},           {"add_key", Rule::eperm},
    {"request_key", Rule::eperm},      {"unshare", Rule::eperm},
    {"setns", Rule::eperm},            {"perf_event_open", Rule::eperm},
    {"userfaultfd", Rule::eperm},      {"pidfd_getfd", Rule::eperm},
    {"open_by_handle_at", Rule::eperm}, {"name_to_handle_at", Rule::eperm},
    {"process_madvise", Rule::eperm},  {"kcmp", Rule::eperm},
    {"quotactl", Rule::eperm},         {"acct", Rule::eperm},
    {"swapon", Rule::eperm},           {"swapoff", Rule::eperm},
    {"reboot", Rule::eperm},           {"syslog", Rule::eperm},
};

uint32_t action_of(Rule::Kind kind) {
  switch (kind) {
    case Rule::kill: return SCMP_ACT_KILL_PROCESS;
    case Rule::eperm: return SCMP_ACT_ERRNO(EPERM);
    case Rule::eacces: return SCMP_ACT_ERRNO(EACCES);
    case Rule::enosys: return SCMP_ACT_ERRNO(ENOSYS);
  }
  return SCMP_ACT_KILL_PROCESS;
}

struct CtxDeleter {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};
using Ctx = std::unique_ptr<void, CtxDeleter>;

void check(int rc, const std::string& what) {
  if (rc < 0) throw std::runtime_error("seccomp: " + what + ": " + std::string(strerror(-rc)));
}

// Adds a rule; a syscall this kernel/arch does not know is skipped (nothing to deny).
template <typename... Cmp>
void add(scmp_filter_ctx ctx, uint32_t action, const char* name, Cmp... cmps) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return;
  check(seccomp_rule_add(ctx, action, nr, sizeof...(Cmp), cmps...), std::string("rule ") + name);
}

void add_compiler_rules(scmp_filter_ctx ctx) {
  for (const Rule& r : kCompilerKills) add(ctx, action_of(r.kind), r.name);
  for (const Rule& r : kCompilerErrnos) add(ctx, action_of(r.kind), r.name);
  // Only local (AF_UNIX) sockets: no network even where a network namespace is shared. A 64-bit
  // NE compare denies any register value whose low half the kernel would read as another family.
  add(ctx, SCMP_ACT_ERRNO(EACCES), "socket", SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  add(ctx, SCMP_ACT_ERRNO(EACCES), "socketpair", SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  // personality(0xffffffff) only queries; setting (e.g. ADDR_NO_RANDOMIZE) is refused.
  add(ctx, SCMP_ACT_ERRNO(EPERM), "personality", SCMP_A0(SCMP_CMP_NE, 0xffffffffULL));
}

void add_runner_rules(scmp_filter_ctx ctx, pid_t self) {
  add(ctx, SCMP_ACT_KILL_PROCESS, "execve");
  add(ctx, SCMP_ACT_KILL_PROCESS, "execveat");
  add(ctx, SCMP_ACT_ERRNO(EPERM), "fork");
  add(ctx, SCMP_ACT_ERRNO(EPERM), "vfork");
  // Threads only: a clone without CLONE_THREAD is a new process.
  add(ctx, SCMP_ACT_ERRNO(EPERM), "clone", SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
  // clone3 passes its flags in memory, which seccomp cannot read: ENOSYS makes glibc fall back
  // to clone (EPERM would break thread creation).
  add(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3");
  const auto own = static_cast<scmp_datum_t>(self);
  add(ctx, SCMP_ACT_ERRNO(EPERM), "kill", SCMP_A0(SCMP_CMP_NE, own));
  add(ctx, SCMP_ACT_ERRNO(EPERM), "tgkill", SCMP_A0(SCMP_CMP_NE, own));
  add(ctx, SCMP_ACT_ERRNO(EPERM), "tkill");  // a bare thread id cannot be checked against our own
  add(ctx, SCMP_ACT_ERRNO(EPERM), "rt_sigqueueinfo", SCMP_A0(SCMP_CMP_NE, own));
  add(ctx, SCMP_ACT_ERRNO(EPERM), "rt_tgsigqueueinfo", SCMP_A0(SCMP_CMP_NE, own));
  add(ctx, SCMP_ACT_ERRNO(EPERM), "pidfd_send_signal");
  // socket: the compiler rule already refuses every family but AF_UNIX (AF_INET, AF_INET6,
  // AF_NETLINK included); CUDA's own AF_UNIX use keeps working.
}

Ctx build_ctx(SeccompProfile profile, const FilterOptions& options) {
  // Only the native architecture: a 32-bit (int 0x80) or x32 syscall hits the bad-arch action,
  // which kills the process. That denies strictly more than adding x86/x32 with the same rules.
  Ctx ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) throw std::runtime_error("seccomp: seccomp_init failed");
  check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "bad-arch action");
  check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 1), "no_new_privs");
  if (options.all_threads) check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_TSYNC, 1), "tsync");
  add_compiler_rules(ctx.get());
  if (profile == SeccompProfile::runner) add_runner_rules(ctx.get(), options.self_pid ? options.self_pid : getpid());
  return ctx;
}

}  // namespace

const char* to_string(SeccompProfile profile) {
  switch (profile) {
    case SeccompProfile::none: return "none";
    case SeccompProfile::compiler: return "compiler";
    case SeccompProfile::runner: return "runner";
  }
  return "?";
}

std::vector<sock_filter> build_seccomp_program(SeccompProfile profile, const FilterOptions& options) {
  if (profile == SeccompProfile::none) return {};
  Ctx ctx = build_ctx(profile, options);
  int fd = memfd_create("d2k-seccomp", MFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error("seccomp: memfd_create failed");
  std::vector<sock_filter> program;
  int rc = seccomp_export_bpf(ctx.get(), fd);
  if (rc == 0) {
    off_t size = lseek(fd, 0, SEEK_END);
    if (size <= 0 || size % sizeof(sock_filter) != 0) {
      rc = -EINVAL;
    } else {
      program.resize(static_cast<std::size_t>(size) / sizeof(sock_filter));
      if (pread(fd, program.data(), static_cast<std::size_t>(size), 0) != size) rc = -EIO;
    }
  }
  close(fd);
  check(rc, "export");
  if (program.size() > BPF_MAXINSNS) throw std::runtime_error("seccomp: program too long");
  return program;
}

int load_seccomp_program(const sock_filter* program, unsigned short length) noexcept {
  if (length == 0) return 0;
  sock_fprog prog{length, const_cast<sock_filter*>(program)};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) return errno;
  return 0;
}

std::string load_seccomp(SeccompProfile profile, const FilterOptions& options) {
  if (profile == SeccompProfile::none) return {};
  try {
    Ctx ctx = build_ctx(profile, options);
    int rc = seccomp_load(ctx.get());
    if (rc < 0) return std::string("seccomp_load: ") + strerror(-rc);
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string syscall_name(int number) {
  char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, number);
  if (!name) return "syscall " + std::to_string(number);
  std::string out = "syscall " + std::to_string(number) + " (" + name + ")";
  std::free(name);
  return out;
}

}  // namespace d2k::sandbox
