// Pure functions of the sandbox: diagnostics parser, flag and path checks, cache key, store and
// budget, scratch clean-up, file-view plan.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <future>

#include <algorithm>

#include "catch.hpp"
#include "helpers.hpp"
#include "sandbox/compile_cache.hpp"
#include "sandbox/compiler.hpp"
#include "sandbox/detail/file_view.hpp"

using namespace d2k::sandbox;
using d2k::sandbox::testing::TempDir;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("parse_diagnostics: gcc, nvcc front end, ptxas, nvcc, linker", "[diagnostics]") {
  const std::string log =
      "/job/kernel.cu:12:5: error: expected ';' before '}' token\n"
      "/job/util/helpers.cuh:3: warning: unused thing\n"
      "/job/kernel.cu(7): error: identifier \"x\" is undefined\n"
      "kernel.cu(9): warning #177-D: variable \"y\" was declared but never referenced\n"
      "/job/kernel.cu(1): catastrophic error: cannot open source file \"/work/main/tasks/x/reference.cu\"\n"
      "/job/kernel.cu:1:10: fatal error: /dev/zero: No such file or directory\n"
      "ptxas error   : Entry function '_Z1kv' uses too much shared data\n"
      "ptxas /tmp/tmpxft_0001.ptx, line 5; error   : Unknown symbol 'foo'\n"
      "ptxas info    : Used 10 registers\n"
      "nvcc fatal   : Unsupported gpu architecture 'compute_1'\n"
      "/usr/bin/ld: /tmp/x.o: in function `main':\n"
      "kernel.cu:(.text+0x1a): undefined reference to `missing()'\n"
      "collect2: error: ld returned 1 exit status\n"
      "In file included from /job/kernel.cu:2:\n"
      "plain text line without a diagnostic\n";
  auto d = parse_diagnostics(log);
  REQUIRE(d.size() == 11);
  CHECK(d[0].file == "kernel.cu");
  CHECK(d[0].line == 12);
  CHECK(d[0].column == 5);
  CHECK(d[0].severity == "error");
  CHECK(d[0].message == "expected ';' before '}' token");
  CHECK(d[1].file == "util/helpers.cuh");
  CHECK(d[1].line == 3);
  CHECK(d[1].column == 0);
  CHECK(d[1].severity == "warning");
  CHECK(d[2].file == "kernel.cu");
  CHECK(d[2].line == 7);
  CHECK(d[2].message == "identifier \"x\" is undefined");
  CHECK(d[3].severity == "warning");
  CHECK(d[3].line == 9);
  CHECK(d[4].severity == "fatal");
  CHECK(d[5].severity == "fatal");
  CHECK(d[5].message == "/dev/zero: No such file or directory");
  CHECK(d[6].file == "ptxas");
  CHECK(d[6].severity == "error");
  CHECK(d[7].line == 5);
  CHECK(d[7].message == "Unknown symbol 'foo'");
  CHECK(d[8].file == "nvcc");
  CHECK(d[8].severity == "fatal");
  // "/usr/bin/ld: ...: in function" is context only, not a diagnostic.
  CHECK(d[9].file == "kernel.cu");
  CHECK(d[9].severity == "error");
  CHECK(d[9].message.rfind("undefined reference to", 0) == 0);
  CHECK(d[10].file == "collect2");
}

TEST_CASE("parse_diagnostics survives hostile input", "[diagnostics]") {
  std::string huge(1 << 20, ':');
  huge += "\n" + std::string(100000, '(') + "1): error: x\n";
  auto d = parse_diagnostics(huge);
  REQUIRE(d.size() == 1);
  CHECK(d[0].line == 1);
  CHECK(parse_diagnostics("").empty());
  CHECK(parse_diagnostics("k.cu:99999999999999999:1: error: big\n").size() == 1);
  std::string binary("\0\xff\xfe:1:1: error: \x01\n", 18);
  CHECK(parse_diagnostics(binary).size() == 1);
}

