#include "sandbox/seccomp.hpp"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace d2k::sandbox {
namespace {

// Why each action: KILL_PROCESS where the call only makes sense as an attack on the jail or the
// host (tracing, reading other processes' memory, kernel programs, mounts): the attempt ends the
// job and is reported as a violation. ERRNO where ordinary programs probe and cope with failure
// (sockets, namespaces, io_uring, keyrings, perf), so a tool that merely tries still works.
enum class Act { kill, eperm, eacces, enosys, enomem };

// At most two argument conditions per rule, both must hold (several rules may name one syscall).
// Compares are 64-bit: garbage in a register's upper half makes an `ne` match (denied), never slip
// through.
struct Arg {
  enum Op { none, ne, eq, masked_eq, gt } op = none;
  unsigned index = 0;
  std::uint64_t mask = 0;   // masked_eq: (arg & mask) == value
  std::uint64_t value = 0;
  bool self = false;        // value is FilterOptions::self_pid
};

struct Rule {
  const char* name;
  Act act;
  Arg arg = {};
  Arg arg2 = {};  // a second condition on another argument (op none: absent)
};

constexpr Arg arg_ne(unsigned i, std::uint64_t v) { return {Arg::ne, i, 0, v, false}; }
constexpr Arg arg_eq(unsigned i, std::uint64_t v) { return {Arg::eq, i, 0, v, false}; }
constexpr Arg arg_masked_eq(unsigned i, std::uint64_t mask, std::uint64_t v) { return {Arg::masked_eq, i, mask, v, false}; }
constexpr Arg arg_not_self(unsigned i) { return {Arg::ne, i, 0, 0, true}; }
constexpr Arg arg_gt(unsigned i, std::uint64_t v) { return {Arg::gt, i, 0, v, false}; }

// The largest shared anonymous mapping agent code may make (pinned staging buffers).
constexpr std::uint64_t kSharedAnonMax = 256ull << 20;

// `compiler`: nvcc and its tools.
constexpr Rule kCompilerRules[] = {
    {"ptrace", Act::kill},         {"process_vm_readv", Act::kill}, {"process_vm_writev", Act::kill},
    {"bpf", Act::kill},            {"mount", Act::kill},            {"umount2", Act::kill},
    {"pivot_root", Act::kill},     {"chroot", Act::kill},           {"open_tree", Act::kill},
    {"move_mount", Act::kill},     {"fsopen", Act::kill},           {"fsconfig", Act::kill},
    {"fsmount", Act::kill},        {"fspick", Act::kill},           {"mount_setattr", Act::kill},
    {"kexec_load", Act::kill},     {"kexec_file_load", Act::kill},  {"init_module", Act::kill},
    {"finit_module", Act::kill},   {"delete_module", Act::kill},
    {"io_uring_setup", Act::eperm},   // io_uring submissions bypass seccomp entirely
    {"io_uring_enter", Act::eperm},   {"io_uring_register", Act::eperm},
    {"keyctl", Act::eperm},           {"add_key", Act::eperm},
    {"request_key", Act::eperm},      {"unshare", Act::eperm},
    {"setns", Act::eperm},            {"perf_event_open", Act::eperm},
    {"userfaultfd", Act::eperm},      {"pidfd_getfd", Act::eperm},
    {"open_by_handle_at", Act::eperm}, {"name_to_handle_at", Act::eperm},
    {"process_madvise", Act::eperm},  {"kcmp", Act::eperm},
    {"quotactl", Act::eperm},         {"acct", Act::eperm},
    {"swapon", Act::eperm},           {"swapoff", Act::eperm},
    {"reboot", Act::eperm},           {"syslog", Act::eperm},
    // Only local (AF_UNIX) sockets: no network even where a network namespace is shared.
    {"socket", Act::eacces, arg_ne(0, AF_UNIX)},
    {"socketpair", Act::eacces, arg_ne(0, AF_UNIX)},
    // personality(0xffffffff) only queries; setting (e.g. ADDR_NO_RANDOMIZE) is refused.
    {"personality", Act::eperm, arg_ne(0, 0xffffffffULL)},
};

// `runner`, added to the compiler's rules: no programs, threads only, signals to itself only.
// (socket: the compiler rule already refuses every family but AF_UNIX; CUDA's own AF_UNIX use
// keeps working.)
constexpr Rule kRunnerRules[] = {
    {"execve", Act::kill},
    {"execveat", Act::kill},
    {"fork", Act::eperm},
    {"vfork", Act::eperm},
    {"clone", Act::eperm, arg_masked_eq(0, CLONE_THREAD, 0)},  // a clone without CLONE_THREAD is a process
    // clone3 passes its flags in memory, which seccomp cannot read: ENOSYS makes glibc fall back
    // to clone (EPERM would break thread creation).
    {"clone3", Act::enosys},
    {"kill", Act::eperm, arg_not_self(0)},
    {"tgkill", Act::eperm, arg_not_self(0)},
    {"tkill", Act::eperm},  // a bare thread id cannot be checked against our own
    {"rt_sigqueueinfo", Act::eperm, arg_not_self(0)},
    {"rt_tgsigqueueinfo", Act::eperm, arg_not_self(0)},
    {"pidfd_send_signal", Act::eperm},
};

// `runner_agent_layer`: stacked on `runner` in the agent-mode runner (the strictest answer of the
// two filters wins). What only an attack does is a kill here, so the parent reports
// sandbox_violation; what libraries probe gets an errno.
constexpr Rule kRunnerAgentLayerRules[] = {
    // No new programs, no debugging of others, no foreign memory.
    {"execve", Act::kill}, {"execveat", Act::kill}, {"ptrace", Act::kill},
    {"process_vm_readv", Act::kill}, {"process_vm_writev", Act::kill}, {"kcmp", Act::kill},
    {"pidfd_open", Act::kill}, {"pidfd_getfd", Act::kill}, {"pidfd_send_signal", Act::kill},
    // No processes: fork/vfork die; clone only with CLONE_THREAD; clone3 answers ENOSYS so glibc
    // falls back to clone (its flags live in memory seccomp cannot read).
    {"fork", Act::kill}, {"vfork", Act::kill},
    {"clone", Act::kill, arg_masked_eq(0, CLONE_THREAD, 0)},
    {"clone3", Act::enosys},
    // Signals only to ourselves (abort/raise use tgkill on our own pid).
    {"kill", Act::kill, arg_not_self(0)}, {"tgkill", Act::kill, arg_not_self(0)},
    {"rt_sigqueueinfo", Act::kill, arg_not_self(0)}, {"rt_tgsigqueueinfo", Act::kill, arg_not_self(0)},
    {"tkill", Act::eperm},
    // No network (the runner also sits in an empty network namespace). AF_UNIX gets EPERM
    // (libraries probe it), any other family is an attack.
    {"socket", Act::kill, arg_ne(0, AF_UNIX)}, {"socket", Act::eperm, arg_eq(0, AF_UNIX)},
    {"socketpair", Act::kill, arg_ne(0, AF_UNIX)}, {"socketpair", Act::eperm, arg_eq(0, AF_UNIX)},
    {"connect", Act::eperm}, {"bind", Act::eperm}, {"listen", Act::eperm}, {"accept", Act::eperm},
    {"accept4", Act::eperm},
    // io_uring bypasses seccomp for the operations it performs.
    {"io_uring_setup", Act::eperm}, {"io_uring_enter", Act::eperm}, {"io_uring_register", Act::eperm},
    // No changes to the process's view or the kernel.
    {"mount", Act::kill}, {"umount2", Act::kill}, {"pivot_root", Act::kill}, {"chroot", Act::kill},
    {"unshare", Act::kill}, {"setns", Act::kill}, {"move_mount", Act::kill}, {"open_tree", Act::kill},
    {"fsopen", Act::kill}, {"fsmount", Act::kill}, {"fsconfig", Act::kill}, {"mount_setattr", Act::kill},
    {"bpf", Act::kill}, {"perf_event_open", Act::kill}, {"init_module", Act::kill},
    {"finit_module", Act::kill}, {"delete_module", Act::kill}, {"kexec_load", Act::kill},
    {"kexec_file_load", Act::kill}, {"reboot", Act::kill}, {"swapon", Act::kill}, {"swapoff", Act::kill},
    {"keyctl", Act::kill}, {"add_key", Act::kill}, {"request_key", Act::kill}, {"userfaultfd", Act::kill},
    {"acct", Act::kill}, {"quotactl", Act::kill}, {"settimeofday", Act::kill}, {"clock_settime", Act::kill},
    {"adjtimex", Act::kill}, {"clock_adjtime", Act::kill}, {"syslog", Act::kill}, {"vhangup", Act::kill},
    {"name_to_handle_at", Act::kill}, {"open_by_handle_at", Act::kill}, {"iopl", Act::kill},
    {"ioperm", Act::kill}, {"landlock_restrict_self", Act::kill},
    // No new files (disk bombs, leaving things behind for other episodes). Writing to files already
    // open stays possible and RLIMIT_FSIZE bounds it.
    {"creat", Act::eperm}, {"mkdir", Act::eperm}, {"mkdirat", Act::eperm}, {"mknod", Act::eperm},
    {"mknodat", Act::eperm}, {"link", Act::eperm}, {"linkat", Act::eperm}, {"symlink", Act::eperm},
    {"symlinkat", Act::eperm}, {"rename", Act::eperm}, {"renameat", Act::eperm}, {"renameat2", Act::eperm},
    {"unlink", Act::eperm}, {"unlinkat", Act::eperm}, {"rmdir", Act::eperm}, {"truncate", Act::eperm},
    {"memfd_create", Act::eperm}, {"memfd_secret", Act::eperm},
    {"open", Act::eperm, arg_masked_eq(1, O_CREAT, O_CREAT)},
    {"openat", Act::eperm, arg_masked_eq(2, O_CREAT, O_CREAT)},
    {"openat2", Act::enosys},  // its flags are in memory; glibc falls back to openat
    // Host memory the runner's RLIMIT_DATA does not count: shared anonymous mappings and SysV
    // segments (ENOMEM/EPERM, as an allocator copes with). Shared anonymous mappings up to
    // kSharedAnonMax stay allowed: CUDA's pinned host memory (cudaMallocHost) is one (refusing
    // them all failed that honest control on the H200, 2026-12-01). Many small ones remain a gap
    // that only a memory cgroup closes (docs/threat-model-confinement.md, class 8).
    {"mmap", Act::enomem, arg_masked_eq(3, MAP_SHARED | MAP_ANONYMOUS, MAP_SHARED | MAP_ANONYMOUS),
     arg_gt(1, kSharedAnonMax)},
    {"shmget", Act::eperm}, {"shmat", Act::eperm},
    // prctl: the gate's allowlist (runner_agent_gate).
};

// `runner_agent_gate`: a hand-built classic BPF program (see build_gate_program).
#ifdef __NR_fchmodat2
constexpr std::uint32_t kNrFchmodat2 = __NR_fchmodat2;
#else
constexpr std::uint32_t kNrFchmodat2 = 452;  // x86-64, Linux 6.6
#endif
// tool_mode (FilterOptions): SECCOMP_RET_TRAP where it kills (a foreign architecture still kills).
std::vector<sock_filter> build_gate_program(bool tool_mode = false) {
  const std::uint32_t kill = tool_mode ? SECCOMP_RET_TRAP : SECCOMP_RET_KILL_PROCESS;
  std::vector<sock_filter> p;
  auto stmt = [&](std::uint16_t code, std::uint32_t k) { p.push_back(BPF_STMT(code, k)); };
  auto jeq_ret = [&](std::uint32_t value, std::uint32_t ret) {  // if A == value: return ret
    p.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1));
    stmt(BPF_RET | BPF_K, ret);
  };
  constexpr std::uint32_t kNr = offsetof(seccomp_data, nr);
  constexpr std::uint32_t kArch = offsetof(seccomp_data, arch);
  constexpr std::uint32_t kArg0 = offsetof(seccomp_data, args[0]);  // low half on x86-64 (little-endian)
  stmt(BPF_LD | BPF_W | BPF_ABS, kArch);
  p.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
  stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  stmt(BPF_LD | BPF_W | BPF_ABS, kNr);
  p.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));  // x32 system calls
  stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  // No filter of the agent's own (it could trap or delay the harness's system calls).
  jeq_ret(__NR_seccomp, kill);
  // prctl: the option is an int (the kernel reads the low half only).
  const std::uint32_t block = 2 + 2 * (kGatePrctlKilledCount + kGatePrctlAllowedCount);
  p.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_prctl, 0, static_cast<std::uint8_t>(block)));
  stmt(BPF_LD | BPF_W | BPF_ABS, kArg0);
  for (unsigned i = 0; i < kGatePrctlKilledCount; ++i)
    jeq_ret(static_cast<std::uint32_t>(kGatePrctlKilled[i]), kill);
  for (unsigned i = 0; i < kGatePrctlAllowedCount; ++i)
    jeq_ret(static_cast<std::uint32_t>(kGatePrctlAllowed[i]), SECCOMP_RET_ALLOW);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
  // No new executable memory but private, read-only mappings of files (what the loader makes: the
  // agent's .so, its libraries, the driver's JIT library). Anonymous or shared executable mappings,
  // writable and executable ones (a private PROT_WRITE|PROT_EXEC mapping of /dev/zero or of any
  // readable file is fresh writable code), and making any mapping executable afterwards (mprotect,
  // pkey_mprotect), kill. Files the agent could have written are outside its Landlock view and the
  // output file is write-only (confine.hpp); the prot and flags are ints.
  constexpr std::uint32_t kArg2 = offsetof(seccomp_data, args[2]);
  constexpr std::uint32_t kArg3 = offsetof(seccomp_data, args[3]);
  p.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 0, 7));
  stmt(BPF_LD | BPF_W | BPF_ABS, kArg2);
  p.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 3));   // not executable: allow
  p.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_WRITE, 3, 0));  // writable and executable: kill
  stmt(BPF_LD | BPF_W | BPF_ABS, kArg3);
  p.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, MAP_ANONYMOUS | MAP_SHARED, 1, 0));
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  stmt(BPF_RET | BPF_K, kill);
  // No change of a file's mode: the output file's mode is what keeps it from being reopened for
  // reading and mapped (confine.hpp, make_write_only). By number: fchmodat2 (Linux 6.6) is newer
  // than some libseccomp name tables.
  for (std::uint32_t nr : {static_cast<std::uint32_t>(__NR_chmod), static_cast<std::uint32_t>(__NR_fchmod),
                           static_cast<std::uint32_t>(__NR_fchmodat), kNrFchmodat2})
    jeq_ret(nr, SECCOMP_RET_ERRNO | EPERM);
  for (std::uint32_t nr : {static_cast<std::uint32_t>(__NR_mprotect), static_cast<std::uint32_t>(__NR_pkey_mprotect)}) {
    p.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 4));
    stmt(BPF_LD | BPF_W | BPF_ABS, kArg2);
    p.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1));
    stmt(BPF_RET | BPF_K, kill);
    stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  }
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  return p;
}

