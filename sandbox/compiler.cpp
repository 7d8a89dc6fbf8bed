// The sandboxed compile: validate → key → cache lookup → job dir → nvcc in a jail → parse →
// store → remove the job dir.
#include "sandbox/compiler.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "sandbox/compile_cache.hpp"
#include "sandbox/jail.hpp"
#include "sandbox/process.hpp"

namespace fs = std::filesystem;

namespace d2k::sandbox {
namespace {

constexpr const char* kJob = "/job";
constexpr std::size_t kParseBytes = 1u << 20;  // output kept for parsing; the log is cut shorter

bool all_of(std::string_view s, bool (*pred)(char)) {
  return !s.empty() && std::all_of(s.begin(), s.end(), pred);
}
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)); }
// Values stay plain tokens: nvcc hands flags to its tools through /bin/sh.
bool is_value_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '+' || c == '-'; }
bool is_arch_char(char c) {
  return std::islower(static_cast<unsigned char>(c)) || is_digit(c) || c == '_' || c == ',' || c == '=' || c == '[' || c == ']';
}
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string check_one_flag(std::string_view f) {
  static constexpr std::string_view kExact[] = {"-O0", "-O1", "-O2", "-O3", "-lineinfo", "-std=c++17",
                                                "-std=c++20", "--use_fast_math", "-use_fast_math"};
  for (auto e : kExact)
    if (f == e) return {};
  if (starts_with(f, "-arch=") && all_of(f.substr(6), is_arch_char)) return {};
  if (starts_with(f, "-gencode=") && all_of(f.substr(9), is_arch_char)) return {};
  if (starts_with(f, "-maxrregcount=") && all_of(f.substr(14), is_digit) && f.size() < 20) return {};
  if (starts_with(f, "-D")) {
    std::string_view def = f.substr(2);
    std::size_t eq = def.find('=');
    std::string_view name = def.substr(0, eq);
    if (all_of(name, is_ident_char) && !is_digit(name.front()) &&
        (eq == std::string_view::npos || eq + 1 == def.size() || all_of(def.substr(eq + 1), is_value_char)))
      return {};
  }
  return "flag not allowed: " + std::string(f.substr(0, 200));
}

std::string join_output_prefix_stripped(const std::string& text) {
  // "/job/kernel.cu" → "kernel.cu" where a path starts (line start, space, quote, paren).
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    bool boundary = i == 0 || text[i - 1] == '\n' || text[i - 1] == ' ' || text[i - 1] == '"' ||
                    text[i - 1] == '\'' || text[i - 1] == '(' || text[i - 1] == '`';
    if (boundary && text.compare(i, 5, "/job/") == 0) {
      i += 5;
      continue;
    }
    out.push_back(text[i++]);
  }
  return out;
}

// A subprocess killed by the filter shows up only in nvcc's or gcc's words.
bool mentions_sigsys(const std::string& log) {
  return log.find("due to signal 31") != std::string::npos || log.find("Bad system call") != std::string::npos;
}

// Why a failed compile says nothing about its source, or empty: a tool killed by a signal (the OOM
// killer, RLIMIT_CPU) or out of memory under this server's limits. nvcc itself then exits
// "normally", with 128+signal (its shell's status for the tool) or 1; only the words tell.
std::string resource_failure(const std::string& log, int exit_status) {
  if (exit_status > 128 && exit_status < 128 + 65)
    return "a compiler tool was killed by signal " + std::to_string(exit_status - 128);
  static constexpr std::string_view kMarks[] = {
      "Killed",                     // /bin/sh, for a tool that died of SIGKILL
      "died due to signal",         // nvcc, for a tool that died of a signal
      "signal terminated program",  // the gcc driver, for cc1plus/as/collect2
      "out of memory",              // cudafe++/cicc ("catastrophic error: out of memory"), ptxas
      "std::bad_alloc",
      "virtual memory exhausted",   // gcc
      "Cannot allocate memory",
  };
  for (auto mark : kMarks)
    if (log.find(mark) != std::string::npos) return "a compiler tool was killed or ran out of memory (\"" + std::string(mark) + "\")";
  return {};
}

fs::path toolkit_root(const fs::path& tool) {  // <root>/bin/tool → <root>
  return fs::canonical(tool).parent_path().parent_path();
}