TEST_CASE("base_flags_for: a request's own architecture replaces the base -arch, nothing else", "[flags]") {
  const std::vector<std::string> base = CompilerConfig{}.base_flags;
  REQUIRE(std::count(base.begin(), base.end(), std::string("-arch=sm_90")) == 1);
  CHECK(base_flags_for(base, {}) == base);
  CHECK(base_flags_for(base, {"-O2", "-DX=1"}) == base);
  for (const std::string own : {"-arch=sm_90a", "-gencode=arch=compute_90a,code=sm_90a"}) {
    const auto got = base_flags_for(base, {"-lineinfo", own});
    CHECK(std::none_of(got.begin(), got.end(), [](const std::string& f) { return f.rfind("-arch=", 0) == 0; }));
    CHECK(got.size() == base.size() - 1);  // the other fixed flags stay
  }
}

TEST_CASE("check_flags: allowlist", "[flags]") {
  for (std::vector<std::string> ok : std::vector<std::vector<std::string>>{
           {"-arch=sm_90a"}, {"-gencode=arch=compute_90a,code=sm_90a"}, {"-O2"}, {"-lineinfo"},
           {"-DBLOCK=256"}, {"-DUSE_X"}, {"-std=c++20"}, {"-maxrregcount=64"}, {"--use_fast_math"},
           {"-Xptxas", "-v"}, {"-Xptxas=-v"}, {}}) {
    INFO((ok.empty() ? std::string("(none)") : ok[0]));
    CHECK(check_flags(ok).empty());
  }
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"-Xcompiler", "-fplugin=x"}, {"-I/work"}, {"-include", "/etc/passwd"}, {"-DX=$(id)"},
           {"-DX=a b"}, {"-D1X"}, {"-Xptxas"}, {"-Xptxas", "-O0"}, {"--compiler-bindir=/tmp"},
           {"-ftemplate-depth=100000"}, {"-o", "/x"}, {"-arch=sm_90;id"}, {"-maxrregcount=x"}}) {
    INFO(bad[0]);
    CHECK_FALSE(check_flags(bad).empty());
  }
}

TEST_CASE("check_workspace_path", "[paths]") {
  CHECK(check_workspace_path("kernel.cu").empty());
  CHECK(check_workspace_path("include/util.cuh").empty());
  for (const std::string& bad : std::vector<std::string>{"", "/etc/passwd", "../x.cu", "a/../../x", "a//b", "./a", "a/.", "a b",
                          "a\\b", std::string("a\0b", 3), std::string(300, 'a')}) {
    INFO(bad);
    CHECK_FALSE(check_workspace_path(bad).empty());
  }
}

TEST_CASE("content_key: stable, length-prefixed, content-sensitive", "[cache]") {
  std::map<std::string, std::string> files = {{"kernel.cu", "int x;"}, {"a.cuh", "y"}};
  auto k = content_key({"tool", "-O3"}, files);
  CHECK(k.size() == 32);
  CHECK(k == content_key({"tool", "-O3"}, files));
  CHECK(k != content_key({"tool-O3"}, files));
  CHECK(content_key({"ab", "c"}, {}) != content_key({"a", "bc"}, {}));
  auto changed = files;
  changed["a.cuh"] = "z";
  CHECK(k != content_key({"tool", "-O3"}, changed));
}

