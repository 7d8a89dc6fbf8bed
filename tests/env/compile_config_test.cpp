// The compile budgets as server config keys (issue 22.4/22.10, tenants): `compile_jail_memory_bytes`,
// `compile_jail_pids`, `compile_memory_bytes`, `compile_cache_bytes`, `compile_cgroup` reach the
// server's compiler (its start-up line says what it enforces) and bad values are refused by key.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "catch.hpp"
#include "server_fixture.hpp"

using d2k::env::Config;

namespace {

// What the code in `body` writes to stderr (fd 2).
template <typename F>
std::string stderr_of(F&& body) {
  std::fflush(stderr);
  char path[] = "/tmp/d2k-stderr-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  int saved = ::dup(2);
  ::dup2(fd, 2);
  try {
    body();
  } catch (...) {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    ::close(fd);
    ::unlink(path);
    throw;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  ::unlink(path);
  return ss.str();
}

}  // namespace

TEST_CASE("compile budgets set in the config reach the server's compiler", "[config][tenants]") {
  Config c = d2k::test::test_config();
  c.compile_cgroup = "off";  // budget mode everywhere, so the line below is the same on every host
  c.compile_jail_memory_bytes = 1ull << 30;
  c.compile_memory_bytes = 3ull << 30;
  c.compile_jail_pids = 17;
  c.compile_cache_bytes = 1ull << 20;
  std::string err = stderr_of([&] { d2k::test::TestServer server(c); });
  INFO(err);
  CHECK(err.find("each compile reserves 1.0 GiB of a 3.0 GiB budget (at most 3 at once)") != std::string::npos);
  CHECK(err.find("RLIMIT_NPROC 17") != std::string::npos);
  // The defaults: 4 GiB per jail, 64 processes.
  Config d = d2k::test::test_config();
  d.compile_cgroup = "off";
  std::string err2 = stderr_of([&] { d2k::test::TestServer server(d); });
  INFO(err2);
  CHECK(err2.find("each compile reserves 4.0 GiB of a") != std::string::npos);
  CHECK(err2.find("RLIMIT_NPROC 64") != std::string::npos);
}

TEST_CASE("compile budgets: values a compile cannot run under are refused, naming the key", "[config][tenants]") {
  CHECK_THROWS_WITH(Config::from_json({{"compile_jail_pids", std::uint64_t{2}}}), Catch::Contains("'compile_jail_pids'"));
  CHECK_THROWS_WITH(Config::from_json({{"compile_jail_memory_bytes", std::uint64_t{1000}}}),
                    Catch::Contains("'compile_jail_memory_bytes'"));
  Config ok = Config::from_json({{"compile_cache_bytes", std::uint64_t{0}}, {"compile_memory_bytes", std::uint64_t{0}}, {"compile_cgroup", "off"}});
  CHECK(ok.compile_cache_bytes == 0);
  CHECK(ok.compile_cgroup == "off");
}
