// Issue 23, class 9: a workspace path may not be both a file and a directory ("kernel.cu" and
// "kernel.cu/x.cu"). Such a workspace used to reach the compiler, whose job-dir error carried the
// server's state path and pid to the client as an internal error.
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "catch.hpp"
#include "env/workspace.hpp"
#include "sandbox/compiler.hpp"

using d2k::env::Workspace;
using d2k::protocol::Error;
using d2k::protocol::ErrorCode;

namespace {
ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code;
  }
  FAIL("no error");
  return ErrorCode::internal;
}
}  // namespace

TEST_CASE("a workspace path cannot be both a file and a directory", "[workspace][threat]") {
  Workspace ws(Workspace::Limits{});
  ws.write("kernel.cu", "int x;\n");
  CHECK(code_of([&] { ws.write("kernel.cu/x.cu", "int y;\n"); }) == ErrorCode::path_violation);
  CHECK(ws.files().size() == 1);
  // The other order, and deeper.
  Workspace ws2(Workspace::Limits{});
  ws2.write("a.cuh/b/c.cu", "int y;\n");
  CHECK(code_of([&] { ws2.write("a.cuh", "int x;\n"); }) == ErrorCode::path_violation);
  CHECK(code_of([&] { ws2.write("a.cuh/b", "int x;\n"); }) == ErrorCode::path_violation);  // no suffix
  // Through a patch that creates the file below an existing one.
  const std::string diff =
      "--- /dev/null\n+++ b/kernel.cu/x.cu\n@@ -0,0 +1 @@\n+int y;\n";
  const ErrorCode patched = code_of([&] { ws.patch(diff); });
  CHECK((patched == ErrorCode::path_violation || patched == ErrorCode::invalid_action));
  CHECK(ws.files().size() == 1);
  // Siblings with a common prefix are fine.
  ws.write("kernel.cuh", "int z;\n");
  ws.write("kernel/x.cu", "int w;\n");
  CHECK(ws.files().size() == 3);
}

TEST_CASE("the compiler's error for such a layout names no host path", "[workspace][threat][compiler]") {
  if (!std::filesystem::exists("/usr/local/cuda/bin/nvcc")) {
    WARN("no nvcc: skipped");
    return;
  }
  char tmpl[] = "/tmp/d2k-ws-tree-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::filesystem::path dir = tmpl;
  std::string message;
  {
    d2k::sandbox::CompilerConfig config;
    config.cache_dir = dir / "cache";
    config.scratch_dir = dir / "scratch";
    d2k::sandbox::Compiler compiler(config);
    d2k::sandbox::CompileRequest r;
    r.files = {{"kernel.cu", "int x;\n"}, {"kernel.cu/x.cu", "int y;\n"}};
    r.main_file = "kernel.cu";
    try {
      compiler.compile(r);
    } catch (const std::exception& e) {
      message = e.what();
    }
  }
  std::filesystem::remove_all(dir);
  INFO(message);
  CHECK_FALSE(message.empty());
  CHECK(message.find(tmpl) == std::string::npos);
  CHECK(message.find("job-") == std::string::npos);
  CHECK(message.find("kernel.cu/x.cu") != std::string::npos);
}
