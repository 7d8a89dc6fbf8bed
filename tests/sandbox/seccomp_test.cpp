// The seccomp profiles are tables (sandbox/seccomp.cpp). When they became tables, the rules had to
// stay exactly what the imperative code said: this file keeps that code, as it stood before the
// move (the compiler and runner profiles from sandbox/seccomp.cpp, the agent layer from
// sandbox/runner/runner_seccomp.cpp), as the reference, and compares the BPF programs that
// libseccomp generates from both, instruction by instruction. A changed action, a dropped
// syscall or a different argument condition changes the program.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/shm.h>
#include <sys/prctl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.hpp"
#include "sandbox/seccomp.hpp"

using namespace d2k::sandbox;

namespace reference {

struct Ctx {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  ~Ctx() { seccomp_release(ctx); }
};

template <typename... Cmp>
void add(scmp_filter_ctx ctx, uint32_t action, const char* name, Cmp... cmps) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return;
  if (seccomp_rule_add(ctx, action, nr, sizeof...(Cmp), cmps...) != 0) throw std::runtime_error(name);
}

void compiler_rules(scmp_filter_ctx ctx) {
  for (const char* s : {"ptrace", "process_vm_readv", "process_vm_writev", "bpf", "mount", "umount2", "pivot_root",
                        "chroot", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
                        "mount_setattr", "kexec_load", "kexec_file_load", "init_module", "finit_module",
                        "delete_module"})
    add(ctx, SCMP_ACT_KILL_PROCESS, s);
  for (const char* s : {"io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key",
                        "unshare", "setns", "perf_event_open", "userfaultfd", "pidfd_getfd", "open_by_handle_at",
                        "name_to_handle_at", "process_madvise", "kcmp", "quotactl", "acct", "swapon", "swapoff",
                        "reboot", "syslog"})
    add(ctx, SCMP_ACT_ERRNO(EPERM), s);
  add(ctx, SCMP_ACT_ERRNO(EACCES), "socket", SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  add(ctx, SCMP_ACT_ERRNO(EACCES), "socketpair", SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  add(ctx, SCMP_ACT_ERRNO(EPERM), "personality", SCMP_A0(SCMP_CMP_NE, 0xffffffffULL));
}

void runner_rules(scmp_filter_ctx ctx, pid_t self) {
  add(ctx, SCMP_ACT_KILL_PROCESS, "execve");
  add(ctx, SCMP_ACT_KILL_PROCESS, "execveat");
  add(ctx, SCMP_ACT_ERRNO(EPERM), "fork");
  add(ctx, SCMP_ACT_ERRNO(EPERM), "vfork");
  add(ctx, SCMP_ACT_ERRNO(EPERM), "clone", SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
  add(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3");
  const auto own = static_cast<scmp_datum_t>(self);
  add(ctx, SCMP_ACT_ERRNO(EPERM), "kill", SCMP_A0(SCMP_CMP_NE, own));
  add(ctx, SCMP_ACT_ERRNO(EPERM), "tgkill", SCMP_A0(SCMP_CMP_NE, own));
  add(ctx, SCMP_ACT_ERRNO(EPERM), "tkill");
  add(ctx, SCMP_ACT_ERRNO(EPERM), "rt_sigqueueinfo", SCMP_A0(SCMP_CMP_NE, own));
  add(ctx, SCMP_ACT_ERRNO(EPERM), "rt_tgsigqueueinfo", SCMP_A0(SCMP_CMP_NE, own));
  add(ctx, SCMP_ACT_ERRNO(EPERM), "pidfd_send_signal");
}

// runner_seccomp.cpp's stacked layer, verbatim but for the final seccomp_load.
void agent_layer_rules(scmp_filter_ctx ctx, pid_t pid) {
  auto rule = [&](std::uint32_t action, const char* name, unsigned n = 0, const scmp_arg_cmp* cmp = nullptr) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return;
    if (seccomp_rule_add_array(ctx, action, nr, n, cmp) != 0) throw std::runtime_error(name);
  };
  auto kill = [&](const char* name) { rule(SCMP_ACT_KILL_PROCESS, name); };
  auto deny = [&](const char* name, int err = EPERM) { rule(SCMP_ACT_ERRNO(err), name); };
  const auto self = static_cast<scmp_datum_t>(pid);
  for (const char* s : {"execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open",
                        "pidfd_getfd", "pidfd_send_signal"})
    kill(s);
  kill("fork");
  kill("vfork");
  {
    const scmp_arg_cmp no_thread = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0);
    rule(SCMP_ACT_KILL_PROCESS, "clone", 1, &no_thread);
  }
  deny("clone3", ENOSYS);
  {
    const scmp_arg_cmp other = SCMP_A0(SCMP_CMP_NE, self);
    rule(SCMP_ACT_KILL_PROCESS, "kill", 1, &other);
    rule(SCMP_ACT_KILL_PROCESS, "tgkill", 1, &other);
    rule(SCMP_ACT_KILL_PROCESS, "rt_sigqueueinfo", 1, &other);
    rule(SCMP_ACT_KILL_PROCESS, "rt_tgsigqueueinfo", 1, &other);
    deny("tkill");
  }
  {
    const scmp_arg_cmp not_unix = SCMP_A0(SCMP_CMP_NE, AF_UNIX);
    const scmp_arg_cmp is_unix = SCMP_A0(SCMP_CMP_EQ, AF_UNIX);
    rule(SCMP_ACT_KILL_PROCESS, "socket", 1, &not_unix);
    rule(SCMP_ACT_ERRNO(EPERM), "socket", 1, &is_unix);
    rule(SCMP_ACT_KILL_PROCESS, "socketpair", 1, &not_unix);
    rule(SCMP_ACT_ERRNO(EPERM), "socketpair", 1, &is_unix);
  }
  for (const char* s : {"connect", "bind", "listen", "accept", "accept4"}) deny(s);
  for (const char* s : {"io_uring_setup", "io_uring_enter", "io_uring_register"}) deny(s);
  for (const char* s : {"mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "move_mount", "open_tree",
                        "fsopen", "fsmount", "fsconfig", "mount_setattr", "bpf", "perf_event_open", "init_module",
                        "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon",
                        "swapoff", "keyctl", "add_key", "request_key", "userfaultfd", "acct", "quotactl",
                        "settimeofday", "clock_settime", "adjtimex", "clock_adjtime", "syslog", "vhangup",
                        "name_to_handle_at", "open_by_handle_at", "iopl", "ioperm", "landlock_restrict_self"})
    kill(s);
  for (const char* s : {"creat", "mkdir", "mkdirat", "mknod", "mknodat", "link", "linkat", "symlink", "symlinkat",
                        "rename", "renameat", "renameat2", "unlink", "unlinkat", "rmdir", "truncate", "memfd_create",
                        "memfd_secret"})
    deny(s);
  {
    const scmp_arg_cmp creat1 = SCMP_A1(SCMP_CMP_MASKED_EQ, O_CREAT, O_CREAT);
    const scmp_arg_cmp creat2 = SCMP_A2(SCMP_CMP_MASKED_EQ, O_CREAT, O_CREAT);
    rule(SCMP_ACT_ERRNO(EPERM), "open", 1, &creat1);
    rule(SCMP_ACT_ERRNO(EPERM), "openat", 1, &creat2);
    deny("openat2", ENOSYS);
  }
  // Issue 23 (class 8): host memory outside RLIMIT_DATA.
  {
    const scmp_arg_cmp shared_anon[2] = {SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_SHARED | MAP_ANONYMOUS, MAP_SHARED | MAP_ANONYMOUS),
                                         SCMP_A1(SCMP_CMP_GT, 256ull << 20)};
    rule(SCMP_ACT_ERRNO(ENOMEM), "mmap", 2, shared_anon);
    deny("shmget");
    deny("shmat");
  }
  // (prctl moved to the hand-built gate, issue 23: allowlisted options only.)
}

std::vector<sock_filter> program(SeccompProfile profile, pid_t self) {
  Ctx c;
  REQUIRE(c.ctx != nullptr);
  REQUIRE(seccomp_attr_set(c.ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) == 0);
  if (profile == SeccompProfile::compiler || profile == SeccompProfile::runner) compiler_rules(c.ctx);
  if (profile == SeccompProfile::runner) runner_rules(c.ctx, self);
  if (profile == SeccompProfile::runner_agent_layer) agent_layer_rules(c.ctx, self);
  const int fd = memfd_create("reference", 0);
  REQUIRE(fd >= 0);
  REQUIRE(seccomp_export_bpf(c.ctx, fd) == 0);
  const off_t size = lseek(fd, 0, SEEK_END);
  std::vector<sock_filter> out(static_cast<std::size_t>(size) / sizeof(sock_filter));
  REQUIRE(pread(fd, out.data(), static_cast<std::size_t>(size), 0) == size);
  close(fd);
  return out;
}

}  // namespace reference