TEST_CASE("CompileCache: store then lookup; damaged entries are misses", "[cache]") {
  TempDir dir;
  CompileCache cache(dir.path() / "cache");
  const std::string key = std::string(32, 'a');
  CHECK_FALSE(cache.lookup(key));

  auto artifact = dir.write("built.so", "ELF...");
  CompileOutcome o;
  o.ok = true;
  o.exit_status = 0;
  o.key = key;
  o.log = std::string("bad utf8 \xff\xfe ok");
  o.diagnostics.push_back({"kernel.cu", 3, 4, "warning", "w"});
  auto stored = cache.store(key, o, artifact);
  CHECK(stored == cache.entry_dir(key) / "kernel.so");
  auto hit = cache.lookup(key);
  REQUIRE(hit);
  CHECK(hit->cached);
  CHECK(hit->ok);
  CHECK(hit->artifact == stored);
  REQUIRE(hit->diagnostics.size() == 1);
  CHECK(hit->diagnostics[0].line == 3);
  CHECK(hit->log.rfind("bad utf8 ", 0) == 0);

  const std::string other = std::string(32, 'b');
  CompileOutcome failed;
  failed.key = other;
  failed.exit_status = 1;
  cache.store(other, failed);
  auto miss = cache.lookup(other);
  REQUIRE(miss);
  CHECK_FALSE(miss->ok);
  CHECK(miss->artifact.empty());

  std::ofstream(cache.entry_dir(other) / "outcome.json", std::ios::trunc) << "{ not json";
  CHECK_FALSE(cache.lookup(other));
  // No temporary directories are left beside the entries.
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path() / "cache"))
    CHECK(e.path().filename().string().rfind(".tmp-", 0) != 0);
}

namespace {

CompileOutcome outcome_for(const std::string& key) {
  CompileOutcome o;
  o.ok = true;
  o.exit_status = 0;
  o.key = key;
  return o;
}

void set_last_use(CompileCache& cache, const std::string& key, std::chrono::seconds ago) {
  std::filesystem::last_write_time(cache.entry_dir(key) / "outcome.json", std::filesystem::file_time_type::clock::now() - ago);
}

}  // namespace

TEST_CASE("CompileCache: a size budget evicts the least recently used entries", "[cache]") {
  TempDir dir;
  auto artifact = dir.write("built.so", std::string(4000, 'x'));
  const std::string a(32, 'a'), b(32, 'b'), c(32, 'c');

  SECTION("a hit counts as a use; eviction stops at 90% of the budget") {
    CompileCache cache(dir.path() / "cache", CacheBudget{10000, std::chrono::seconds(0)});
    cache.store(a, outcome_for(a), artifact);
    cache.store(b, outcome_for(b), artifact);
    CHECK(cache.bytes() > 8000);
    CHECK(cache.bytes() < 10000);
    set_last_use(cache, a, std::chrono::seconds(300));  // a is the older of the two …
    set_last_use(cache, b, std::chrono::seconds(200));
    REQUIRE(cache.lookup(a));                            // … until it is used again
    cache.store(c, outcome_for(c), artifact);            // over the budget: b goes
    CHECK(cache.evicted_entries() == 1);
    CHECK(cache.lookup(a));
    CHECK_FALSE(cache.lookup(b));
    CHECK(cache.lookup(c));
    CHECK_FALSE(std::filesystem::exists(cache.entry_dir(b)));
    CHECK(cache.bytes() <= 9000);
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path() / "cache"))
      CHECK(e.path().filename().string().rfind(".tmp-", 0) != 0);
  }
  SECTION("entries used within keep_recent are never evicted") {
    CompileCache cache(dir.path() / "cache", CacheBudget{10000, std::chrono::seconds(3600)});
    for (const auto& k : {a, b, c}) cache.store(k, outcome_for(k), artifact);
    CHECK(cache.evicted_entries() == 0);
    CHECK(cache.bytes() > 10000);
    for (const auto& k : {a, b, c}) CHECK(cache.lookup(k));
  }
  SECTION("a cache over its budget at start is trimmed; a killed writer's temporaries go") {
    {
      CompileCache unbounded(dir.path() / "cache", CacheBudget{0, std::chrono::seconds(0)});
      for (const auto& k : {a, b, c}) unbounded.store(k, outcome_for(k), artifact);
      set_last_use(unbounded, a, std::chrono::seconds(100));
      set_last_use(unbounded, b, std::chrono::seconds(300));
      set_last_use(unbounded, c, std::chrono::seconds(200));
      CHECK(unbounded.bytes() > 12000);
      CHECK(unbounded.evict() == 0);  // no budget: nothing to evict
    }
    auto stale = dir.path() / "cache" / "aa" / (".tmp-" + a + "-1-0");
    auto fresh = dir.path() / "cache" / "aa" / (".tmp-" + a + "-2-0");
    std::filesystem::create_directories(stale);
    std::filesystem::create_directories(fresh);
    std::filesystem::last_write_time(stale, std::filesystem::file_time_type::clock::now() - std::chrono::hours(2));
    CompileCache cache(dir.path() / "cache", CacheBudget{10000, std::chrono::seconds(0)});
    CHECK(cache.evicted_entries() == 1);
    CHECK_FALSE(cache.lookup(b));
    CHECK(cache.lookup(a));
    CHECK(cache.lookup(c));
    CHECK_FALSE(std::filesystem::exists(stale));
    CHECK(std::filesystem::exists(fresh));  // a writer may still be filling it
  }
}

