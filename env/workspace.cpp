#include "env/workspace.hpp"

#include <string_view>
#include <utility>
#include <vector>

#include "env/patch.hpp"

namespace d2k::env {

using protocol::Error;
using protocol::ErrorCode;

namespace {

bool allowed_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-' || c == '/';
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

void Workspace::check_path(const std::string& path) const {
  auto fail = [&](const std::string& why) {
    throw Error(ErrorCode::path_violation, "path '" + path.substr(0, 160) + "': " + why, "action.path");
  };
  if (path.empty()) fail("empty");
  if (path.size() > limits_.max_path_bytes)
    fail("longer than " + std::to_string(limits_.max_path_bytes) + " bytes");
  if (path.front() == '/') fail("absolute paths are not allowed; use a path relative to the workspace");
  for (char c : path)
    if (!allowed_char(c)) fail("only letters, digits, '.', '_', '-' and '/' are allowed");
  std::size_t depth = 0;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string_view part(path.data() + start, end - start);
    if (part.empty()) fail("empty path component");
    if (part == "." || part == "..") fail("'.' and '..' components are not allowed");
    if (part.front() == '.') fail("hidden names (starting with '.') are not allowed");
    ++depth;
    start = end + 1;
  }
  if (depth > limits_.max_depth) fail("deeper than " + std::to_string(limits_.max_depth) + " levels");
  if (!ends_with(path, ".cu") && !ends_with(path, ".cuh") && !ends_with(path, ".h") &&
      !ends_with(path, ".hpp"))
    fail("only .cu, .cuh, .h and .hpp files belong in a workspace");
}

void Workspace::check_sizes(const std::map<std::string, std::string>& files) const {
  if (files.size() > limits_.max_files)
    throw Error(ErrorCode::too_large,
                "a workspace holds at most " + std::to_string(limits_.max_files) + " files", "action");
  std::size_t total = 0;
  for (const auto& [path, content] : files) {
    if (content.size() > limits_.max_file_bytes)
      throw Error(ErrorCode::too_large,
                  "file '" + path + "' is " + std::to_string(content.size()) + " bytes; the limit is " +
                      std::to_string(limits_.max_file_bytes),
                  "action");
    total += content.size();
  }
  if (total > limits_.max_total_bytes)
    throw Error(ErrorCode::too_large,
                "the workspace would hold " + std::to_string(total) + " bytes; the limit is " +
                    std::to_string(limits_.max_total_bytes),
                "action");
}

// A path may not be both a file and a directory ("kernel.cu" and "kernel.cu/x.cu"): the compile
// job could not lay such a workspace out on disk.
void Workspace::check_tree(const std::map<std::string, std::string>& files) const {
  for (const auto& [path, content] : files) {
    // Every path under "p/" sorts at or after "p/": the first one there is enough.
    const std::string dir = path + "/";
    const auto below = files.lower_bound(dir);
    if (below != files.end() && below->first.compare(0, dir.size(), dir) == 0)
      throw Error(ErrorCode::path_violation,
                  "path '" + below->first.substr(0, 160) + "': '" + path.substr(0, 160) +
                      "' is a file, so it cannot also be a directory",
                  "action.path");
  }
}

std::size_t Workspace::total_bytes() const {
  std::size_t total = 0;
  for (const auto& [path, content] : files_) total += content.size();
  return total;
}

void Workspace::write(const std::string& path, std::string content) {
  check_path(path);
  auto next = files_;
  next[path] = std::move(content);
  check_tree(next);
  check_sizes(next);
  files_ = std::move(next);
}

std::pair<std::size_t, std::size_t> find_occurrences(std::string_view hay, std::string_view needle) {
  // Knuth-Morris-Pratt: at most 2(n + m) comparisons whatever the texts, where std::string::find
  // and a find-again loop take O(n * m) on "aaaa...": one 256 KiB edit held the server loop (and so
  // every client) for half a second (issue 22.6).
  std::size_t first = std::string_view::npos, count = 0;
  if (needle.empty() || needle.size() > hay.size()) return {first, 0};
  std::vector<std::size_t> fail(needle.size(), 0);  // longest proper border of needle[0..i]
  for (std::size_t i = 1, k = 0; i < needle.size(); ++i) {
    while (k > 0 && needle[i] != needle[k]) k = fail[k - 1];
    if (needle[i] == needle[k]) ++k;
    fail[i] = k;
  }
  for (std::size_t i = 0, k = 0; i < hay.size(); ++i) {
    while (k > 0 && hay[i] != needle[k]) k = fail[k - 1];
    if (hay[i] == needle[k]) ++k;
    if (k == needle.size()) {
      if (count++ == 0) first = i + 1 - needle.size();
      k = fail[k - 1];  // overlapping occurrences count too
    }
  }
  return {first, count};
}

void Workspace::edit(const std::string& path, const std::string& old_text, const std::string& new_text) {
  check_path(path);
  auto it = files_.find(path);
  if (it == files_.end())
    throw Error(ErrorCode::invalid_action, "edit: no file '" + path + "' in the workspace", "action.path");
  if (old_text.empty())
    throw Error(ErrorCode::invalid_action, "edit: 'old' is empty; use write_file to replace a file",
                "action.old");
  const std::string& content = it->second;
  const auto [first, count] = find_occurrences(content, old_text);
  if (count == 0)
    throw Error(ErrorCode::invalid_action, "edit: 'old' text does not occur in '" + path + "'",
                "action.old");
  if (count > 1)
    throw Error(ErrorCode::invalid_action,
                "edit: 'old' text occurs " + std::to_string(count) + " times in '" + path +
                    "'; include more context so it occurs exactly once",
                "action.old");
  auto next = files_;
  next[path] = content.substr(0, first) + new_text + content.substr(first + old_text.size());
  check_sizes(next);
  files_ = std::move(next);
}

void Workspace::patch(const std::string& unified_diff) {
  std::map<std::string, std::string> next;
  try {
    next = apply_unified_diff(files_, unified_diff);
  } catch (const PatchError& e) {
    throw Error(ErrorCode::invalid_action, std::string("patch: ") + e.what(), "action.diff");
  }
  for (const auto& [path, content] : next)
    if (!files_.contains(path)) check_path(path);
  check_tree(next);
  check_sizes(next);
  files_ = std::move(next);
}

}  // namespace d2k::env
