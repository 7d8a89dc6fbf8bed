#include "sandbox/runner/confine.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <sched.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime_api.h>

#include "sandbox/jail.hpp"
#include "sandbox/process.hpp"

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE  // ABI 3 (Linux 6.2); older headers lack it
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif

namespace d2k::runner {
namespace {

void write_file(const char* path, const std::string& text) {
  const sandbox::Fd fd(::open(path, O_WRONLY | O_CLOEXEC));
  if (!fd) throw ConfineError(std::string("open ") + path + ": " + std::strerror(errno));
  const ssize_t n = ::write(fd.get(), text.data(), text.size());
  if (n != static_cast<ssize_t>(text.size()))
    throw ConfineError(std::string("write ") + path + ": " + std::strerror(errno));
}

bool g_private_mounts = false;  // enter_namespaces succeeded: mounts stay in our namespace

}  // namespace

void enter_namespaces(bool own_network) {
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS | (own_network ? CLONE_NEWNET : 0)) != 0)
    throw ConfineError(std::string("unshare: ") + std::strerror(errno));
  write_file("/proc/self/setgroups", "deny");
  write_file("/proc/self/uid_map", std::to_string(kInsideUid) + " " + std::to_string(uid) + " 1");
  write_file("/proc/self/gid_map", std::to_string(kInsideGid) + " " + std::to_string(gid) + " 1");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    throw ConfineError(std::string("mount private: ") + std::strerror(errno));
  g_private_mounts = true;
}

bool maps_only(const std::string& id_map, unsigned inside) {
  unsigned long in = 0, out = 0, count = 0;
  int used = 0;
  if (std::sscanf(id_map.c_str(), " %lu %lu %lu %n", &in, &out, &count, &used) != 3) return false;
  return in == inside && count == 1 && id_map.find_first_not_of(" \t\n", static_cast<std::size_t>(used)) == std::string::npos;
}

void adopt_tool_host_namespaces() {
  std::string maps[2];
  const char* files[2] = {"/proc/self/uid_map", "/proc/self/gid_map"};
  for (int i = 0; i < 2; ++i) {
    if (FILE* f = std::fopen(files[i], "re")) {
      char buf[512];
      const std::size_t n = std::fread(buf, 1, sizeof buf, f);
      maps[i].assign(buf, n);
      std::fclose(f);
    }
  }
  if (!maps_only(maps[0], kInsideUid) || !maps_only(maps[1], kInsideGid))
    throw ConfineError("not in the tool host's namespaces (uid_map '" + maps[0].substr(0, 80) + "')");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    throw ConfineError(std::string("mount private in the tool host's namespace (no CAP_SYS_ADMIN from it?): ") +
                       std::strerror(errno));
  g_private_mounts = true;
}

void hide_paths(const std::vector<std::string>& paths) {
  for (const auto& p : paths) {
    struct stat st{};
    if (::stat(p.c_str(), &st) != 0) continue;  // nothing to hide
    if (const int err = sandbox::mask_path(p.c_str(), S_ISDIR(st.st_mode)))
      throw ConfineError("cannot hide " + p + ": " + std::strerror(err));
  }
}

namespace {
std::uint64_t status_kb(const char* format) {
  FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return 0;
  char line[256];
  std::uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, format, &kb) == 1) break;
  std::fclose(f);
  return kb * 1024;
}
}  // namespace

std::uint64_t vm_size_bytes() { return status_kb("VmSize: %lu kB"); }
std::uint64_t vm_data_bytes() { return status_kb("VmData: %lu kB"); }

void set_limit(int resource, rlim_t value) {
  const rlimit rl{value, value};
  if (setrlimit(resource, &rl) != 0) throw ConfineError(std::string("setrlimit: ") + std::strerror(errno));
}

int highest_open_fd() {
  int high = -1;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return high;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') high = std::max(high, std::atoi(e->d_name));
  closedir(d);
  return high;
}

void set_agent_limits(std::uint64_t output_bytes, std::uint64_t host_memory_bytes) {
  set_limit(RLIMIT_CORE, 0);
  set_limit(RLIMIT_NOFILE, static_cast<rlim_t>(std::max(highest_open_fd(), 2)) + 1 + kSpareFds);
  set_limit(RLIMIT_NPROC, kMaxThreads);
  set_limit(RLIMIT_FSIZE, std::max<rlim_t>(output_bytes, 1u << 20));
  // RLIMIT_DATA, not RLIMIT_AS: CUDA's virtual reservations (cudaMallocAsync pools, the virtual
  // memory API, UVM) are PROT_NONE or shared device mappings and count in the address space but
  // not here; private writable memory (malloc, anonymous mmap, mprotect to writable) counts.
  // Shared anonymous memory and SysV segments, which RLIMIT_DATA does not see, are refused by
  // the agent seccomp layer.
  if (host_memory_bytes > 0) set_limit(RLIMIT_DATA, vm_data_bytes() + host_memory_bytes);
}

