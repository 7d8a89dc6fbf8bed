#include "sandbox/compile_cache.hpp"

#include <unistd.h>
#include <xxhash.h>

#include <atomic>
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

CompileCache::CompileCache(fs::path dir) : dir_(std::move(dir)) { fs::create_directories(dir_); }

fs::path CompileCache::entry_dir(const std::string& key) const { return dir_ / key.substr(0, 2) / key; }

std::optional<CompileOutcome> CompileCache::lookup(const std::string& key) const {
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
    return o;
  } catch (const std::exception&) {
    return std::nullopt;  // damaged entry: compile again (the new entry cannot replace it; fine)
  }
}

fs::path CompileCache::store(const std::string& key, const CompileOutcome& outcome, const fs::path& artifact) const {
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
    std::error_code ec;
    fs::rename(tmp, final_dir, ec);
    if (ec) fs::remove_all(tmp);  // another compile stored the same key first: keep theirs
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return artifact.empty() ? fs::path() : final_dir / "kernel.so";
}

}  // namespace d2k::sandbox
