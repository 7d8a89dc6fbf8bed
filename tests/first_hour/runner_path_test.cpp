// Where the server finds d2k-runner (sandbox/eval/runner_path.hpp): beside its own binary (a build
// tree), in <prefix>/libexec/d2k (an install, the Python package), the runner it was built with,
// or exactly the one named by EvalConfig.runner_path / $D2K_RUNNER.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "../env/server_fixture.hpp"
#include "catch.hpp"
#include "sandbox/eval/runner_path.hpp"

namespace {

namespace fs = std::filesystem;
using d2k::runner::find_runner;

fs::path make_file(const fs::path& p, bool executable = true) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "#!/bin/sh\n";
  ::chmod(p.c_str(), executable ? 0755 : 0644);
  return p;
}

// $D2K_RUNNER set for one scope, restored after.
struct EnvRunner {
  std::string saved;
  bool had = false;
  explicit EnvRunner(const char* value) {
    if (const char* v = std::getenv("D2K_RUNNER")) had = true, saved = v;
    if (value) ::setenv("D2K_RUNNER", value, 1); else ::unsetenv("D2K_RUNNER");
  }
  ~EnvRunner() {
    if (had) ::setenv("D2K_RUNNER", saved.c_str(), 1); else ::unsetenv("D2K_RUNNER");
  }
};

}  // namespace

TEST_CASE("runner path: a build tree's runner beside the server binary", "[first_hour][runner_path]") {
  EnvRunner env(nullptr);
  const fs::path root = d2k::test::temp_dir("d2k-runner-path");
  const fs::path exe = make_file(root / "build" / "bin" / "d2k");
  const fs::path runner = make_file(root / "build" / "bin" / "d2k-runner");
  const fs::path built = make_file(root / "elsewhere" / "d2k-runner");
  CHECK(find_runner("", exe, built).found == runner);
  fs::remove_all(root);
}

TEST_CASE("runner path: an install's runner in <prefix>/libexec/d2k (the Python package's layout)",
          "[first_hour][runner_path]") {
  EnvRunner env(nullptr);
  const fs::path root = d2k::test::temp_dir("d2k-runner-path");
  const fs::path exe = make_file(root / "site-packages" / "d2k" / "bin" / "d2k");
  const fs::path runner = make_file(root / "site-packages" / "d2k" / "libexec" / "d2k" / "d2k-runner");
  // The build folder it was compiled in is gone (pip builds in a temporary folder).
  const auto search = find_runner("", exe, root / "gone" / "build" / "bin" / "d2k-runner");
  CHECK(search.found == runner);
  fs::remove_all(root);
}

TEST_CASE("runner path: the runner built with the library when nothing is beside the binary",
          "[first_hour][runner_path]") {
  EnvRunner env(nullptr);
  const fs::path root = d2k::test::temp_dir("d2k-runner-path");
  const fs::path exe = make_file(root / "tests" / "some_test");
  make_file(root / "tests" / "d2k-runner", /*executable=*/false);  // not executable: skipped
  const fs::path built = make_file(root / "build" / "bin" / "d2k-runner");
  CHECK(find_runner("", exe, built).found == built);

  fs::remove(built);
  const auto none = find_runner("", exe, built);
  CHECK(none.found.empty());
  REQUIRE(none.looked_at.size() == 3);
  CHECK(none.looked_at[0] == root / "tests" / "d2k-runner");
  CHECK(none.looked_at[1] == root / "libexec" / "d2k" / "d2k-runner");
  CHECK(none.looked_at[2] == built);
  CHECK(none.error().find((root / "libexec" / "d2k" / "d2k-runner").string()) != std::string::npos);
  fs::remove_all(root);
}

TEST_CASE("runner path: an explicit runner (EvalConfig.runner_path, then $D2K_RUNNER) or nothing",
          "[first_hour][runner_path]") {
  const fs::path root = d2k::test::temp_dir("d2k-runner-path");
  const fs::path exe = make_file(root / "bin" / "d2k");
  const fs::path beside = make_file(root / "bin" / "d2k-runner");
  const fs::path mine = make_file(root / "mine" / "d2k-runner");
  const fs::path from_env = make_file(root / "env" / "d2k-runner");
  {
    EnvRunner env(nullptr);
    CHECK(find_runner(mine, exe, beside).found == mine);
    // A named runner that is missing is an error, not a silent fallback to the one beside the binary.
    const auto missing = find_runner(root / "missing", exe, beside);
    CHECK(missing.found.empty());
    CHECK(missing.looked_at == std::vector<fs::path>{root / "missing"});
  }
  {
    EnvRunner env(from_env.c_str());
    CHECK(find_runner("", exe, beside).found == from_env);
    CHECK(find_runner(mine, exe, beside).found == mine);  // the config beats the environment
  }
  {
    EnvRunner env("");  // set but empty: as if unset
    CHECK(find_runner("", exe, beside).found == beside);
  }
  fs::remove_all(root);
}

TEST_CASE("runner path: this build's runner, found from a binary in build/bin", "[first_hour][runner_path]") {
  EnvRunner env(nullptr);
  const fs::path found = d2k::runner::locate_runner("");
  CHECK(fs::equivalent(found, fs::path(D2K_BINARY_DIR) / "bin" / "d2k-runner"));
}
