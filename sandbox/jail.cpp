// The jail. Parent: plan everything (argv, envp, file view, seccomp program, uid), clone into
// fresh namespaces, then poll output + pidfd until exit or deadline. Child: replay the plan as
// ordered steps, each a small function returning 0 or an errno; the first failure is written as
// a SetupFailure record to a CLOEXEC pipe (EOF on that pipe means execve succeeded).
#include "sandbox/jail.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <unordered_set>
#include <utility>

#include "sandbox/detail/file_view.hpp"
#include "sandbox/process.hpp"

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef SYS_pivot_root
#define SYS_pivot_root 155
#endif

namespace fs = std::filesystem;

namespace d2k::sandbox {
namespace detail {

const char* to_string(ViewOp::Kind kind) {
  switch (kind) {
    case ViewOp::make_dir: return "mkdir";
    case ViewOp::make_file: return "create file";
    case ViewOp::bind_ro: return "bind read-only";
    case ViewOp::bind_rw: return "bind read-write";
    case ViewOp::bind_dev: return "bind device";
    case ViewOp::tmpfs: return "mount tmpfs";
    case ViewOp::proc: return "mount proc";
    case ViewOp::make_symlink: return "symlink";
    case ViewOp::mask_dir: return "mask directory";
    case ViewOp::mask_file: return "mask file";
  }
  return "?";
}

namespace {

// The files of /etc a jail sees (when they exist on the host): the loader's cache, the time zone
// (glibc's localtime), and the alternatives symlinks some distributions route compilers through.
constexpr const char* kEtcAllowlist[] = {"ld.so.cache", "localtime", "alternatives"};

bool is_under(const fs::path& p, const fs::path& dir) {
  auto [d, q] = std::mismatch(dir.begin(), dir.end(), p.begin(), p.end());
  return d == dir.end();
}

fs::path checked_jail_path(const fs::path& p) {
  if (!p.is_absolute()) throw std::runtime_error("jail: mount target must be absolute: " + p.string());
  for (const auto& c : p)
    if (c == "..") throw std::runtime_error("jail: '..' in mount target: " + p.string());
  return p.lexically_normal();
}

class Planner {
 public:
  explicit Planner(fs::path root) : root_(std::move(root)) {}

  void add(ViewOp::Kind kind, std::string source, const fs::path& jail_path, std::string data = {}) {
    ops_.push_back({kind, std::move(source), under_root(jail_path), std::move(data)});
  }
  void ensure_dir(const fs::path& jail_path) {
    fs::path cur = "/";
    for (const auto& c : jail_path.relative_path()) {
      cur /= c;
      if (made_.insert(cur.string()).second) add(ViewOp::make_dir, {}, cur);
    }
  }
  void bind(const fs::path& source, const fs::path& jail_path, bool writable) {
    std::error_code ec;
    fs::path canon = fs::canonical(source, ec);
    if (ec) throw std::runtime_error("jail: mount source missing: " + source.string());
    if (fs::is_directory(canon)) {
      ensure_dir(jail_path);
    } else {
      ensure_dir(jail_path.parent_path());
      add(ViewOp::make_file, {}, jail_path);
    }
    add(writable ? ViewOp::bind_rw : ViewOp::bind_ro, canon.string(), jail_path);
    binds_.emplace_back(canon, jail_path);
  }
  // Every hidden path the binds would show gets covered.
  void mask(const std::vector<fs::path>& hidden) {
    for (const auto& h : hidden) {
      std::error_code ec;
      fs::path canon = fs::canonical(h, ec);
      if (ec) continue;  // does not exist: nothing to show
      bool dir = fs::is_directory(canon, ec);
      for (const auto& [src, target] : binds_) {
        if (!is_under(canon, src)) continue;
        fs::path inside = target / canon.lexically_relative(src);
        add(dir ? ViewOp::mask_dir : ViewOp::mask_file, {}, inside.lexically_normal());
      }
    }
  }
  std::vector<ViewOp> take() { return std::move(ops_); }

