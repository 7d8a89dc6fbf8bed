// Content-addressed store of compile results: <dir>/<key[0:2]>/<key>/{kernel.so, outcome.json}.
// An entry appears by rename of a complete temporary directory, so readers never see half of one.
// With a size budget, the least recently used entries are evicted (last use = outcome.json's mtime,
// set on every store and hit).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/compiler.hpp"

namespace d2k::sandbox {

// xxh3-128 over length-prefixed parts, as 32 hex digits.
std::string content_key(const std::vector<std::string>& parts, const std::map<std::string, std::string>& files);

struct CacheBudget {
  std::uint64_t max_bytes = 0;               // 0: unbounded; else evict down to 90% when exceeded
  std::chrono::seconds keep_recent{600};     // entries used this recently are never evicted: a
                                             // reply's artifact is loaded after the compile returns
};

class CompileCache {
 public:
  // Creates dir, measures what it holds, and removes temporaries a killed writer left (older than
  // an hour). Thread-safe.
  explicit CompileCache(std::filesystem::path dir, CacheBudget budget = {});
  // The stored outcome (cached=true, artifact set when ok), or nothing; a damaged entry is a miss.
  // A hit counts as a use.
  std::optional<CompileOutcome> lookup(const std::string& key);
  // Stores `outcome` and, when given, copies the artifact beside it, then evicts when over the
  // budget. Returns the stored artifact path (empty without one). Throws std::runtime_error on an
  // I/O failure.
  std::filesystem::path store(const std::string& key, const CompileOutcome& outcome,
                              const std::filesystem::path& artifact = {});
  // Removes least recently used entries (not those used within keep_recent) until the cache holds
  // at most 90% of max_bytes; re-measures the directory. Returns the bytes removed.
  std::uint64_t evict();
  std::uint64_t bytes() const;               // what this process believes the cache holds
  std::uint64_t evicted_entries() const;     // since construction
  std::filesystem::path entry_dir(const std::string& key) const;

 private:
  std::filesystem::path dir_;
  CacheBudget budget_;
  mutable std::mutex mu_;  // guards bytes_, evicted_; one eviction at a time
  std::uint64_t bytes_ = 0;
  std::uint64_t evicted_ = 0;
};

}  // namespace d2k::sandbox
