#pragma once
// Line helpers shared by the tools' parsers of cuobjdump, ncu and compute-sanitizer output.
#include <cctype>
#include <string_view>

namespace d2k::tools::text {

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Calls f(line) for every line of text, without its "\n" (or "\r\n").
template <typename F>
void for_each_line(std::string_view text, F&& f) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    f(line);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

}  // namespace d2k::tools::text