 private:
  std::string under_root(const fs::path& jail_path) const {
    if (jail_path.relative_path().empty()) return root_.lexically_normal().string();
    return (root_ / jail_path.relative_path()).lexically_normal().string();
  }
  fs::path root_;
  std::set<std::string> made_;
  std::vector<ViewOp> ops_;
  std::vector<std::pair<fs::path, fs::path>> binds_;
};

}  // namespace

std::vector<ViewOp> plan_file_view(const JailSpec& spec, const fs::path& root) {
  Planner plan(root);
  plan.add(ViewOp::tmpfs, {}, "/", "mode=0755,size=1m");
  // System directories, read-only.
  plan.bind("/usr", "/usr", false);
  // /etc: only what the dynamic loader and the toolchain read. The host's passwd, hostname,
  // machine-id, hosts, ssh keys … are not there (`#include "/etc/passwd"` must fail).
  plan.ensure_dir("/etc");
  for (const char* name : kEtcAllowlist) {
    fs::path host = fs::path("/etc") / name;
    std::error_code ec;
    if (fs::exists(host, ec)) plan.bind(host, host, false);
  }
  for (const char* name : {"bin", "sbin", "lib", "lib64", "lib32", "libx32"}) {
    fs::path host = fs::path("/") / name;
    std::error_code ec;
    auto st = fs::symlink_status(host, ec);
    if (ec || !fs::exists(st)) continue;
    if (fs::is_symlink(st)) {
      plan.add(ViewOp::make_symlink, fs::read_symlink(host).string(), host);
    } else if (fs::is_directory(st)) {
      plan.bind(host, host, false);
    }
  }
  // The CUDA toolkit: /usr/local/cuda is a symlink; its real directory may live outside /usr.
  {
    std::error_code ec;
    fs::path cuda = fs::canonical("/usr/local/cuda", ec);
    if (!ec && !is_under(cuda, "/usr")) plan.bind(cuda, cuda, false);
  }
  // /dev: only the devices the spec names (the compile view: null alone; no /dev/zero, /dev/random
  // or /dev/urandom: `#include "/dev/urandom"` would grow the compiler to its memory limit).
  plan.ensure_dir("/dev");
  plan.add(ViewOp::tmpfs, {}, "/dev", "mode=0755,size=64k");
  for (const std::string& dev : spec.devices) {
    if (dev.empty() || dev.find('/') != std::string::npos || dev == "." || dev == "..")
      throw std::runtime_error("jail: bad device name: " + dev);
    fs::path p = fs::path("/dev") / dev;
    plan.add(ViewOp::make_file, {}, p);
    plan.add(ViewOp::bind_dev, p.string(), p);
  }
  plan.add(ViewOp::make_symlink, "/proc/self/fd", "/dev/fd");
  plan.add(ViewOp::make_symlink, "/proc/self/fd/0", "/dev/stdin");
  plan.add(ViewOp::make_symlink, "/proc/self/fd/1", "/dev/stdout");
  plan.add(ViewOp::make_symlink, "/proc/self/fd/2", "/dev/stderr");
  plan.ensure_dir("/proc");
  if (spec.mount_proc) plan.add(ViewOp::proc, {}, "/proc", spec.proc_pids_only ? "subset=pid" : "");
  plan.ensure_dir("/tmp");
  plan.add(ViewOp::tmpfs, {}, "/tmp", "mode=1777,size=" + std::to_string(spec.tmp_size_bytes));
  for (const Mount& m : spec.mounts) plan.bind(m.source, checked_jail_path(m.target), m.writable);
  plan.mask(spec.hidden_paths);
  return plan.take();
}

}  // namespace detail

namespace {

using detail::ViewOp;

// ---------------------------------------------------------------------------------------------
// Child side: no allocation, no exceptions, async-signal-safe calls only.

enum Step : int {
  kWaitParent, kNewSession, kStdio, kLimits, kHostname, kPrivateMounts, kFileView, kRootReadOnly,
  kPivotRoot, kChdir, kDropPrivileges, kParentDeath, kNoNewPrivs, kCloseFds, kSeccomp, kExec, kStepCount
};
constexpr const char* kStepNames[kStepCount] = {
    "wait for parent", "new session", "stdio", "resource limits", "hostname", "private mounts",
    "file view", "read-only root", "pivot_root", "chdir", "drop privileges", "parent-death signal",
    "no_new_privs", "close fds", "seccomp", "execve"};

struct SetupFailure {
  std::int32_t step;
  std::int32_t error;
  std::int32_t detail;  // file-view op index
};

struct Limit {
  int resource;
  rlim_t value;
};

struct ChildPlan {
  int sync_r = -1, err_w = -1, out_w = -1, devnull = -1;
  bool root_mode = true;  // real root: setuid to `uid`; otherwise a user namespace maps us
  uid_t uid = 0;
  gid_t gid = 0;
  Limit limits[7]{};
  int n_limits = 0;
  const std::vector<ViewOp>* ops = nullptr;
  const char* root = nullptr;
  const char* cwd = nullptr;
  const char* exe = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const sock_filter* filter = nullptr;
  unsigned short filter_len = 0;
};

struct MountAttr {  // struct mount_attr (linux/mount.h clashes with glibc's sys/mount.h)
  std::uint64_t attr_set, attr_clr, propagation, userns_fd;
};
constexpr std::uint64_t kAttrRdonly = 0x1, kAttrNosuid = 0x2, kAttrNodev = 0x4, kAttrNoexec = 0x8;
constexpr unsigned kAtRecursive = 0x8000;

int set_mount_attr(const char* path, std::uint64_t attrs, bool recursive) {
  MountAttr attr{attrs, 0, 0, 0};
  if (syscall(SYS_mount_setattr, AT_FDCWD, path, recursive ? kAtRecursive : 0u, &attr, sizeof attr) == 0) return 0;
  if (errno != ENOSYS) return errno;
  unsigned long flags = MS_REMOUNT | MS_BIND;
  if (attrs & kAttrRdonly) flags |= MS_RDONLY;
  if (attrs & kAttrNosuid) flags |= MS_NOSUID;
  if (attrs & kAttrNodev) flags |= MS_NODEV;
  if (attrs & kAttrNoexec) flags |= MS_NOEXEC;
  return mount(nullptr, path, nullptr, flags, nullptr) == 0 ? 0 : errno;
}

}  // namespace

int mask_path(const char* path, bool directory) noexcept {
  if (directory)
    return mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=000,size=4k") == 0 ? 0 : errno;
  if (mount("/dev/null", path, nullptr, MS_BIND, nullptr) != 0) return errno;
  return set_mount_attr(path, kAttrRdonly | kAttrNosuid | kAttrNoexec, false);
}

namespace {

int wait_for_parent(const ChildPlan& p) {
  char go = 0;
  ssize_t n;
  do n = read(p.sync_r, &go, 1); while (n < 0 && errno == EINTR);
  if (n != 1) return n < 0 ? errno : ECANCELED;
  close(p.sync_r);
  return 0;
}

int new_session(const ChildPlan&) { return setsid() < 0 ? errno : 0; }

int redirect_stdio(const ChildPlan& p) {
  if (dup2(p.devnull, 0) < 0 || dup2(p.out_w, 1) < 0 || dup2(p.out_w, 2) < 0) return errno;
  return 0;
}

int apply_limits(const ChildPlan& p) {
  for (int i = 0; i < p.n_limits; ++i) {
    rlimit lim{p.limits[i].value, p.limits[i].value};
    if (setrlimit(p.limits[i].resource, &lim) != 0) return errno;
  }
  return 0;
}

int set_hostname(const ChildPlan&) {
  static const char name[] = "d2k-jail";
  return sethostname(name, sizeof name - 1) == 0 ? 0 : errno;
}

int make_mounts_private(const ChildPlan&) {
  return mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 ? 0 : errno;
}

int replay_op(const ViewOp& op) {
  const char* dst = op.target.c_str();
  switch (op.kind) {
    case ViewOp::make_dir:
      return mkdir(dst, 0755) == 0 || errno == EEXIST ? 0 : errno;
    case ViewOp::make_file: {
      int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (fd < 0) return errno;
      close(fd);
      return 0;
    }
    case ViewOp::bind_ro:
      if (mount(op.source.c_str(), dst, nullptr, MS_BIND | MS_REC, nullptr) != 0) return errno;
      return set_mount_attr(dst, kAttrRdonly | kAttrNosuid | kAttrNodev, true);
    case ViewOp::bind_rw:
      if (mount(op.source.c_str(), dst, nullptr, MS_BIND, nullptr) != 0) return errno;
      return set_mount_attr(dst, kAttrNosuid | kAttrNodev, false);
    case ViewOp::bind_dev:  // a device node: nodev would make it unusable
      if (mount(op.source.c_str(), dst, nullptr, MS_BIND, nullptr) != 0) return errno;
      return set_mount_attr(dst, kAttrNosuid | kAttrNoexec, false);
    case ViewOp::tmpfs:
      return mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, op.data.c_str()) == 0 ? 0 : errno;
    case ViewOp::proc:
      if (!op.data.empty()) {  // "subset=pid": EINVAL on kernels before 5.8, which get the whole procfs
        if (mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, op.data.c_str()) == 0) return 0;
        if (errno != EINVAL) return errno;
      }
      return mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0 ? 0 : errno;
    case ViewOp::make_symlink:
      return symlink(op.source.c_str(), dst) == 0 ? 0 : errno;
    case ViewOp::mask_dir:
    case ViewOp::mask_file:
      return mask_path(dst, op.kind == ViewOp::mask_dir);
  }
  return EINVAL;
}