int load_program(const sock_filter* program, unsigned short length, bool all_threads) noexcept {
  if (length == 0) return 0;
  sock_fprog prog{length, const_cast<sock_filter*>(program)};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  const unsigned flags = all_threads ? SECCOMP_FILTER_FLAG_TSYNC : 0;
  const long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
  if (rc < 0) return errno;
  if (rc > 0) return ESRCH;  // TSYNC: a thread (the id returned) could not be synchronised
  return 0;
}

uint32_t action_of(Act act) {
  switch (act) {
    case Act::kill: return SCMP_ACT_KILL_PROCESS;
    case Act::eperm: return SCMP_ACT_ERRNO(EPERM);
    case Act::eacces: return SCMP_ACT_ERRNO(EACCES);
    case Act::enosys: return SCMP_ACT_ERRNO(ENOSYS);
    case Act::enomem: return SCMP_ACT_ERRNO(ENOMEM);
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

// Adds a table's rules; a syscall this kernel/arch does not know is skipped (nothing to deny).
// The rules of runner_agent_layer that FilterOptions::tool_mode leaves out: "no new files", and
// the network ones a loopback connection to the tool's front end needs.
bool relaxed_for_tools(const Rule& r) {
  for (const char* n : {"connect", "socket"})
    if (std::strcmp(r.name, n) == 0)  // socket: the families other than AF_UNIX (AF_UNIX keeps its EPERM)
      return std::strcmp(n, "connect") == 0 || r.arg.op == Arg::ne;
  static constexpr const char* kNames[] = {"creat",  "mkdir",    "mkdirat",   "open",   "openat", "rename",
                                           "renameat", "renameat2", "unlink", "unlinkat", "rmdir"};
  for (const char* n : kNames)
    if (std::strcmp(r.name, n) == 0) return std::strncmp(n, "open", 4) != 0 || r.arg.mask == O_CREAT;
  return false;
}

template <std::size_t N>
void add_rules(scmp_filter_ctx ctx, const Rule (&rules)[N], pid_t self, bool tool_mode = false) {
  for (const Rule& r : rules) {
    if (tool_mode && relaxed_for_tools(r)) continue;
    const int nr = seccomp_syscall_resolve_name(r.name);
    if (nr == __NR_SCMP_ERROR) continue;
    const auto cmp = [&](const Arg& a) {
      const scmp_datum_t value = a.self ? static_cast<scmp_datum_t>(self) : a.value;
      switch (a.op) {
        case Arg::ne: return SCMP_CMP(a.index, SCMP_CMP_NE, value);
        case Arg::eq: return SCMP_CMP(a.index, SCMP_CMP_EQ, value);
        case Arg::masked_eq: return SCMP_CMP(a.index, SCMP_CMP_MASKED_EQ, a.mask, value);
        case Arg::gt: return SCMP_CMP(a.index, SCMP_CMP_GT, value);
        case Arg::none: break;
      }
      return SCMP_CMP(0, SCMP_CMP_EQ, 0);  // not reached: callers skip `none`
    };
    int rc = 0;
    const uint32_t action = tool_mode && r.act == Act::kill ? SCMP_ACT_TRAP : action_of(r.act);
    if (r.arg.op == Arg::none)
      rc = seccomp_rule_add(ctx, action, nr, 0);
    else if (r.arg2.op == Arg::none)
      rc = seccomp_rule_add(ctx, action, nr, 1, cmp(r.arg));
    else
      rc = seccomp_rule_add(ctx, action, nr, 2, cmp(r.arg), cmp(r.arg2));
    check(rc, std::string("rule ") + r.name);
  }
}

Ctx build_ctx(SeccompProfile profile, const FilterOptions& options) {
  // Only the native architecture: a 32-bit (int 0x80) or x32 syscall hits the bad-arch action,
  // which kills the process. That denies strictly more than adding x86/x32 with the same rules.
  Ctx ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) throw std::runtime_error("seccomp: seccomp_init failed");
  check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "bad-arch action");
  check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 1), "no_new_privs");
  if (options.all_threads) check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_TSYNC, 1), "tsync");
  const pid_t self = options.self_pid ? options.self_pid : getpid();
  switch (profile) {
    case SeccompProfile::none: break;
    case SeccompProfile::compiler: add_rules(ctx.get(), kCompilerRules, self); break;
    case SeccompProfile::runner:
      add_rules(ctx.get(), kCompilerRules, self, options.tool_mode);
      add_rules(ctx.get(), kRunnerRules, self, options.tool_mode);
      break;
    case SeccompProfile::runner_agent_layer:
      add_rules(ctx.get(), kRunnerAgentLayerRules, self, options.tool_mode);
      break;
    case SeccompProfile::runner_agent_gate: break;  // hand-built: build_gate_program
  }
  return ctx;
}

}  // namespace

