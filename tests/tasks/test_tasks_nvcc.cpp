// Compiles every kernel file of vector_add with the real nvcc into a shared object, checks that
// it exports the entry with C linkage, and checks the task's SASS properties mechanically on the
// L3 expert (must hold) and on the baseline (must not).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
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
  const Run which = run("command -v cuobjdump");
  if (which.status == 0 && !which.output.empty()) return which.output.substr(0, which.output.find('\n'));
  const fs::path bundled = fs::path(D2K_CUDA_BIN) / "cuobjdump";
  return fs::exists(bundled) ? bundled.string() : "";
}

}  // namespace

TEST_CASE("every vector_add kernel compiles with nvcc and exports the entry", "[tasks][nvcc][slow]") {
  const Task task = load_task(fs::path(D2K_TASKS_DIR) / "vector_add");
  const fs::path out = fs::temp_directory_path() / ("d2k-tasks-nvcc-" + std::to_string(::getpid()));
  fs::create_directories(out);
  const std::string cuobjdump = find_cuobjdump();
  if (cuobjdump.empty()) WARN("cuobjdump not found: SASS properties not checked");

  const std::vector<std::pair<std::string, fs::path>> files = {
      {"reference", task.reference_path()}, {"baseline", task.baseline_path()},
      {"starter", task.dir / "starter.cu"}, {"L1", task.expert_path(1)},
      {"L2", task.expert_path(2)},          {"L3", task.expert_path(3)}};
  for (const auto& [name, src] : files) {
    DYNAMIC_SECTION(name) {
      const fs::path so = out / (name + ".so");
      const Run compile = run(std::string(D2K_NVCC) + " -O3 -arch=sm_90 -shared -Xcompiler -fPIC -o " +
                              so.string() + " " + src.string());
      INFO(compile.output);
      REQUIRE(compile.status == 0);

      void* handle = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
      INFO((handle == nullptr ? ::dlerror() : "loaded"));
      REQUIRE(handle != nullptr);
      CHECK(::dlsym(handle, task.entry.c_str()) != nullptr);
      ::dlclose(handle);

      if (!cuobjdump.empty() && name != "starter") {
        const Run dump = run(cuobjdump + " -sass " + so.string());
        REQUIRE(dump.status == 0);
        const std::vector<std::string> ops = sass_opcodes(dump.output);
        REQUIRE(ops.size() > 5);  // the parser found instructions
        for (const Property& p : task.properties) {
          if (p.check["kind"] != "sass") continue;
          const std::regex re(p.check["pattern"].get<std::string>());
          long count = 0;
          for (const std::string& op : ops) count += std::regex_search(op, re) ? 1 : 0;
          const long min_count = p.check.value("min_count", 1L);
          INFO(p.id << " matched " << count << " instructions");
          if (name == "L3") CHECK(count >= min_count);  // the L3 design property holds
          if (name == "baseline" || name == "L1" || name == "L2") CHECK(count == 0);
        }
      }
    }
  }
  std::error_code ec;
  fs::remove_all(out, ec);
}