TEST_CASE("remove_orphan_jobs: a dead server's job dirs go, a live one's stay", "[scratch]") {
  TempDir dir;
  const pid_t dead = fork();
  REQUIRE(dead >= 0);
  if (dead == 0) _exit(0);
  REQUIRE(waitpid(dead, nullptr, 0) == dead);
  const std::string d = std::to_string(dead), me = std::to_string(getpid());
  dir.write("job-" + d + "-0-0123456789ab/kernel.cu", "x");
  dir.write("job-" + d + "-0-0123456789ab/out/kernel.so", "x");
  dir.write("job-" + d + "-0-0123456789ab.kernel.so", "x");
  dir.write("job-" + me + "-1-0123456789ab/kernel.cu", "x");
  dir.write("job-1-2-0123456789ab/kernel.cu", "x");  // pid 1 lives
  dir.write("notes/keep.txt", "x");
  CHECK(remove_orphan_jobs(dir.path()) == 2);
  CHECK_FALSE(std::filesystem::exists(dir.path() / ("job-" + d + "-0-0123456789ab")));
  CHECK_FALSE(std::filesystem::exists(dir.path() / ("job-" + d + "-0-0123456789ab.kernel.so")));
  CHECK(std::filesystem::exists(dir.path() / ("job-" + me + "-1-0123456789ab")));
  CHECK(std::filesystem::exists(dir.path() / "job-1-2-0123456789ab"));
  CHECK(std::filesystem::exists(dir.path() / "notes/keep.txt"));
}