namespace {
std::string read_text(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "re")) {
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}
bool write_text(const std::string& path, const std::string& text) {
  const sandbox::Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  return fd && ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
}
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t at = 0;
  for (;;) {
    const std::size_t next = s.find(sep, at);
    out.push_back(s.substr(at, next == std::string::npos ? std::string::npos : next - at));
    if (next == std::string::npos) return out;
    at = next + 1;
  }
}
std::string join_path(const std::string& a, const std::string& b) {
  if (b.empty() || b == "/") return a;
  return (a.size() > 1 && a.back() == '/' ? a.substr(0, a.size() - 1) : a) + (b[0] == '/' ? b : "/" + b);
}
constexpr const char* kLeafPrefix = "d2k-runner-";

// Removes leaves of runners that no longer exist (rmdir fails on a cgroup that still has tasks).
void sweep_leaves(const std::string& parent) {
  DIR* d = opendir(parent.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, kLeafPrefix, std::strlen(kLeafPrefix)) != 0) continue;
    const long pid = std::atol(e->d_name + std::strlen(kLeafPrefix));
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      ::rmdir((parent + "/" + e->d_name).c_str());
  }
  closedir(d);
}
}  // namespace

std::vector<PidsParent> pids_cgroup_parents(const std::string& proc_self_cgroup, const std::string& mountinfo) {
  // Mount points: cgroup2, and the v1 hierarchy whose super options name pids.
  std::string v2_mount, v1_pids_mount;
  for (const std::string& line : split(mountinfo, '\n')) {
    // "<id> <parent> <maj:min> <root> <mount point> <options> [optional...] - <fstype> <source> <super options>"
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const auto fields = split(line.substr(0, dash), ' ');
    const auto tail = split(line.substr(dash + 3), ' ');
    if (fields.size() < 5 || tail.size() < 3 || fields[3] != "/") continue;  // a bind of a subtree: skip
    if (tail[0] == "cgroup2" && v2_mount.empty()) v2_mount = fields[4];
    if (tail[0] == "cgroup" && v1_pids_mount.empty())
      for (const std::string& opt : split(tail[2], ','))
        if (opt == "pids") v1_pids_mount = fields[4];
  }
  std::vector<PidsParent> out;
  for (const std::string& line : split(proc_self_cgroup, '\n')) {
    // "<hierarchy id>:<controllers>:<path>"
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string id = line.substr(0, first);
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (path.empty() || path[0] != '/') continue;
    if (id == "0" && controllers.empty() && !v2_mount.empty()) {
      const std::string own = join_path(v2_mount, path);
      const std::string parent = path == "/" ? own : own.substr(0, own.find_last_of('/'));
      out.insert(out.begin(), {parent.empty() ? "/" : parent, "v2"});
    } else if (!v1_pids_mount.empty()) {
      for (const std::string& c : split(controllers, ','))
        if (c == "pids") out.push_back({join_path(v1_pids_mount, path), "v1"});
    }
  }
  return out;
}

std::string limit_pids(std::uint64_t extra_tasks) {
  const std::uint64_t tasks = all_threads().size();
  for (const PidsParent& p : pids_cgroup_parents(read_text("/proc/self/cgroup"), read_text("/proc/self/mountinfo"))) {
    if (p.version == "v2") {  // only where the parent hands pids to its children (delegated)
      bool delegated = false;
      for (const std::string& c : split(read_text(p.dir + "/cgroup.subtree_control"), ' '))
        if (c == "pids" || c == "pids\n") delegated = true;
      if (!delegated) continue;
    }
    sweep_leaves(p.dir);
    const std::string leaf = p.dir + "/" + kLeafPrefix + std::to_string(getpid());
    if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) continue;
    if (write_text(leaf + "/pids.max", std::to_string(tasks + extra_tasks)) && write_text(leaf + "/cgroup.procs", "0"))
      return leaf;
    ::rmdir(leaf.c_str());  // not usable here: try the next parent
  }
  return "";
}