// Reads, and settings that only restrict the caller (no_new_privs), plus thread names (the runner
// tells threads apart by id, never by name; CUDA names the threads it starts lazily) and
// PR_SET_VMA (names of anonymous mappings, which allocators set).
const int kGatePrctlAllowed[] = {
    PR_SET_NAME,      PR_GET_PDEATHSIG, PR_GET_DUMPABLE, PR_GET_KEEPCAPS,   PR_GET_NAME,          PR_GET_SECCOMP,
    PR_CAPBSET_READ,  PR_GET_SECUREBITS, PR_GET_TIMERSLACK, PR_MCE_KILL_GET,    PR_GET_CHILD_SUBREAPER,
    PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS, PR_GET_TID_ADDRESS, PR_GET_THP_DISABLE, PR_GET_FP_MODE,
    PR_GET_SPECULATION_CTRL, PR_SET_VMA,
};
const unsigned kGatePrctlAllowedCount = sizeof kGatePrctlAllowed / sizeof kGatePrctlAllowed[0];
// Outliving the server (parent-death signal), becoming traceable or dumpable by others, a filter
// or syscall user dispatch of one's own, rewriting the process's memory map description.
const int kGatePrctlKilled[] = {
    PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_PTRACER,  PR_SET_SECCOMP, PR_SET_MM,
    PR_SET_CHILD_SUBREAPER, PR_SET_SYSCALL_USER_DISPATCH, PR_SET_SECUREBITS, PR_SET_KEEPCAPS,
};
const unsigned kGatePrctlKilledCount = sizeof kGatePrctlKilled / sizeof kGatePrctlKilled[0];

const char* to_string(SeccompProfile profile) {
  switch (profile) {
    case SeccompProfile::none: return "none";
    case SeccompProfile::compiler: return "compiler";
    case SeccompProfile::runner: return "runner";
    case SeccompProfile::runner_agent_layer: return "runner_agent_layer";
    case SeccompProfile::runner_agent_gate: return "runner_agent_gate";
  }
  return "?";
}

std::vector<sock_filter> build_seccomp_program(SeccompProfile profile, const FilterOptions& options) {
  if (profile == SeccompProfile::none) return {};
  if (profile == SeccompProfile::runner_agent_gate) return build_gate_program(options.tool_mode);
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
  return load_program(program, length, false);
}

std::string load_seccomp(SeccompProfile profile, const FilterOptions& options) {
  if (profile == SeccompProfile::none) return {};
  try {
    if (profile == SeccompProfile::runner_agent_gate) {
      const auto program = build_gate_program(options.tool_mode);
      if (const int err = load_program(program.data(), static_cast<unsigned short>(program.size()), options.all_threads))
        return std::string("loading the gate: ") + strerror(err);
      return {};
    }
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
