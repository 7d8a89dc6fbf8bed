#include "env/log.hpp"

#include <array>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace d2k::env {

namespace {

struct LevelName {
  std::string_view name;
  LogLevel level;
  spdlog::level::level_enum spd;
};
constexpr std::array<LevelName, 6> kLevels{{
    {"trace", LogLevel::trace, spdlog::level::trace},
    {"debug", LogLevel::debug, spdlog::level::debug},
    {"info", LogLevel::info, spdlog::level::info},
    {"warn", LogLevel::warn, spdlog::level::warn},
    {"error", LogLevel::error, spdlog::level::err},
    {"off", LogLevel::off, spdlog::level::off},
}};

spdlog::level::level_enum to_spdlog(LogLevel level) {
  for (const auto& l : kLevels)
    if (l.level == level) return l.spd;
  return spdlog::level::info;
}

spdlog::logger& logger() {
  // Not the colour sink: the log is usually a file (scripts redirect stderr), and the lines must
  // read the same there. Not registered globally, so no other library's logger is touched.
  static const std::shared_ptr<spdlog::logger> instance = [] {
    auto l = std::make_shared<spdlog::logger>("d2k serve", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %n %l: %v", spdlog::pattern_time_type::utc);
    l->set_level(spdlog::level::info);
    l->flush_on(spdlog::level::trace);  // every line at once: a crash must not eat the last words
    return l;
  }();
  return *instance;
}

}  // namespace

void log_message(LogLevel level, std::string_view message) {
  if (level == LogLevel::off) return;
  logger().log(to_spdlog(level), "{}", message);
}

void set_log_level(std::string_view level) {
  for (const auto& l : kLevels)
    if (l.name == level) {
      logger().set_level(l.spd);
      return;
    }
  throw std::invalid_argument("log level '" + std::string(level) + "': use trace, debug, info, warn, error or off");
}

LogLevel log_level() {
  const auto current = logger().level();
  for (const auto& l : kLevels)
    if (l.spd == current) return l.level;
  return LogLevel::info;
}

}  // namespace d2k::env