TEST_CASE("MemoryBudget: reservations wait while the budget is spent", "[limits]") {
  MemoryBudget budget(10);
  CHECK(budget.acquire(4) == 4);
  CHECK(budget.try_acquire(4));
  CHECK_FALSE(budget.try_acquire(4));  // 8 of 10 in use
  CHECK(budget.in_use() == 8);
  // A blocked reservation cannot complete before a release (deterministic: no timing involved).
  auto waiting = std::async(std::launch::async, [&] { return budget.acquire(4); });
  CHECK(waiting.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
  budget.release(4);
  CHECK(waiting.get() == 4);
  CHECK(budget.in_use() == 8);
  // Larger than the whole budget: clamped, so it runs alone instead of never.
  budget.release(8);
  CHECK(budget.acquire(100) == 10);
  CHECK_FALSE(budget.try_acquire(1));
  budget.release(10);
  CHECK(budget.in_use() == 0);
}

TEST_CASE("choose_compile_limits: the budget fallback says why, and sizes itself", "[limits]") {
  CompilerConfig config;
  config.jail_memory_bytes = 2ull << 30;
  config.memory_budget_bytes = 5ull << 30;
  SECTION("off by configuration") {
    config.cgroup = "off";
    auto l = choose_compile_limits(config);
    CHECK_FALSE(l.cgroup);
    CHECK(l.fallback_reason == "cgroups off by configuration");
    CHECK(l.budget_bytes == (5ull << 30));
    CHECK(contains(l.describe(), "at most 2 at once"));
  }
  SECTION("a directory that is not a cgroup with memory and pids") {
    TempDir dir;
    config.cgroup = dir.path().string();
    auto l = choose_compile_limits(config);
    CHECK_FALSE(l.cgroup);
    CHECK(contains(l.fallback_reason, "offers no memory and pids controllers"));
    CHECK(std::filesystem::is_empty(dir.path()));  // nothing created there
  }
  SECTION("the default budget is half the physical memory, at least one jail") {
    config.cgroup = "off";
    config.memory_budget_bytes = 0;
    auto l = choose_compile_limits(config);
    const auto physical = static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
    CHECK(l.budget_bytes == std::max(config.jail_memory_bytes, physical / 2));
  }
  SECTION("auto: whichever mode this host allows, consistently") {
    auto l = choose_compile_limits(config);
    WARN(l.describe());  // the mode this machine ran with
    if (l.cgroup) {
      CHECK(std::filesystem::is_directory(l.cgroup_dir));
      CHECK(l.fallback_reason.empty());
      std::ifstream max(l.cgroup_dir / "memory.max");
      std::uint64_t value = 0;
      max >> value;
      CHECK(value == (5ull << 30));
      rmdir(l.cgroup_dir.c_str());
    } else {
      CHECK_FALSE(l.fallback_reason.empty());
    }
  }
}

TEST_CASE("plan_file_view: allowlist, masks, bad mounts", "[view]") {
  TempDir dir;
  dir.write("secret/x", "1");
  d2k::sandbox::JailSpec spec;
  spec.mounts = {{dir.path(), "/data", false}};
  spec.hidden_paths = {dir.path() / "secret", "/usr/share", "/not/there"};
  auto ops = detail::plan_file_view(spec, "/R");
  using Op = detail::ViewOp;
  auto has = [&](Op::Kind kind, const std::string& target) {
    for (const auto& op : ops)
      if (op.kind == kind && op.target == target) return true;
    return false;
  };
  CHECK(ops.front().kind == Op::tmpfs);
  CHECK(ops.front().target == "/R");
  CHECK(has(Op::bind_ro, "/R/usr"));
  CHECK_FALSE(has(Op::bind_ro, "/R/etc"));  // /etc is an allowlist of files, not the host's dir
  CHECK_FALSE(has(Op::bind_ro, "/R/etc/passwd"));
  if (std::filesystem::exists("/etc/ld.so.cache")) CHECK(has(Op::bind_ro, "/R/etc/ld.so.cache"));
  CHECK_FALSE(has(Op::bind_dev, "/R/dev/urandom"));
  CHECK_FALSE(has(Op::bind_dev, "/R/dev/random"));
  CHECK(has(Op::bind_ro, "/R/data"));
  CHECK(has(Op::mask_dir, "/R/data/secret"));
  CHECK(has(Op::mask_dir, "/R/usr/share"));
  CHECK(has(Op::bind_dev, "/R/dev/null"));
  CHECK_FALSE(has(Op::bind_dev, "/R/dev/zero"));
  CHECK(has(Op::proc, "/R/proc"));
  // Masks come after every bind (a later bind would uncover them).
  std::size_t last_bind = 0, first_mask = ops.size();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == Op::bind_ro || ops[i].kind == Op::bind_rw) last_bind = i;
    if ((ops[i].kind == Op::mask_dir || ops[i].kind == Op::mask_file) && first_mask == ops.size()) first_mask = i;
  }
  CHECK(last_bind < first_mask);

  spec.mounts = {{dir.path(), "data", false}};
  CHECK_THROWS(detail::plan_file_view(spec, "/R"));
  spec.mounts = {{dir.path(), "/a/../etc", false}};
  CHECK_THROWS(detail::plan_file_view(spec, "/R"));
  spec.mounts = {{"/no/such/source", "/x", false}};
  CHECK_THROWS(detail::plan_file_view(spec, "/R"));
  spec.mounts = {};
  spec.devices = {"../sda"};
  CHECK_THROWS(detail::plan_file_view(spec, "/R"));
}