int build_file_view(const ChildPlan& p, int* failed_op) {
  const auto& ops = *p.ops;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (int err = replay_op(ops[i])) {
      *failed_op = static_cast<int>(i);
      return err;
    }
  }
  return 0;
}

int make_root_read_only(const ChildPlan& p) {
  return mount("tmpfs", p.root, "tmpfs", MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) == 0 ? 0 : errno;
}

// pivot_root(".", ".") stacks the old root under the new one; a lazy unmount then drops it.
int enter_root(const ChildPlan& p) {
  if (chdir(p.root) != 0) return errno;
  if (syscall(SYS_pivot_root, ".", ".") != 0) return errno;
  if (umount2(".", MNT_DETACH) != 0) return errno;
  return chdir("/") == 0 ? 0 : errno;
}

int change_dir(const ChildPlan& p) { return chdir(p.cwd) == 0 ? 0 : errno; }

int drop_privileges(const ChildPlan& p) {
  if (!p.root_mode) return 0;  // user namespace: caps end at execve (uid != 0)
  // Empty the bounding set too (defence in depth; no_new_privs already blocks regaining caps).
  for (int cap = 0; cap < 64; ++cap)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return errno;
  // Raw syscalls: glibc's wrappers broadcast to all threads of the (copied) parent and would
  // wait forever for threads that do not exist in this child.
  if (syscall(SYS_setgroups, 0, nullptr) != 0) return errno;
  if (syscall(SYS_setresgid, p.gid, p.gid, p.gid) != 0) return errno;
  if (syscall(SYS_setresuid, p.uid, p.uid, p.uid) != 0) return errno;
  if (geteuid() == 0 || getegid() == 0) return EPERM;
  return 0;
}