void make_write_only(int fd) {
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const sandbox::Fd wo(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!wo) throw ConfineError("reopening the output file write-only: " + std::string(std::strerror(errno)));
  if (::fchmod(wo.get(), S_IWUSR) != 0)
    throw ConfineError("taking the read bits off the output file: " + std::string(std::strerror(errno)));
  if (::dup3(wo.get(), fd, 0) < 0)
    throw ConfineError("replacing the output descriptor: " + std::string(std::strerror(errno)));
  if ((::fcntl(fd, F_GETFL) & O_ACCMODE) != O_WRONLY) throw ConfineError("the output descriptor is not write-only");
}

namespace {
#ifndef __NR_mseal
constexpr long kNrMseal = 462;  // x86-64, Linux 6.10
#else
constexpr long kNrMseal = __NR_mseal;
#endif
struct SealTarget {
  std::uintptr_t start, end;
  bool runner;  // the runner's own executable (a failure there is an error; elsewhere it is skipped)
};
// Libraries the runner's own calls (its clock among them) go through, loaded with it at start and
// never unloaded; the vDSO holds clock_gettime itself. CUDA's libraries are left alone: the driver
// and the loader manage their mappings.
bool sealed_library(const char* path) {
  const char* base = std::strrchr(path, '/');
  base = base != nullptr ? base + 1 : path;
  for (const char* prefix : {"ld-linux", "libc.so", "libm.so", "libstdc++.so", "libgcc_s.so", "libffi.so",
                             "libseccomp.so", "linux-vdso.so"})
    if (std::strncmp(base, prefix, std::strlen(prefix)) == 0) return true;
  return false;
}
int collect_image(dl_phdr_info* info, std::size_t, void* data) {
  auto* out = static_cast<std::vector<SealTarget>*>(data);
  const bool runner = out->empty() && (info->dlpi_name == nullptr || info->dlpi_name[0] == 0);  // first: the executable
  if (!runner && (info->dlpi_name == nullptr || !sealed_library(info->dlpi_name))) return 0;
  const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  auto down = [&](std::uintptr_t a) { return a & ~(page - 1); };
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_W) == 0)
      out->push_back({down(start), down(start + ph.p_memsz + page - 1), runner});
    if (ph.p_type == PT_GNU_RELRO && down(start + ph.p_memsz) > down(start))  // as the loader protects it
      out->push_back({down(start), down(start + ph.p_memsz), runner});
  }
  return 0;
}
}  // namespace

int seal_runner_image() {
  std::vector<SealTarget> targets;
  dl_iterate_phdr(collect_image, &targets);
  int sealed = 0;
  for (const SealTarget& t : targets) {
    if (::syscall(kNrMseal, t.start, t.end - t.start, 0UL) == 0) {
      ++sealed;
      continue;
    }
    if (errno == ENOSYS) return 0;  // no mseal on this kernel: nothing is sealed
    if (t.runner) throw ConfineError("mseal of the runner's image: " + std::string(std::strerror(errno)));
  }
  return sealed;
}

std::set<std::string> all_threads() {
  std::set<std::string> out;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') out.insert(e->d_name);
  closedir(d);
  return out;
}

std::set<std::string> foreign_threads(const std::set<std::string>& baseline) {
  std::set<std::string> out;
  for (const std::string& tid : all_threads()) {
    if (baseline.count(tid) != 0) continue;
    char comm[64] = {};
    const std::string path = "/proc/self/task/" + tid + "/comm";
    if (FILE* f = std::fopen(path.c_str(), "re")) {
      if (std::fgets(comm, sizeof comm, f) == nullptr) comm[0] = 0;
      std::fclose(f);
    }
    comm[std::strcspn(comm, "\n")] = 0;
    out.insert(tid + " (" + comm + ")");  // the name is only reported: any thread may set it
  }
  return out;
}

namespace {
void CUDART_CB no_op(void*) {}
}  // namespace

void start_callback_thread(cudaStream_t stream) {
  for (cudaStream_t s : {stream, static_cast<cudaStream_t>(nullptr)}) {
    if (cudaLaunchHostFunc(s, no_op, nullptr) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess)
      throw ConfineError("starting CUDA's host-callback thread failed");
  }
}

