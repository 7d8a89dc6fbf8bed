#include "sandbox/compile_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;
using nlohmann::json;

namespace d2k::sandbox {
namespace {

void update(XXH3_state_t* st, const std::string& s) {
  const std::uint64_t n = s.size();  // length prefix: ("ab","c") and ("a","bc") differ
  XXH3_128bits_update(st, &n, sizeof n);
  XXH3_128bits_update(st, s.data(), s.size());
}

json to_json(const CompileOutcome& o) {
  json diags = json::array();
  for (const auto& d : o.diagnostics)
    diags.push_back({{"file", d.file}, {"line", d.line}, {"column", d.column}, {"severity", d.severity}, {"message", d.message}});
  return {{"ok", o.ok},
          {"seconds", o.seconds},
          {"exit_status", o.exit_status},
          {"signal", o.signal},
          {"timed_out", o.timed_out},
          {"sandbox_violation", o.sandbox_violation},
          {"violation", o.violation},
          {"diagnostics", diags},
          {"diagnostics_dropped", o.diagnostics_dropped},
          {"log", o.log},
          {"log_truncated", o.log_truncated},
          {"key", o.key}};
}

CompileOutcome from_json(const json& j) {
  CompileOutcome o;
  o.ok = j.at("ok").get<bool>();
  o.exit_status = j.at("exit_status").get<int>();
  o.signal = j.at("signal").get<int>();
  o.timed_out = j.at("timed_out").get<bool>();
  o.sandbox_violation = j.at("sandbox_violation").get<bool>();
  o.violation = j.at("violation").get<std::string>();
  for (const auto& d : j.at("diagnostics"))
    o.diagnostics.push_back({d.at("file").get<std::string>(), d.at("line").get<int>(), d.at("column").get<int>(),
                             d.at("severity").get<std::string>(), d.at("message").get<std::string>()});
  o.diagnostics_dropped = j.at("diagnostics_dropped").get<std::size_t>();
  o.log = j.at("log").get<std::string>();
  o.log_truncated = j.at("log_truncated").get<bool>();
  o.key = j.at("key").get<std::string>();
  return o;
}

bool is_key_dir(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.size() == 32 && std::all_of(name.begin(), name.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

std::uint64_t tree_bytes(const fs::path& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2)) total += it->file_size(ec2);
  }
  return total;
}

// Marks an entry used now (its outcome.json's mtime).
void touch(const fs::path& outcome_json) { utimensat(AT_FDCWD, outcome_json.c_str(), nullptr, 0); }

struct EntryInfo {
  fs::path dir;
  std::uint64_t bytes = 0;
  fs::file_time_type last_use;
};

// Every complete entry, and removes temporaries older than an hour (a writer that was killed).
std::vector<EntryInfo> scan(const fs::path& root) {
  std::vector<EntryInfo> entries;
  std::error_code ec;
  const auto stale = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& shard : fs::directory_iterator(root, ec)) {
    if (!shard.is_directory(ec) || shard.path().filename().string().size() != 2) continue;
    std::error_code ec2;
    for (const auto& e : fs::directory_iterator(shard.path(), ec2)) {
      std::error_code ec3;
      if (!e.is_directory(ec3)) continue;
      if (e.path().filename().string().rfind(".tmp-", 0) == 0) {
        if (fs::last_write_time(e.path(), ec3) < stale && !ec3) fs::remove_all(e.path(), ec3);
        continue;
      }
      if (!is_key_dir(e.path())) continue;
      auto when = fs::last_write_time(e.path() / "outcome.json", ec3);
      if (ec3) when = fs::file_time_type::min();  // damaged: first to go
      entries.push_back({e.path(), tree_bytes(e.path()), when});
    }
  }
  return entries;
}

}  // namespace

std::string content_key(const std::vector<std::string>& parts, const std::map<std::string, std::string>& files) {
  XXH3_state_t* st = XXH3_createState();
  if (!st) throw std::bad_alloc();
  XXH3_128bits_reset(st);
  for (const auto& p : parts) update(st, p);
  update(st, std::to_string(files.size()));
  for (const auto& [path, content] : files) {
    update(st, path);
    update(st, content);
  }
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return hex;
}