bool under_usr(const fs::path& p) {
  auto s = fs::canonical(p).string();
  return s.rfind("/usr/", 0) == 0;
}

class JobDir {
 public:
  explicit JobDir(fs::path p) : path_(std::move(p)) { fs::create_directories(path_); }
  JobDir(const JobDir&) = delete;
  JobDir& operator=(const JobDir&) = delete;
  ~JobDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The jailed uid owns the job dir and may have swapped out/ or kernel.so for symlinks to host
// files: walk to the artifact with O_NOFOLLOW at every step and copy from the fd.
bool copy_artifact_out(const fs::path& job, const fs::path& dest) {
  Fd dir(open(job.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return false;
  Fd out(openat(dir.get(), "out", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!out) return false;
  Fd src(openat(out.get(), "kernel.so", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  struct stat st {};
  if (!src || fstat(src.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return false;
  Fd dst(open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!dst) return false;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(src.get(), buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0) return false;
    for (ssize_t done = 0; done < n;) {
      ssize_t w = write(dst.get(), buf + done, static_cast<std::size_t>(n - done));
      if (w <= 0) return false;
      done += w;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// cgroup v2 control files.

std::string read_small_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool has_word(const std::string& text, std::string_view word) {
  std::istringstream in(text);
  for (std::string w; in >> w;)
    if (w == word) return true;
  return false;
}

// Writes to an existing control file: empty, or why not.
std::string write_control(const fs::path& p, const std::string& text) {
  Fd fd(open(p.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd || write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return "write " + p.string() + ": " + std::strerror(errno);
  return {};
}

// This process's cgroup v2 directory (its 0:: line under the cgroup2 mount), or empty with why.
fs::path own_cgroup2_dir(std::string* why) {
  std::string rel;
  {
    std::ifstream in("/proc/self/cgroup");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("0::", 0) == 0) rel = line.substr(3);
  }
  if (rel.empty()) {
    *why = "no cgroup v2 entry in /proc/self/cgroup";
    return {};
  }
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    fields >> id >> parent >> dev >> root >> mount_point;
    if (rel.rfind(root, 0) != 0) continue;  // this mount does not show our cgroup
    const fs::path below = fs::path(rel.substr(root.size())).relative_path();
    return below.empty() ? fs::path(mount_point) : fs::path(mount_point) / below;
  }
  *why = "cgroup v2 is not mounted";
  return {};
}

// d2k-compile-<pid>-<n> cgroups of dead servers (their jobs' cgroups first; all are empty).
void remove_dead_compile_cgroups(const fs::path& parent) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("d2k-compile-", 0) != 0) continue;
    const std::string rest = name.substr(12);
    const std::string digits = rest.substr(0, rest.find('-'));
    if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), is_digit)) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code ec2;
    for (const auto& job : fs::directory_iterator(e.path(), ec2))
      if (job.is_directory(ec2)) rmdir(job.path().c_str());
    rmdir(e.path().c_str());
  }
}

std::string gib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / static_cast<double>(1ull << 30));
  return buf;
}

// One jail's cgroup below the Compiler's: made before the jail starts, removed after it ends (the
// pid namespace is empty by then).
class JobCgroup {
 public:
  // Throws std::runtime_error when the cgroup cannot be made or limited.
  JobCgroup(const fs::path& dir, const CompileLimits& limits) : dir_(dir) {
    if (mkdir(dir_.c_str(), 0755) != 0) throw std::runtime_error("mkdir " + dir_.string() + ": " + std::strerror(errno));
    std::string err = write_control(dir_ / "memory.max", std::to_string(limits.jail_memory_bytes));
    if (err.empty()) err = write_control(dir_ / "pids.max", std::to_string(limits.max_processes));
    if (err.empty() && fs::exists(dir_ / "memory.swap.max")) err = write_control(dir_ / "memory.swap.max", "0");
    if (!err.empty()) {
      rmdir(dir_.c_str());
      throw std::runtime_error(err);
    }
  }
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;
  ~JobCgroup() { rmdir(dir_.c_str()); }  // a failure leaves it to the next start's sweep
  const fs::path& dir() const { return dir_; }
  std::uint64_t oom_kills() const {
    std::istringstream in(read_small_file(dir_ / "memory.events"));
    for (std::string key; in >> key;) {
      std::uint64_t value = 0;
      in >> value;
      if (key == "oom_kill") return value;
    }
    return 0;
  }

 private:
  fs::path dir_;
};

CompileOutcome rejected(std::string why, std::chrono::steady_clock::time_point t0) {
  CompileOutcome o;
  o.diagnostics.push_back({"", 0, 0, "error", why});
  o.log = std::move(why);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

}  // namespace

std::vector<std::string> base_flags_for(std::vector<std::string> base, const std::vector<std::string>& flags) {
  const bool own_arch = std::any_of(flags.begin(), flags.end(), [](const std::string& f) {
    return f.rfind("-arch=", 0) == 0 || f.rfind("-gencode=", 0) == 0;
  });
  if (own_arch)
    base.erase(std::remove_if(base.begin(), base.end(), [](const std::string& f) { return f.rfind("-arch=", 0) == 0; }),
               base.end());
  return base;
}

std::string check_flags(const std::vector<std::string>& flags) {
  for (std::size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] == "-Xptxas") {
      if (i + 1 < flags.size() && flags[i + 1] == "-v") {
        ++i;
        continue;
      }
      return "flag not allowed: -Xptxas takes only -v";
    }
    if (flags[i] == "-Xptxas=-v") continue;
    if (auto why = check_one_flag(flags[i]); !why.empty()) return why;
  }
  return {};
}