// Set after the credential change (which clears it); the jail is pid 1 of its namespace, so
// its death takes every process in it along.
int die_with_parent(const ChildPlan&) { return prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) == 0 ? 0 : errno; }

int no_new_privs(const ChildPlan&) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 ? 0 : errno;
}

// Anything the server opened without O_CLOEXEC must not leak into the jail.
int close_inherited_fds(const ChildPlan&) {
  return syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) == 0 ? 0 : errno;
}

int install_seccomp(const ChildPlan& p) { return load_seccomp_program(p.filter, p.filter_len); }

[[noreturn]] void fail(const ChildPlan& p, Step step, int err, int detail = -1) {
  SetupFailure f{step, err, detail};
  ssize_t n = write(p.err_w, &f, sizeof f);
  (void)n;
  _exit(127);
}

int child_main(void* arg) {
  const ChildPlan& p = *static_cast<const ChildPlan*>(arg);
  using StepFn = int (*)(const ChildPlan&);
  struct Ordered {
    Step step;
    StepFn fn;
  };
  // The order is the design: see sandbox/README.md.
  static constexpr Ordered kBeforeView[] = {
      {kWaitParent, wait_for_parent}, {kNewSession, new_session}, {kParentDeath, die_with_parent},
      {kStdio, redirect_stdio},       {kHostname, set_hostname},  {kPrivateMounts, make_mounts_private},
  };
  static constexpr Ordered kAfterView[] = {
      {kRootReadOnly, make_root_read_only}, {kPivotRoot, enter_root},   {kChdir, change_dir},
      {kDropPrivileges, drop_privileges},   {kParentDeath, die_with_parent}, {kNoNewPrivs, no_new_privs},
      // Limits after the file view: a server with many descriptors open (one per episode log)
      // would otherwise hit the jail's open-files limit while building the view.
      {kCloseFds, close_inherited_fds},     {kLimits, apply_limits},       {kSeccomp, install_seccomp},
  };
  for (const auto& s : kBeforeView)
    if (int err = s.fn(p)) fail(p, s.step, err);
  int failed_op = -1;
  if (int err = build_file_view(p, &failed_op)) fail(p, kFileView, err, failed_op);
  for (const auto& s : kAfterView)
    if (int err = s.fn(p)) fail(p, s.step, err);
  execve(p.exe, p.argv, p.envp);
  fail(p, kExec, errno);
}

