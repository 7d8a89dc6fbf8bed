// Content-addressed store of compile results: <dir>/<key[0:2]>/<key>/{kernel.so, outcome.json}.
// An entry appears by rename of a complete temporary directory, so readers never see half of one.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/compiler.hpp"

namespace d2k::sandbox {

// xxh3-128 over length-prefixed parts, as 32 hex digits.
std::string content_key(const std::vector<std::string>& parts, const std::map<std::string, std::string>& files);

class CompileCache {
 public:
  explicit CompileCache(std::filesystem::path dir);  // creates dir
  // The stored outcome (cached=true, artifact set when ok), or nothing; a damaged entry is a miss.
  std::optional<CompileOutcome> lookup(const std::string& key) const;
  // Stores `outcome` and, when given, copies the artifact beside it. Returns the stored artifact
  // path (empty without one). Throws std::runtime_error on an I/O failure.
  std::filesystem::path store(const std::string& key, const CompileOutcome& outcome,
                              const std::filesystem::path& artifact = {}) const;
  std::filesystem::path entry_dir(const std::string& key) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace d2k::sandbox