FileView agent_file_view(int so_fd) {
  FileView v;
  v.read = {"/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc/ld.so.cache", "/etc/ld.so.conf",
            "/etc/ld.so.conf.d", "/sys", "/proc/self", "/proc/driver/nvidia", "/proc/cpuinfo", "/proc/meminfo",
            "/proc/stat", "/proc/sys", "/proc/devices", "/proc/filesystems"};
  if (const char* ld = std::getenv("LD_LIBRARY_PATH")) {
    std::string rest = ld;
    for (std::size_t at = 0; at <= rest.size();) {
      const std::size_t colon = std::min(rest.find(':', at), rest.size());
      if (colon > at && rest[at] == '/') v.read.push_back(rest.substr(at, colon - at));
      at = colon + 1;
    }
  }
  v.read_write = {"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"};
  if (DIR* d = opendir("/dev")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, "nvidia", 6) == 0) v.read_write.push_back(std::string("/dev/") + e->d_name);
    closedir(d);
  }
  if (so_fd >= 0) v.read_fds.push_back(so_fd);
  return v;
}

namespace {
long landlock(long nr, long a, long b, long c) { return ::syscall(nr, a, b, c, 0L); }  // flags: 0
}  // namespace

void restrict_files(const FileView& view) {
  const long abi = landlock(SYS_landlock_create_ruleset, 0, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 1) throw ConfineError(std::string("Landlock is not available: ") + std::strerror(errno));
  constexpr std::uint64_t kFileRead = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_EXECUTE;
  constexpr std::uint64_t kFileWrite = LANDLOCK_ACCESS_FS_WRITE_FILE;
  std::uint64_t handled = kFileRead | kFileWrite | LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                          LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
                          LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                          LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) handled |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) handled |= LANDLOCK_ACCESS_FS_TRUNCATE;
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = handled;
  const sandbox::Fd ruleset(static_cast<int>(landlock(SYS_landlock_create_ruleset, reinterpret_cast<long>(&attr),
                                                      sizeof attr, 0)));
  if (!ruleset) throw ConfineError(std::string("landlock_create_ruleset: ") + std::strerror(errno));
  auto add = [&](int fd, std::uint64_t access, const std::string& what) {
    landlock_path_beneath_attr rule{};
    rule.parent_fd = fd;
    rule.allowed_access = access;
    if (landlock(SYS_landlock_add_rule, ruleset.get(), LANDLOCK_RULE_PATH_BENEATH, reinterpret_cast<long>(&rule)) != 0)
      throw ConfineError("landlock_add_rule " + what + ": " + std::strerror(errno));
  };
  for (const std::string& p : view.read) {
    const sandbox::Fd fd(::open(p.c_str(), O_PATH | O_CLOEXEC));
    if (!fd) continue;  // absent here: nothing to allow
    struct stat st{};
    if (fstat(fd.get(), &st) != 0) continue;
    add(fd.get(), S_ISDIR(st.st_mode) ? kFileRead | LANDLOCK_ACCESS_FS_READ_DIR : kFileRead, p);
  }
  for (const std::string& p : view.read_write) {
    const sandbox::Fd fd(::open(p.c_str(), O_PATH | O_CLOEXEC));
    struct stat st{};
    if (!fd || fstat(fd.get(), &st) != 0 || S_ISDIR(st.st_mode)) continue;
    add(fd.get(), LANDLOCK_ACCESS_FS_READ_FILE | kFileWrite, p);
  }
  for (int fd : view.read_fds) add(fd, kFileRead, "fd " + std::to_string(fd));
  for (const std::string& p : view.scratch_dirs) {
    const sandbox::Fd fd(::open(p.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) throw ConfineError("scratch folder " + p + ": " + std::strerror(errno));
    std::uint64_t rights = kFileRead | kFileWrite | LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                           LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG;
    if (abi >= 2) rights |= LANDLOCK_ACCESS_FS_REFER;
    if (abi >= 3) rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
    add(fd.get(), rights, p);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) throw ConfineError(std::string("no_new_privs: ") + std::strerror(errno));
  if (landlock(SYS_landlock_restrict_self, ruleset.get(), 0, 0) != 0)
    throw ConfineError(std::string("landlock_restrict_self: ") + std::strerror(errno));
}

void drop_privileges() {
  for (int cap = 0; cap <= 63; ++cap)  // (one already out of the set needs no CAP_SETPCAP: under a tool host)
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
      throw ConfineError(std::string("dropping the capability bounding set: ") + std::strerror(errno));
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capset, &header, data) != 0)
    throw ConfineError(std::string("capset: ") + std::strerror(errno));
}

std::uint64_t max_foreign_device_bytes(std::uint64_t total_bytes) {
  return std::max<std::uint64_t>(4ull << 30, total_bytes / 10);
}