// ---------------------------------------------------------------------------------------------
// Parent side.

// By pidfd, never by pid: a reaped and reused pid cannot be hit. (glibc 2.36's sys/pidfd.h
// lacks C linkage for C++, hence the raw syscall.)
void kill_by_pidfd(int pidfd) { syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0u); }

// Live jails, by pidfd, for cancel_all_jails().
struct Registry {
  std::mutex mu;
  bool cancelled = false;
  std::unordered_set<int> pidfds;
};
Registry& registry() {
  static Registry r;
  return r;
}

// A uid per jail, so RLIMIT_NPROC counts this jail's processes only (concurrent jails sharing
// "nobody" would share one process count). Distinct per server process by its pid.
uid_t next_jail_uid() {
  static std::atomic<std::uint32_t> counter{0};
  std::uint32_t slot = counter.fetch_add(1) % 1024u;
  return static_cast<uid_t>(200000u + (static_cast<std::uint32_t>(getpid()) % 65536u) * 1024u + slot);
}

void chown_tree(const fs::path& dir, uid_t uid, gid_t gid) {
  if (lchown(dir.c_str(), uid, gid) != 0) throw std::runtime_error("chown " + dir.string() + ": " + strerror(errno));
  if (!fs::is_directory(fs::symlink_status(dir))) return;
  for (const auto& e : fs::recursive_directory_iterator(dir, fs::directory_options::none))
    if (lchown(e.path().c_str(), uid, gid) != 0) throw std::runtime_error("chown " + e.path().string() + ": " + strerror(errno));
}

fs::path root_mountpoint() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("d2k-jail-root-" + std::to_string(geteuid()));
    if (mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) throw std::runtime_error("mkdir " + d.string() + ": " + strerror(errno));
    struct stat st {};
    if (lstat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
      throw std::runtime_error("jail root mount point is not our directory: " + d.string());
    return d;
  }();
  return dir;
}

void write_file(const std::string& path, const std::string& text) {
  Fd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0 || write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    throw std::runtime_error("write " + path + ": " + strerror(errno));
}