std::string check_workspace_path(const std::string& path) {
  if (path.empty()) return "empty file name";
  if (path.size() > 255) return "file name too long";
  if (path.front() == '/') return "absolute path not allowed: " + path;
  for (char c : path)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/'))
      return "character not allowed in file name: " + path.substr(0, 100);
  std::string_view rest(path);
  while (true) {
    std::size_t slash = rest.find('/');
    std::string_view part = rest.substr(0, slash);
    if (part.empty() || part == "." || part == "..") return "bad path component in: " + path;
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  return {};
}

std::size_t remove_orphan_jobs(const fs::path& scratch_dir) {
  std::size_t removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(scratch_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("job-", 0) != 0) continue;
    const std::size_t end = name.find('-', 4);
    const std::string digits = name.substr(4, end == std::string::npos ? std::string::npos : end - 4);
    if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), is_digit)) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;  // its server may still run
    std::error_code ec2;
    if (fs::remove_all(e.path(), ec2) > 0 && !ec2) ++removed;
  }
  return removed;
}

std::string CompileLimits::describe() const {
  if (cgroup)
    return "compile limits: cgroup v2 " + cgroup_dir.string() + ": per jail memory.max " + gib(jail_memory_bytes) +
           " (no swap), pids.max " + std::to_string(max_processes) + "; all compiles together memory.max " + gib(budget_bytes);
  const std::uint64_t at_once = jail_memory_bytes ? std::max<std::uint64_t>(1, budget_bytes / jail_memory_bytes) : 0;
  return "compile limits: no cgroup (" + fallback_reason + "); fallback: each compile reserves " + gib(jail_memory_bytes) +
         " of a " + gib(budget_bytes) + " budget (at most " + std::to_string(at_once) +
         " at once), per-process RLIMIT_AS and per-jail RLIMIT_NPROC " + std::to_string(max_processes);
}

