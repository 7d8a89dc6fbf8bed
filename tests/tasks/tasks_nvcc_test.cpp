// Compiles every kernel file of every task with the real nvcc into a shared object, checks that it
// exports the entry with C linkage, and checks the tasks' SASS properties mechanically: each holds
// from its layer on and fails one layer below.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <regex>
#include <sstream>

#include "catch.hpp"
#include "tasks/loader/task.hpp"

namespace fs = std::filesystem;
using namespace d2k::tasks;

namespace {

struct Run {
  int status = -1;
  std::string output;
};

Run run(const std::string& command) {
  Run r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  r.status = ::pclose(p);
  return r;
}

// The opcode (with modifiers) of every instruction line of `cuobjdump -sass`, e.g. "LDG.E.EF.128".
std::vector<std::string> sass_opcodes(const std::string& sass) {
  static const std::regex kLine(R"(^\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_.]*))");
  std::vector<std::string> ops;
  std::istringstream in(sass);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, kLine)) ops.push_back(m[2].str());
  }
  return ops;
}

std::string find_cuobjdump() {
  if (std::string(D2K_CUOBJDUMP).size() > 0 && fs::exists(D2K_CUOBJDUMP)) return D2K_CUOBJDUMP;
  const Run which = run("command -v cuobjdump");
  if (which.status == 0 && !which.output.empty()) return which.output.substr(0, which.output.find('\n'));
  const fs::path bundled = fs::path(D2K_CUDA_BIN) / "cuobjdump";
  return fs::exists(bundled) ? bundled.string() : "";
}

// The flags the sandbox uses for a task: the base flags, with the task's own -arch replacing sm_90.
std::string task_flags(const Task& task) {
  std::string arch = "-arch=sm_90";
  std::string extra;
  for (const std::string& f : task.compile_flags) {
    if (f.rfind("-arch=", 0) == 0) arch = f;
    else extra += " " + f;
  }
  return "-O3 " + arch + " -shared -Xcompiler -fPIC -lineinfo" + extra;
}

long count_matches(const std::vector<std::string>& ops, const Property& p) {
  const std::regex re(p.check["pattern"].get<std::string>());
  long count = 0;
  for (const std::string& op : ops) count += std::regex_search(op, re) ? 1 : 0;
  return count;
}

bool sass_holds(const std::vector<std::string>& ops, const Property& p) {
  const long count = count_matches(ops, p);
  if (p.check.value("expect", std::string("present")) == "absent") return count == 0;
  return count >= p.check.value("min_count", 1L);
}

}  // namespace

// Every kernel file of every task compiles with the real nvcc (the task's flags) and exports the
// entry with C linkage; every SASS design property holds from its layer on and fails on the kernel
// one layer below (what d2k verify-tasks demands on the GPU, checked here without one).
TEST_CASE("every task's kernels compile with nvcc, export the entry and show their SASS properties",
          "[tasks][nvcc][slow]") {
  const TaskSet set = load_tasks(D2K_TASKS_DIR);
  for (const TaskError& e : set.errors) UNSCOPED_INFO(e.what());
  REQUIRE(set.errors.empty());
  REQUIRE(set.tasks.size() >= 2);
  const std::string cuobjdump = find_cuobjdump();
  if (cuobjdump.empty()) WARN("cuobjdump not found: SASS properties not checked");

  for (const Task& task : set.tasks) {
    DYNAMIC_SECTION(task.id) {
      const fs::path out = fs::temp_directory_path() / ("d2k-tasks-nvcc-" + std::to_string(::getpid()) + "-" + task.id);
      fs::create_directories(out);
      const std::vector<std::pair<std::string, fs::path>> files = {
          {"reference", task.reference_path()}, {"starter", task.dir / "starter.cu"},
          {"baseline", task.baseline_path()},   {"L1", task.expert_path(1)},
          {"L2", task.expert_path(2)},          {"L3", task.expert_path(3)}};
      std::map<std::string, std::vector<std::string>> sass;  // kernel label -> opcodes
      for (const auto& [name, src] : files) {
        INFO(task.id << " " << name);
        const fs::path so = out / (name + ".so");
        const Run compile = run(std::string(D2K_NVCC) + " " + task_flags(task) + " -o " + so.string() + " " + src.string());
        INFO(compile.output);
        REQUIRE(compile.status == 0);
        void* handle = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
        INFO((handle == nullptr ? ::dlerror() : "loaded"));
        REQUIRE(handle != nullptr);
        CHECK(::dlsym(handle, task.entry.c_str()) != nullptr);
        ::dlclose(handle);
        if (!cuobjdump.empty() && name != "starter" && name != "reference") {
          const Run dump = run(cuobjdump + " -sass " + so.string());
          REQUIRE(dump.status == 0);
          sass[name] = sass_opcodes(dump.output);
          REQUIRE(sass[name].size() > 5);  // the parser found instructions
        }
      }
      if (!cuobjdump.empty()) {
        const char* labels[] = {"baseline", "L1", "L2", "L3"};
        for (const Property& p : task.properties) {
          if (p.check["kind"] != "sass") continue;
          for (int k = p.layer - 1; k <= 3; ++k) {
            const bool holds = sass_holds(sass[labels[k]], p);
            INFO(task.id << ": " << p.id << " (L" << p.layer << ") on " << labels[k] << " matched "
                         << count_matches(sass[labels[k]], p) << " instructions");
            CHECK(holds == (k >= p.layer));
          }
        }
      }
      std::error_code ec;
      fs::remove_all(out, ec);
    }
  }
}