std::string describe_failure(const SetupFailure& f, const std::vector<ViewOp>& ops) {
  std::string step = f.step >= 0 && f.step < kStepCount ? kStepNames[f.step] : "unknown step";
  std::string out = "setup step '" + step + "' failed: " + strerror(f.error);
  if (f.step == kFileView && f.detail >= 0 && static_cast<std::size_t>(f.detail) < ops.size()) {
    const ViewOp& op = ops[static_cast<std::size_t>(f.detail)];
    out += " (" + std::string(detail::to_string(op.kind)) + " " + (op.source.empty() ? "" : op.source + " -> ") + op.target + ")";
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

JailOutcome run(const JailSpec& spec) {
  const auto t0 = std::chrono::steady_clock::now();
  JailOutcome out;
  if (spec.argv.empty() || spec.argv[0].empty() || spec.argv[0][0] != '/')
    throw std::runtime_error("argv[0] must be an absolute path inside the jail");
  if (spec.seccomp == SeccompProfile::runner || spec.seccomp == SeccompProfile::runner_agent_layer)
    throw std::runtime_error("the runner profiles forbid execve: load them in-process (load_seccomp)");

  // Everything the child needs, prepared before clone.
  const fs::path root = root_mountpoint();
  const std::string root_str = root.string();
  const std::vector<ViewOp> ops = detail::plan_file_view(spec, root);
  const std::vector<sock_filter> filter = build_seccomp_program(spec.seccomp);
  std::vector<std::string> arg_store(spec.argv.begin(), spec.argv.end());
  std::vector<char*> argv;
  for (auto& a : arg_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store;
  for (const auto& [k, v] : spec.env) {
    if (k.empty() || k.find('=') != std::string::npos) throw std::runtime_error("bad environment name: " + k);
    env_store.push_back(k + "=" + v);
  }
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string cwd = spec.cwd.string();

  const bool root_mode = geteuid() == 0;
  ChildPlan plan;
  plan.root_mode = root_mode;
  plan.uid = root_mode ? next_jail_uid() : geteuid();
  plan.gid = root_mode ? static_cast<gid_t>(plan.uid) : getegid();
  auto limit = [&](int resource, std::uint64_t value) {
    if (value) plan.limits[plan.n_limits++] = {resource, static_cast<rlim_t>(value)};
  };
  limit(RLIMIT_CPU, spec.cpu_seconds);
  limit(RLIMIT_FSIZE, spec.file_size_bytes);
  limit(RLIMIT_AS, spec.address_space_bytes);
  limit(RLIMIT_NPROC, spec.max_processes);
  limit(RLIMIT_NOFILE, spec.max_open_files);
  plan.limits[plan.n_limits++] = {RLIMIT_CORE, 0};
  plan.ops = &ops;
  plan.root = root_str.c_str();
  plan.cwd = cwd.c_str();
  plan.exe = arg_store[0].c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.filter = filter.data();
  plan.filter_len = static_cast<unsigned short>(filter.size());

  if (root_mode)
    for (const Mount& m : spec.mounts)
      if (m.writable) chown_tree(m.source, plan.uid, plan.gid);

  Pipe output = make_pipe(), errors = make_pipe(), sync = make_pipe();
  Fd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (devnull.get() < 0) throw std::runtime_error("open /dev/null failed");
  plan.sync_r = sync.read.get();
  plan.err_w = errors.write.get();
  plan.out_w = output.write.get();
  plan.devnull = devnull.get();

  constexpr std::size_t kStack = 256 << 10;
  void* stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) throw std::runtime_error("mmap stack failed");
  struct Unmap {
    void* p;
    ~Unmap() { munmap(p, kStack); }
  } unmap{stack};

  int flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_PIDFD | SIGCHLD;
  if (!spec.network) flags |= CLONE_NEWNET;
  if (!root_mode) flags |= CLONE_NEWUSER;

  Registry& reg = registry();
  int pidfd_raw = -1;
  pid_t pid;
  {
    std::lock_guard lock(reg.mu);
    if (reg.cancelled) {
      out.setup_error = "cancelled";
      return out;
    }
    pid = clone(child_main, static_cast<char*>(stack) + kStack, flags, &plan, &pidfd_raw);
    if (pid < 0) throw std::runtime_error(std::string("clone: ") + strerror(errno));
    reg.pidfds.insert(pidfd_raw);
  }
  Fd pidfd(pidfd_raw);
  struct Unregister {
    Registry& reg;
    int fd;
    ~Unregister() {
      std::lock_guard lock(reg.mu);
      reg.pidfds.erase(fd);
    }
  } unregister{reg, pidfd_raw};
  output.write.reset();
  errors.write.reset();
  sync.read.reset();

  std::string setup_error;
  try {
    // Before the child runs a step: whatever it starts inherits the cgroup.
    if (!spec.cgroup.empty()) {
      const std::string pid_text = std::to_string(pid);
      Fd procs(open((spec.cgroup / "cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
      if (!procs || write(procs.get(), pid_text.data(), pid_text.size()) != static_cast<ssize_t>(pid_text.size()))
        throw std::runtime_error(std::string("cannot join cgroup: ") + strerror(errno));  // no host path: it may reach a client
    }
    if (!root_mode) {
      const std::string proc = "/proc/" + std::to_string(pid);
      write_file(proc + "/setgroups", "deny");
      write_file(proc + "/uid_map", std::to_string(plan.uid) + " " + std::to_string(plan.uid) + " 1\n");
      write_file(proc + "/gid_map", std::to_string(plan.gid) + " " + std::to_string(plan.gid) + " 1\n");
    }
    char go = 1;
    if (write(sync.write.get(), &go, 1) != 1) throw std::runtime_error("cannot start the jail");
  } catch (const std::exception& e) {
    setup_error = e.what();
    kill_by_pidfd(pidfd.get());
  }
  sync.write.reset();

  // Wait: drain output (a flood must never block the child), stop at exit or deadline.
  const auto deadline = t0 + spec.deadline;
  bool exited = false, eof = false;
  std::optional<std::chrono::steady_clock::time_point> drain_until;
  char buf[65536];
  while (!(exited && eof)) {
    auto now = std::chrono::steady_clock::now();
    if (!exited && !out.timed_out && now >= deadline) {
      out.timed_out = true;
      kill_by_pidfd(pidfd.get());
    }
    // After the exit, writers still holding the pipe are being killed; do not wait forever.
    if (exited && !drain_until) drain_until = now + std::chrono::seconds(2);
    if (drain_until && now >= *drain_until) break;
    auto until = drain_until ? *drain_until : (out.timed_out ? now + std::chrono::seconds(5) : deadline);
    int timeout_ms = static_cast<int>(std::clamp<long long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1, 0, 60000));
    pollfd fds[2] = {{eof ? -1 : output.read.get(), POLLIN, 0}, {exited ? -1 : pidfd.get(), POLLIN, 0}};
    int n = poll(fds, 2, timeout_ms);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (fds[0].revents) {
      ssize_t got = read(output.read.get(), buf, sizeof buf);
      if (got > 0) {
        std::size_t room = spec.max_output_bytes > out.output.size() ? spec.max_output_bytes - out.output.size() : 0;
        std::size_t keep = std::min(room, static_cast<std::size_t>(got));
        out.output.append(buf, keep);
        out.output_dropped += static_cast<std::uint64_t>(got) - keep;
      } else if (got == 0 || errno != EINTR) {
        eof = true;
      }
    }
    if (fds[1].revents) exited = true;
  }
  if (!exited) kill_by_pidfd(pidfd.get());

  siginfo_t info{};
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED) != 0 && errno == EINTR) {
  }
  SetupFailure failure{};
  fcntl(errors.read.get(), F_SETFL, O_NONBLOCK);
  bool setup_failed = read(errors.read.get(), &failure, sizeof failure) == static_cast<ssize_t>(sizeof failure);

  out.seconds = seconds_since(t0);
  if (!setup_error.empty() || setup_failed) {
    out.setup_error = setup_failed ? describe_failure(failure, ops) : setup_error;
    return out;
  }
  out.started = true;
  if (info.si_code == CLD_EXITED) {
    out.exit_status = info.si_status;
  } else {
    out.signal = info.si_status;
    // Only the filter can make pid 1 of a pid namespace die of SIGSYS: signals sent from inside
    // the namespace to its init without a handler are dropped by the kernel.
    if (info.si_status == SIGSYS && !out.timed_out) {
      out.seccomp_killed = true;
      out.violation = "killed by the seccomp filter (SIGSYS); the kernel does not report the syscall number";
    }
  }
  return out;
}

}  // namespace

JailOutcome run_jailed(const JailSpec& spec) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    return run(spec);
  } catch (const std::exception& e) {
    JailOutcome out;
    out.setup_error = e.what();
    out.seconds = seconds_since(t0);
    return out;
  }
}

void cancel_all_jails() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  reg.cancelled = true;
  for (int fd : reg.pidfds) kill_by_pidfd(fd);
}

}  // namespace d2k::sandbox
