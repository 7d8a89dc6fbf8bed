// The server's log: levels by name, and the line format (UTC time stamp, logger name, level).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "env/log.hpp"

namespace {

// What `f` writes to stderr (fd 2).
template <typename F>
std::string captured_stderr(F f) {
  std::fflush(stderr);
  char path[] = "/tmp/d2k-log-test-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  f();
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

TEST_CASE("set_log_level takes the six level names and nothing else") {
  using d2k::env::LogLevel;
  const std::pair<const char*, LogLevel> levels[] = {{"trace", LogLevel::trace}, {"debug", LogLevel::debug},
                                                     {"info", LogLevel::info},   {"warn", LogLevel::warn},
                                                     {"error", LogLevel::error}, {"off", LogLevel::off}};
  for (const auto& [name, level] : levels) {
    d2k::env::set_log_level(name);
    CHECK(d2k::env::log_level() == level);
  }
  for (const char* bad : {"verbose", "WARN", "", "warning", "err"}) {
    INFO(bad);
    CHECK_THROWS_AS(d2k::env::set_log_level(bad), std::invalid_argument);
  }
  CHECK(d2k::env::log_level() == LogLevel::off);  // a refused name changes nothing
  d2k::env::set_log_level("info");
}

TEST_CASE("a log line has a UTC time stamp, the logger's name and the level; lower levels are dropped") {
  d2k::env::set_log_level("warn");
  const std::string out = captured_stderr([] {
    d2k::env::log_info("not shown");
    d2k::env::log_warn("reply dropped: Host unreachable");
    d2k::env::log_error("internal error: {braces} stay as they are");
  });
  d2k::env::set_log_level("info");
  INFO(out);
  const std::regex line(R"((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) d2k serve (\w+): (.*))");
  std::istringstream in(out);
  std::vector<std::string> levels, messages;
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    REQUIRE(std::regex_match(l, m, line));
    levels.push_back(m[2]);
    messages.push_back(m[3]);
  }
  CHECK(levels == std::vector<std::string>{"warning", "error"});
  CHECK(messages == std::vector<std::string>{"reply dropped: Host unreachable", "internal error: {braces} stay as they are"});
}