namespace {

bool same(const std::vector<sock_filter>& a, const std::vector<sock_filter>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(sock_filter)) == 0;
}

}  // namespace

TEST_CASE("seccomp tables generate the same programs as the imperative rules they replaced", "[seccomp]") {
  const pid_t self = 4242;  // an arbitrary pid: it is a constant in the kill/tgkill conditions
  for (SeccompProfile p : {SeccompProfile::compiler, SeccompProfile::runner, SeccompProfile::runner_agent_layer}) {
    INFO("profile " << to_string(p));
    const auto table = build_seccomp_program(p, {self, true});
    const auto imperative = reference::program(p, self);
    CHECK(table.size() > 10);
    CHECK(same(table, imperative));
  }
  // The comparison can tell programs apart: another self pid changes the runner's programs.
  CHECK_FALSE(same(build_seccomp_program(SeccompProfile::runner_agent_layer, {self + 1, true}),
                   reference::program(SeccompProfile::runner_agent_layer, self)));
  CHECK_FALSE(same(build_seccomp_program(SeccompProfile::runner, {self, true}),
                   reference::program(SeccompProfile::compiler, self)));
}

// --- The filters at work: each case forks a child, loads the profile there and makes the calls. ---
namespace {

// How a child ended: its exit status, or minus the signal that killed it.
int in_child(SeccompProfile profile, int (*body)()) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (profile != SeccompProfile::none && !load_seccomp(profile, {getpid(), false}).empty()) _exit(200);
    _exit(body());
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// 0: the call succeeded; 1: EPERM; 2: another failure.
int outcome(long rc) { return rc == 0 ? 0 : errno == EPERM ? 1 : 2; }

int in_child(SeccompProfile profile, const FilterOptions& options, int (*body)()) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!load_seccomp(profile, options).empty()) _exit(200);
    _exit(body());
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