void check_clean_device(std::uint64_t owned_bytes) {
  const cudaError_t sticky = cudaGetLastError();
  if (sticky != cudaSuccess) throw ConfineError(std::string("unclean device: pending error ") + cudaGetErrorName(sticky));
  std::size_t limit = 0;
  if (cudaDeviceGetLimit(&limit, cudaLimitPersistingL2CacheSize) != cudaSuccess)
    throw ConfineError("unclean device: cannot read the persisting L2 limit");
  if (limit != 0 && (cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0) != cudaSuccess ||
                     cudaDeviceGetLimit(&limit, cudaLimitPersistingL2CacheSize) != cudaSuccess || limit != 0))
    throw ConfineError("unclean device: the persisting L2 limit stays at " + std::to_string(limit) + " bytes");
  if (cudaCtxResetPersistingL2Cache() != cudaSuccess) throw ConfineError("unclean device: cannot reset persisting L2 lines");
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) throw ConfineError("unclean device: cannot read free memory");
  const std::uint64_t owned = std::min<std::uint64_t>(owned_bytes, total_bytes - free_bytes);
  const std::uint64_t used = total_bytes - free_bytes - owned;
  if (used > max_foreign_device_bytes(total_bytes))
    throw ConfineError("unclean device: " + std::to_string(used >> 20) + " MiB of device memory in use (at most " +
                       std::to_string(max_foreign_device_bytes(total_bytes) >> 20) + " MiB expected)");
}

double wait_until_cool(const std::function<DeviceCondition()>& read, double max_wait_s,
                       const std::function<void()>& beat) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto last_beat = t0;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  for (;;) {
    const std::string why = hot_reason(read());
    if (why.empty()) return since(t0);
    if (since(t0) >= max_wait_s) {
      char waited[32];
      std::snprintf(waited, sizeof waited, "%.0f", since(t0));
      throw ConfineError("unclean device: " + why + " still after " + waited + " s of waiting");
    }
    if (since(last_beat) >= 0.5) {
      if (beat) beat();
      last_beat = Clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::optional<unsigned> parse_device_minor(const std::string& information) {
  const auto at = information.find("Device Minor:");
  if (at == std::string::npos) return std::nullopt;
  unsigned minor = 0;
  if (std::sscanf(information.c_str() + at, "Device Minor: %u", &minor) != 1) return std::nullopt;
  return minor;
}

std::vector<std::string> other_gpu_nodes(const std::vector<std::pair<std::string, unsigned>>& nodes, unsigned own_minor) {
  std::vector<std::string> out;
  for (const auto& [name, minor] : nodes)
    if (minor != own_minor) out.push_back(name);
  return out;
}

namespace {
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
bool gpu_node_name(const char* name) {  // nvidia<digits>
  if (std::strncmp(name, "nvidia", 6) != 0 || name[6] == 0) return false;
  for (const char* p = name + 6; *p; ++p)
    if (!std::isdigit(static_cast<unsigned char>(*p))) return false;
  return true;
}
}  // namespace

void hide_other_gpus(const std::string& pci_bus_id) {
  if (!g_private_mounts) return;
  std::vector<std::pair<std::string, unsigned>> nodes;
  if (DIR* d = opendir("/dev")) {
    while (dirent* e = readdir(d)) {
      if (!gpu_node_name(e->d_name)) continue;
      struct stat st{};
      const std::string path = std::string("/dev/") + e->d_name;
      if (::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) nodes.emplace_back(path, minor(st.st_rdev));
    }
    closedir(d);
  }
  std::optional<unsigned> own;
  if (DIR* d = opendir("/proc/driver/nvidia/gpus")) {
    while (dirent* e = readdir(d)) {
      if (lower(e->d_name) != lower(pci_bus_id)) continue;
      std::string text;
      if (FILE* f = std::fopen((std::string("/proc/driver/nvidia/gpus/") + e->d_name + "/information").c_str(), "re")) {
        char buf[4096];
        const std::size_t n = std::fread(buf, 1, sizeof buf, f);
        text.assign(buf, n);
        std::fclose(f);
      }
      own = parse_device_minor(text);
    }
    closedir(d);
  }
  if (!own) {
    if (nodes.size() <= 1) return;  // nothing else to hide
    throw ConfineError("cannot tell this runner's GPU node (" + pci_bus_id + ") among " +
                       std::to_string(nodes.size()));
  }
  for (const std::string& node : other_gpu_nodes(nodes, *own))
    if (const int err = sandbox::mask_path(node.c_str(), false))
      throw ConfineError("cannot hide " + node + ": " + std::strerror(err));
}

}  // namespace d2k::runner
