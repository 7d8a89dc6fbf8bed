// The episode's files: the only thing that is the agent's. Kept in memory; written to disk only into
// a compile job's directory by the sandbox. Every path is checked here, once.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "protocol/codec.hpp"

namespace d2k::env {

// Where `needle` occurs in `hay`, overlapping occurrences included: {first position or npos,
// how many}. Linear in the two sizes whatever their content (edits run on the server loop).
std::pair<std::size_t, std::size_t> find_occurrences(std::string_view hay, std::string_view needle);

class Workspace {
 public:
  struct Limits {
    std::size_t max_files = 32;
    std::size_t max_file_bytes = 256u << 10;
    std::size_t max_total_bytes = 2u << 20;
    std::size_t max_path_bytes = 128;
    std::size_t max_depth = 4;
  };

  explicit Workspace(Limits limits) : limits_(limits) {}

  // Each throws protocol::Error (path_violation, invalid_action, too_large) and leaves the
  // workspace unchanged on failure.
  void write(const std::string& path, std::string content);
  void edit(const std::string& path, const std::string& old_text, const std::string& new_text);
  void patch(const std::string& unified_diff);

  const std::map<std::string, std::string>& files() const { return files_; }
  std::size_t total_bytes() const;

  // Throws protocol::Error{path_violation} naming what is wrong with the path.
  void check_path(const std::string& path) const;

 private:
  void check_sizes(const std::map<std::string, std::string>& files) const;
  void check_tree(const std::map<std::string, std::string>& files) const;

  Limits limits_;
  std::map<std::string, std::string> files_;
};

}  // namespace d2k::env