std::string g_dir;  // the folder of the file-creation test (set before each fork)

}  // namespace

TEST_CASE("the agent gate allows prctl reads, kills attack options, refuses the rest", "[seccomp]") {
  constexpr auto gate = SeccompProfile::runner_agent_gate;
  // Reads and no_new_privs pass.
  CHECK(in_child(gate, [] { char name[32]; return outcome(prctl(PR_GET_NAME, name, 0, 0, 0)); }) == 0);
  CHECK(in_child(gate, [] { int sig = 0; return outcome(prctl(PR_GET_PDEATHSIG, &sig, 0, 0, 0)); }) == 0);
  CHECK(in_child(gate, [] { return outcome(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)); }) == 0);
  // Options off the allowlist answer EPERM (and work without the gate: the test can tell).
  CHECK(in_child(gate, [] { return outcome(prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)); }) == 1);
  CHECK(in_child(SeccompProfile::none, [] { return outcome(prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)); }) == 0);
  // Thread names are free (the census goes by thread id).
  CHECK(in_child(gate, [] { return outcome(prctl(PR_SET_NAME, "cuda-EvtHandlr", 0, 0, 0)); }) == 0);
  // Outliving the server, becoming dumpable/traceable, own filters or syscall dispatch: killed.
  CHECK(in_child(gate, [] { return outcome(prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0)); }) == -SIGSYS);
  CHECK(in_child(SeccompProfile::none, [] { return outcome(prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0)); }) == 0);
  CHECK(in_child(gate, [] { return outcome(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)); }) == -SIGSYS);
  CHECK(in_child(gate, [] { return outcome(prctl(PR_SET_PTRACER, -1L, 0, 0, 0)); }) == -SIGSYS);
  CHECK(in_child(gate, [] { return outcome(prctl(PR_SET_SYSCALL_USER_DISPATCH, 1, 0, 0, 0)); }) == -SIGSYS);
  CHECK(in_child(gate, [] { return outcome(prctl(PR_SET_SECCOMP, 2, 0, 0, 0)); }) == -SIGSYS);
  // Garbage in the upper half of the option does not slip past (the kernel reads an int).
  CHECK(in_child(gate, [] { return outcome(syscall(SYS_prctl, (1ul << 32) | PR_SET_PDEATHSIG, 0, 0, 0, 0)); }) == -SIGSYS);
  // No filter of the agent's own on top.
  CHECK(in_child(gate, [] {
          sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
          sock_fprog prog{1, &allow};
          return outcome(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog));
        }) == -SIGSYS);
}

