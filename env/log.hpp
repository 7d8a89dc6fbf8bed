// The server's log: one named spdlog logger ("d2k serve") writing time-stamped, levelled lines to
// stderr, e.g. `2026-12-01T15:25:32.120Z d2k serve warning: reply dropped: …` (UTC). spdlog stays
// inside log.cpp (the d2k_log library): callers pass finished messages.
#pragma once

#include <string_view>

namespace d2k::env {

enum class LogLevel { trace, debug, info, warn, error, off };

// Writes one line when `level` is at or above the current level (info at start).
void log_message(LogLevel level, std::string_view message);
inline void log_debug(std::string_view message) { log_message(LogLevel::debug, message); }
inline void log_info(std::string_view message) { log_message(LogLevel::info, message); }
inline void log_warn(std::string_view message) { log_message(LogLevel::warn, message); }
inline void log_error(std::string_view message) { log_message(LogLevel::error, message); }

// Accepts trace, debug, info, warn, error or off (`d2k serve --log-level`); throws
// std::invalid_argument naming the accepted levels otherwise, and leaves the level as it was.
void set_log_level(std::string_view level);
LogLevel log_level();

}  // namespace d2k::env
