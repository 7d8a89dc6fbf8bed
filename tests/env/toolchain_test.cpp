// hello.toolchain: the versions read from the real banners, in the right fields.
#include <cstdio>
#include <regex>

#include "catch.hpp"
#include "server_fixture.hpp"

namespace {

// `nvcc --version` of CUDA 13.0 (this machine's), then `g++ --version`'s first line, as
// Compiler::toolchain_version() joins them.
constexpr const char* kBanner =
    "nvcc: NVIDIA (R) Cuda compiler driver\n"
    "Copyright (c) 2005-2025 NVIDIA Corporation\n"
    "Built on Wed_Aug_20_01:58:59_PM_PDT_2025\n"
    "Cuda compilation tools, release 13.0, V13.0.88\n"
    "Build cuda_13.0.r13.0/compiler.36424714_0\n"
    "g++ (Debian 12.2.0-14+deb12u1) 12.2.0";

}  // namespace

TEST_CASE("the toolchain banner's versions land in their fields") {
  const auto t = d2k::env::toolchain_json(kBanner);
  CHECK(t["nvcc"] == "13.0.88");
  CHECK(t["host_compiler"] == "g++ 12.2.0");

  const auto clang = d2k::env::toolchain_json(
      "Cuda compilation tools, release 12.4, V12.4.131\nDebian clang version 14.0.6\n");
  CHECK(clang["nvcc"] == "12.4.131");
  CHECK(clang["host_compiler"] == "clang 14.0.6");

  const auto no_v = d2k::env::toolchain_json("Cuda compilation tools, release 11.8\nc++ 12.2.0");
  CHECK(no_v["nvcc"] == "11.8");
  CHECK(no_v["host_compiler"] == "c++ 12.2.0");

  const auto no_host = d2k::env::toolchain_json("nvcc: x\nCuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0\n");
  CHECK(no_host["nvcc"] == "13.0.88");
  CHECK(no_host["host_compiler"] == "");
}

TEST_CASE("hello.toolchain of a real server holds version numbers, not banner lines", "[server]") {
  d2k::test::TestServer srv;
  d2k::Client c(srv.endpoint);
  const auto t = c.hello()["toolchain"];
  INFO(t.dump());
  const std::regex version(R"(\d+\.\d+(\.\d+)?)");
  CHECK(std::regex_match(t["nvcc"].get<std::string>(), version));
  CHECK(std::regex_match(t["host_compiler"].get<std::string>(), std::regex(R"(\S+ \d+(\.\d+)*)")));
  // The same as this machine's nvcc says.
  const auto nvcc = d2k::test::run_command("/usr/local/cuda/bin/nvcc --version");
  if (nvcc.status == 0) CHECK(nvcc.out.find("V" + t["nvcc"].get<std::string>()) != std::string::npos);
}