CompileLimits choose_compile_limits(const CompilerConfig& config) {
  CompileLimits l;
  l.jail_memory_bytes = config.jail_memory_bytes;
  l.max_processes = config.max_processes;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const std::uint64_t physical = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
  l.budget_bytes = config.memory_budget_bytes ? config.memory_budget_bytes : std::max(config.jail_memory_bytes, physical / 2);
  auto fallback = [&](std::string why) {
    l.fallback_reason = std::move(why);
    return l;
  };
  if (config.cgroup == "off") return fallback("cgroups off by configuration");
  fs::path parent;
  if (config.cgroup == "auto") {
    std::string why;
    parent = own_cgroup2_dir(&why);
    if (parent.empty()) return fallback(why);
  } else {
    parent = config.cgroup;
  }
  const std::string offered = read_small_file(parent / "cgroup.controllers");
  if (!has_word(offered, "memory") || !has_word(offered, "pids")) {
    std::string list = offered.substr(0, offered.find('\n'));
    return fallback("cgroup v2 at " + parent.string() + " offers no memory and pids controllers (offers: '" + list +
                    "'; on a hybrid host they are on cgroup v1)");
  }
  remove_dead_compile_cgroups(parent);
  const std::string enabled = read_small_file(parent / "cgroup.subtree_control");
  if (!has_word(enabled, "memory") || !has_word(enabled, "pids"))
    if (auto err = write_control(parent / "cgroup.subtree_control", "+memory +pids"); !err.empty())
      return fallback("cannot enable memory and pids below " + parent.string() + " (" + err +
                      "; a cgroup holding processes cannot: delegate an empty one)");
  static std::atomic<std::uint32_t> counter{0};
  const fs::path dir = parent / ("d2k-compile-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  if (mkdir(dir.c_str(), 0755) != 0) return fallback("cannot create " + dir.string() + ": " + std::strerror(errno));
  std::string err = write_control(dir / "memory.max", std::to_string(l.budget_bytes));
  if (err.empty()) err = write_control(dir / "cgroup.subtree_control", "+memory +pids");
  if (!err.empty()) {
    rmdir(dir.c_str());
    return fallback(err);
  }
  l.cgroup = true;
  l.cgroup_dir = dir;
  return l;
}

std::uint64_t MemoryBudget::acquire(std::uint64_t bytes) {
  bytes = std::min(bytes, total_);
  std::unique_lock lock(mu_);
  freed_.wait(lock, [&] { return used_ + bytes <= total_; });
  used_ += bytes;
  return bytes;
}

bool MemoryBudget::try_acquire(std::uint64_t bytes) {
  bytes = std::min(bytes, total_);
  std::lock_guard lock(mu_);
  if (used_ + bytes > total_) return false;
  used_ += bytes;
  return true;
}

void MemoryBudget::release(std::uint64_t bytes) {
  {
    std::lock_guard lock(mu_);
    used_ -= std::min(bytes, used_);
  }
  freed_.notify_all();
}

std::uint64_t MemoryBudget::in_use() const {
  std::lock_guard lock(mu_);
  return used_;
}

Compiler::~Compiler() {
  if (limits_.cgroup) rmdir(limits_.cgroup_dir.c_str());
}

Compiler::Compiler(CompilerConfig config) : config_(std::move(config)) {
  if (config_.cache_dir.empty() || config_.scratch_dir.empty())
    throw std::runtime_error("compiler: cache_dir and scratch_dir are required");
  if (access(config_.nvcc.c_str(), X_OK) != 0) throw std::runtime_error("compiler: nvcc not executable: " + config_.nvcc.string());
  if (access(config_.host_compiler.c_str(), X_OK) != 0)
    throw std::runtime_error("compiler: host compiler not executable: " + config_.host_compiler.string());
  fs::create_directories(config_.cache_dir);
  fs::create_directories(config_.scratch_dir);
  config_.scratch_dir = fs::canonical(config_.scratch_dir);
  remove_orphan_jobs(config_.scratch_dir);
  limits_ = choose_compile_limits(config_);
  if (!limits_.cgroup) budget_ = std::make_unique<MemoryBudget>(limits_.budget_bytes);
  cache_ = std::make_unique<CompileCache>(config_.cache_dir, CacheBudget{config_.cache_max_bytes, config_.cache_keep_recent});

  // Read once through the same jail the compiles use: a broken jail fails here, loudly.
  auto version = [&](const fs::path& tool) {
    JailSpec spec;
    spec.argv = {tool.string(), "--version"};
    spec.env = {{"PATH", "/usr/local/cuda/bin:/usr/bin:/bin"}, {"HOME", "/tmp"}, {"LANG", "C"}};
    spec.deadline = std::chrono::seconds(30);
    if (!under_usr(tool)) spec.mounts.push_back({toolkit_root(tool), toolkit_root(tool), false});
    JailOutcome out = run_jailed(spec);
    if (!out.started || out.exit_status != 0)
      throw std::runtime_error("compiler: cannot run " + tool.string() + " --version in the jail: " +
                               (out.started ? out.output : out.setup_error));
    return out.output;
  };
  std::string host = version(config_.host_compiler);
  toolchain_ = version(config_.nvcc) + host.substr(0, host.find('\n'));
}

std::string Compiler::toolchain_version() const { return toolchain_; }

CompileOutcome Compiler::compile(const CompileRequest& request) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };

  // 1. Validate (again: the caller validated too, but this is the last line before the compiler).
  if (request.files.size() > config_.max_files) return rejected("too many files in the workspace", t0);
  std::size_t total = 0;
  for (const auto& [path, content] : request.files) {
    if (auto why = check_workspace_path(path); !why.empty()) return rejected(why, t0);
    total += content.size();
  }
  if (total > config_.max_source_bytes) return rejected("workspace too large", t0);
  if (auto why = check_workspace_path(request.main_file); !why.empty()) return rejected(why, t0);
  if (!request.files.count(request.main_file)) return rejected("main file not in the workspace: " + request.main_file, t0);
  if (request.main_file.size() < 4 || request.main_file.substr(request.main_file.size() - 3) != ".cu")
    return rejected("main file must be a .cu file: " + request.main_file, t0);
  if (auto why = check_flags(request.flags); !why.empty()) return rejected(why, t0);

  const std::vector<std::string> base = base_flags_for(config_.base_flags, request.flags);

  // 2. Key and cache.
  std::vector<std::string> parts = {"d2k-compile-v1", toolchain_, config_.nvcc.string(), config_.host_compiler.string()};
  parts.insert(parts.end(), base.begin(), base.end());
  parts.push_back("--");
  parts.insert(parts.end(), request.flags.begin(), request.flags.end());
  parts.push_back(request.main_file);
  const std::string key = content_key(parts, request.files);
  if (auto hit = cache_->lookup(key)) {
    ++hits_;
    hit->seconds = elapsed();
    return *hit;
  }
  ++misses_;

  // 3. The job dir: this request's files only, mounted at /job.
  static std::atomic<std::uint64_t> job_counter{0};
  JobDir job(config_.scratch_dir / ("job-" + std::to_string(getpid()) + "-" + std::to_string(job_counter++) + "-" + key.substr(0, 12)));
  for (const auto& [path, content] : request.files) {
    // Errors name the workspace path only: the job dir's host path (state dir, pid) never reaches a
    // client.
    fs::path p = job.path() / path;
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    std::ofstream f(p, std::ios::binary);
    f.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (ec || !f) throw std::runtime_error("compiler: cannot write workspace file '" + path + "'");
  }
  fs::create_directories(job.path() / "out");

  // 4. nvcc in the jail.
  JailSpec spec;
  spec.argv = {config_.nvcc.string(), "-ccbin", config_.host_compiler.string()};
  spec.argv.insert(spec.argv.end(), base.begin(), base.end());
  spec.argv.insert(spec.argv.end(), request.flags.begin(), request.flags.end());
  spec.argv.insert(spec.argv.end(), {"-o", std::string(kJob) + "/out/kernel.so", std::string(kJob) + "/" + request.main_file});
  spec.env = {{"PATH", "/usr/local/cuda/bin:/usr/bin:/bin"}, {"TMPDIR", "/tmp"}, {"HOME", "/tmp"}, {"LANG", "C"}, {"LC_ALL", "C"}};
  spec.cwd = kJob;
  spec.mounts.push_back({job.path(), kJob, true});
  spec.mount_proc = false;  // no /proc/self/mountinfo naming the job dir's host path (issue 22)
  for (const auto& tool : {config_.nvcc, config_.host_compiler})
    if (!under_usr(tool)) spec.mounts.push_back({toolkit_root(tool), toolkit_root(tool), false});
  spec.hidden_paths = config_.hidden_paths;
  spec.seccomp = SeccompProfile::compiler;
  spec.cpu_seconds = config_.cpu_seconds;
  spec.deadline = config_.deadline;
  spec.address_space_bytes = config_.address_space_bytes;
  spec.file_size_bytes = config_.file_size_bytes;
  spec.max_processes = config_.max_processes;
  spec.max_output_bytes = std::max(config_.max_log_bytes, kParseBytes);
  // Memory: the jail's own cgroup, or a reservation from the budget held while nvcc runs.
  static std::atomic<std::uint64_t> cgroup_counter{0};
  std::optional<JobCgroup> job_cgroup;
  std::string cgroup_error;
  if (limits_.cgroup) {
    try {
      job_cgroup.emplace(limits_.cgroup_dir / ("job-" + std::to_string(cgroup_counter++)), limits_);
      spec.cgroup = job_cgroup->dir();
    } catch (const std::exception& e) {
      cgroup_error = e.what();
    }
  }
  struct Reservation {
    MemoryBudget* budget;
    std::uint64_t bytes;
    ~Reservation() {
      if (budget) budget->release(bytes);
    }
  } reservation{budget_.get(), budget_ ? budget_->acquire(config_.jail_memory_bytes) : 0};
  JailOutcome run;
  if (cgroup_error.empty()) {
    run = run_jailed(spec);
  } else {
    run.setup_error = "the compile's cgroup could not be set up";  // cgroup_error names host paths
  }

  // 5. The outcome.
  CompileOutcome out;
  out.key = key;
  out.exit_status = run.exit_status;
  out.signal = run.signal;
  out.timed_out = run.timed_out;
  std::string text = join_output_prefix_stripped(run.started ? run.output : run.setup_error);
  std::vector<Diagnostic> diags = parse_diagnostics(text);
  if (!run.started) diags.insert(diags.begin(), {"", 0, 0, "fatal", "sandbox setup failed: " + run.setup_error});
  if (run.timed_out)
    diags.insert(diags.begin(), {"", 0, 0, "fatal", "compile exceeded its deadline of " +
                                                         std::to_string(config_.deadline.count()) + " ms"});
  if (run.seccomp_killed || mentions_sigsys(text)) {
    out.sandbox_violation = true;
    out.violation = run.seccomp_killed ? "nvcc: " + run.violation
                                       : "a compiler subprocess was killed by the seccomp filter (SIGSYS)";
  }
  // Judged on the whole output (the log is cut below); applies only to a failed compile.
  std::string resource = run.started && !run.timed_out && !out.sandbox_violation ? resource_failure(text, run.exit_status)
                                                                                 : std::string();
  if (run.started && resource.empty() && job_cgroup && job_cgroup->oom_kills() > 0)
    resource = "out of memory: the compile's cgroup limit (memory.max " + gib(limits_.jail_memory_bytes) + ") was reached";
  if (diags.size() > config_.max_diagnostics) {
    out.diagnostics_dropped = diags.size() - config_.max_diagnostics;
    diags.resize(config_.max_diagnostics);
  }
  out.diagnostics = std::move(diags);
  out.log_truncated = run.output_dropped > 0 || text.size() > config_.max_log_bytes;
  if (text.size() > config_.max_log_bytes) text.resize(config_.max_log_bytes);
  out.log = std::move(text);
  // The copy lives beside the job dir (root-owned), never inside it.
  const fs::path built = job.path().string() + ".kernel.so";
  struct RemoveBuilt {
    const fs::path& p;
    ~RemoveBuilt() {
      std::error_code ec;
      fs::remove(p, ec);
    }
  } remove_built{built};
  out.ok = run.started && run.exit_status == 0 && !out.sandbox_violation && copy_artifact_out(job.path(), built);

  // 6. Store what is a property of the source alone (not deadlines, signals, violations, tools
  // killed or out of memory: those depend on the load and on this server's limits).
  if (!out.ok && !resource.empty()) {
    out.resource_failure = std::move(resource);
    out.diagnostics.insert(out.diagnostics.begin(), {"", 0, 0, "fatal", out.resource_failure + "; not cached, a retry may succeed"});
    if (out.diagnostics.size() > config_.max_diagnostics) {
      out.diagnostics.pop_back();
      ++out.diagnostics_dropped;
    }
  }
  const bool deterministic = run.started && !run.timed_out && run.signal == 0 && !out.sandbox_violation &&
                             out.resource_failure.empty();
  if (deterministic) out.artifact = cache_->store(key, out, out.ok ? built : fs::path());
  out.seconds = elapsed();
  return out;
}

}  // namespace d2k::sandbox