CompileCache::CompileCache(fs::path dir, CacheBudget budget) : dir_(std::move(dir)), budget_(budget) {
  fs::create_directories(dir_);
  for (const auto& e : scan(dir_)) bytes_ += e.bytes;
  if (budget_.max_bytes && bytes_ > budget_.max_bytes) evict();
}

std::uint64_t CompileCache::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

std::uint64_t CompileCache::evicted_entries() const {
  std::lock_guard lock(mu_);
  return evicted_;
}

std::uint64_t CompileCache::evict() {
  if (budget_.max_bytes == 0) return 0;  // unbounded: nothing is ever over
  std::lock_guard lock(mu_);
  std::vector<EntryInfo> entries = scan(dir_);
  std::uint64_t total = 0;
  for (const auto& e : entries) total += e.bytes;
  const std::uint64_t target = budget_.max_bytes - budget_.max_bytes / 10;
  std::sort(entries.begin(), entries.end(), [](const EntryInfo& a, const EntryInfo& b) { return a.last_use < b.last_use; });
  const auto recent = fs::file_time_type::clock::now() - budget_.keep_recent;
  std::uint64_t removed = 0;
  for (const auto& e : entries) {
    if (total <= target || e.last_use >= recent) break;
    // Renamed away first, so a reader sees the whole entry or none of it.
    const fs::path doomed = e.dir.parent_path() / (".tmp-evict-" + e.dir.filename().string() + "-" + std::to_string(getpid()));
    std::error_code ec;
    fs::rename(e.dir, doomed, ec);
    if (ec) continue;  // another process evicted it first
    fs::remove_all(doomed, ec);
    total -= e.bytes;
    removed += e.bytes;
    ++evicted_;
  }
  bytes_ = total;
  return removed;
}

fs::path CompileCache::entry_dir(const std::string& key) const { return dir_ / key.substr(0, 2) / key; }

std::optional<CompileOutcome> CompileCache::lookup(const std::string& key) {
  const fs::path entry = entry_dir(key);
  std::ifstream in(entry / "outcome.json", std::ios::binary);
  if (!in) return std::nullopt;
  try {
    CompileOutcome o = from_json(json::parse(in));
    if (o.key != key) return std::nullopt;
    if (o.ok) {
      o.artifact = entry / "kernel.so";
      if (!fs::is_regular_file(o.artifact)) return std::nullopt;
    }
    o.cached = true;
    touch(entry / "outcome.json");
    return o;
  } catch (const std::exception&) {
    return std::nullopt;  // damaged entry: compile again (the new entry cannot replace it; fine)
  }
}

fs::path CompileCache::store(const std::string& key, const CompileOutcome& outcome, const fs::path& artifact) {
  static std::atomic<std::uint64_t> counter{0};
  const fs::path final_dir = entry_dir(key);
  const fs::path shard = final_dir.parent_path();
  fs::create_directories(shard);
  const fs::path tmp = shard / (".tmp-" + key + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(tmp);
  fs::create_directory(tmp);
  try {
    if (!artifact.empty()) fs::copy_file(artifact, tmp / "kernel.so");
    {
      std::ofstream out(tmp / "outcome.json", std::ios::binary | std::ios::trunc);
      // Logs hold bytes of agent source: invalid UTF-8 is replaced, never a throw.
      out << to_json(outcome).dump(-1, ' ', false, json::error_handler_t::replace);
      out.flush();
      if (!out) throw std::runtime_error("cannot write " + (tmp / "outcome.json").string());
    }
    const std::uint64_t size = tree_bytes(tmp);
    std::error_code ec;
    fs::rename(tmp, final_dir, ec);
    if (ec) {
      fs::remove_all(tmp);  // another compile stored the same key first: keep theirs
      touch(final_dir / "outcome.json");
    } else {
      std::lock_guard lock(mu_);
      bytes_ += size;
    }
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  bool over = false;
  {
    std::lock_guard lock(mu_);
    over = budget_.max_bytes && bytes_ > budget_.max_bytes;
  }
  if (over) evict();
  return artifact.empty() ? fs::path() : final_dir / "kernel.so";
}

}  // namespace d2k::sandbox