TEST_CASE("the agent layer refuses host memory that RLIMIT_DATA does not count", "[seccomp]") {
  constexpr auto layer = SeccompProfile::runner_agent_layer;
  // Over 256 MiB refused; smaller shared anonymous mappings (CUDA's pinned host memory) allowed.
  auto shared_anon = [] {
    void* p = mmap(nullptr, 512u << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? (errno == ENOMEM ? 1 : 2) : 0;
  };
  CHECK(in_child(layer, shared_anon) == 1);
  CHECK(in_child(SeccompProfile::none, shared_anon) == 0);
  CHECK(in_child(layer, [] {
          void* p = mmap(nullptr, 1u << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
          return p == MAP_FAILED ? 2 : 0;
        }) == 0);
  CHECK(in_child(layer, [] {
          void* p = mmap(nullptr, 1u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          return p == MAP_FAILED ? 2 : 0;
        }) == 0);
  CHECK(in_child(layer, [] { return outcome(shmget(IPC_PRIVATE, 1u << 20, IPC_CREAT | 0600) < 0 ? -1 : 0); }) == 1);
}

TEST_CASE("the agent gate allows no new executable memory but private file mappings", "[seccomp]") {
  constexpr auto gate = SeccompProfile::runner_agent_gate;
  auto anon_rwx = [] {
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? 2 : 0;
  };
  CHECK(in_child(SeccompProfile::none, anon_rwx) == 0);
  CHECK(in_child(gate, anon_rwx) == -SIGSYS);
  // Making existing memory executable (patching the harness's code, or data turned into code).
  auto make_exec = [] {
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 3;
    return mprotect(p, 4096, PROT_READ | PROT_EXEC) == 0 ? 0 : 2;
  };
  CHECK(in_child(SeccompProfile::none, make_exec) == 0);
  CHECK(in_child(gate, make_exec) == -SIGSYS);
  CHECK(in_child(gate, [] {
          void* p = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          return p == MAP_FAILED ? 3 : (int)syscall(SYS_pkey_mprotect, p, 4096, PROT_READ | PROT_EXEC, -1) == 0 ? 0 : 2;
        }) == -SIGSYS);
  // Shared executable file mappings (content another mapping can change) die too.
  CHECK(in_child(gate, [] {
          const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
          void* p = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
          return p == MAP_FAILED ? 2 : 0;
        }) == -SIGSYS);
  // What the loader does stays possible: a private executable mapping of a file; and
  // non-executable memory is untouched (mprotect to read-only, as RELRO does).
  CHECK(in_child(gate, [] {
          const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
          void* p = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
          if (p == MAP_FAILED) return 2;
          void* q = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          return q != MAP_FAILED && mprotect(q, 4096, PROT_READ) == 0 ? 0 : 3;
        }) == 0);
  CHECK(in_child(gate, [] { return dlopen("libdl.so.2", RTLD_NOW | RTLD_LOCAL) != nullptr ? 0 : 2; }) == 0);
}

TEST_CASE("the agent gate kills writable-and-executable file mappings and refuses chmod", "[seccomp]") {
  constexpr auto gate = SeccompProfile::runner_agent_gate;
  // A private PROT_WRITE|PROT_EXEC mapping of /dev/zero is anonymous writable code; of a readable
  // file, a private writable copy of it that is executable. Both work without the gate.
  auto wx_zero = [] {
    const int fd = open("/dev/zero", O_RDWR | O_CLOEXEC);
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE, fd, 0);
    return p == MAP_FAILED ? 2 : 0;
  };
  auto wx_file = [] {
    const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE, fd, 0);
    return p == MAP_FAILED ? 2 : 0;
  };
  CHECK(in_child(SeccompProfile::none, wx_zero) == 0);
  CHECK(in_child(gate, wx_zero) == -SIGSYS);
  CHECK(in_child(SeccompProfile::none, wx_file) == 0);
  CHECK(in_child(gate, wx_file) == -SIGSYS);
  // Writable without exec, and read+exec without write, stay allowed.
  CHECK(in_child(gate, [] {
          const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
          void* rw = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
          void* rx = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
          return rw != MAP_FAILED && rx != MAP_FAILED ? 0 : 2;
        }) == 0);
  // No mode changes (the output file's mode keeps it unreadable: confine.hpp make_write_only);
  // fchmodat2 by number, whatever libseccomp knows.
  auto chmods = [] {
    const int fd = memfd_create("mode", MFD_CLOEXEC);
    if (fd < 0) return 9;
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    int refused = 0;
    refused += fchmod(fd, 0600) != 0 && errno == EPERM;
    refused += chmod(path.c_str(), 0600) != 0 && errno == EPERM;
    refused += fchmodat(AT_FDCWD, path.c_str(), 0600, 0) != 0 && errno == EPERM;
    refused += syscall(452 /* fchmodat2 */, AT_FDCWD, path.c_str(), 0600, 0) != 0 && errno == EPERM;
    return refused;
  };
  CHECK(in_child(gate, chmods) == 4);
  CHECK(in_child(SeccompProfile::none, chmods) == 0);
}

TEST_CASE("the agent layer refuses new files and the network; under a GPU tool (tool_mode) creation and connect pass, kills trap", "[seccomp]") {
  constexpr auto layer = SeccompProfile::runner_agent_layer;
  g_dir = "/tmp/d2k-seccomp-create-" + std::to_string(getpid());
  REQUIRE(mkdir(g_dir.c_str(), 0700) == 0);
  {
    const int fd = open((g_dir + "/existing").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    close(fd);
  }
  const FilterOptions plain{getpid(), false};
  FilterOptions tool{getpid(), false};
  tool.tool_mode = true;
  auto create = [] {
    const std::string f = g_dir + "/new";
    const int fd = open(f.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return errno == EPERM ? 1 : 2;
    close(fd);
    return unlink(f.c_str()) == 0 ? 0 : 3;
  };
  auto make_dir = [] {
    const std::string d = g_dir + "/sub";
    if (mkdir(d.c_str(), 0700) != 0) return errno == EPERM ? 1 : 2;
    return rmdir(d.c_str()) == 0 ? 0 : 3;
  };
  auto reopen_existing = [] {  // O_CREAT on a file that exists, as ncu opens its lock file
    const int fd = open((g_dir + "/existing").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return errno == EPERM ? 1 : 2;
    close(fd);
    return 0;
  };
  auto inet_socket = [] {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno == EPERM ? 1 : 2;
    close(fd);
    return 0;
  };
  // A trap runs this handler (exit 42); a kill ends the process with SIGSYS before it can.
  auto ptrace_with_handler = [] {
    signal(SIGSYS, [](int) { _exit(42); });
    return outcome(syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0));
  };
  CHECK(in_child(layer, plain, create) == 1);
  CHECK(in_child(layer, plain, make_dir) == 1);
  CHECK(in_child(layer, plain, reopen_existing) == 1);
  CHECK(in_child(layer, plain, inet_socket) == -SIGSYS);
  CHECK(in_child(layer, plain, ptrace_with_handler) == -SIGSYS);
  CHECK(in_child(layer, tool, create) == 0);
  CHECK(in_child(layer, tool, make_dir) == 0);
  CHECK(in_child(layer, tool, reopen_existing) == 0);
  CHECK(in_child(layer, tool, inet_socket) == 0);
  CHECK(in_child(layer, tool, ptrace_with_handler) == 42);
  // The base runner profile answers EACCES to other families; under a tool it lets them through too.
  CHECK(in_child(SeccompProfile::runner, tool, inet_socket) == 0);
  CHECK(in_child(SeccompProfile::runner, plain, inet_socket) == 2);
  // What stays refused under a tool: links, symlinks, device nodes, truncate by path, listening.
  CHECK(in_child(layer, tool, [] { return outcome(symlink("x", (g_dir + "/l").c_str())); }) == 1);
  CHECK(in_child(layer, tool, [] { return outcome(link((g_dir + "/existing").c_str(), (g_dir + "/h").c_str())); }) == 1);
  CHECK(in_child(layer, tool, [] { return outcome(truncate((g_dir + "/existing").c_str(), 0)); }) == 1);
  CHECK(in_child(layer, tool, [] { return outcome(mknod((g_dir + "/n").c_str(), S_IFIFO | 0600, 0)); }) == 1);
  CHECK(in_child(layer, tool, [] { return outcome(listen(0, 1)); }) == 1);
  // The gate traps too (a writable and executable mapping), with the handler.
  CHECK(in_child(SeccompProfile::runner_agent_gate, tool, [] {
          signal(SIGSYS, [](int) { _exit(42); });
          void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          return p == MAP_FAILED ? 2 : 0;
        }) == 42);
  std::filesystem::remove_all(g_dir);
}
