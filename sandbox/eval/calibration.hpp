// Per-GPU calibration cache: baseline and expert times per workload, keyed by GPU model, driver,
// toolchain and task content hash, so they are measured once per machine setup, not per episode.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace d2k::runner {

struct CalibrationEntry {
  std::map<std::string, double> baseline;              // workload → median seconds
  std::map<int, std::map<std::string, double>> experts;  // layer 1..3 → workload → median seconds
  std::string measured_at;                             // ISO time
  nlohmann::json to_json() const;
  static CalibrationEntry from_json(const nlohmann::json& j);  // throws std::runtime_error
  // Geometric mean over the workloads of a time map (0 when empty).
  static double geomean(const std::map<std::string, double>& times);
};

class CalibrationCache {
 public:
  explicit CalibrationCache(std::filesystem::path file);
  static std::string key(const std::string& gpu_model, const std::string& driver,
                         const std::string& toolchain, const std::string& task_hash);
  std::optional<CalibrationEntry> find(const std::string& key);
  void store(const std::string& key, const CalibrationEntry& entry);  // atomic rewrite of the file
  const std::filesystem::path& file() const { return file_; }

  // How many times find() parsed the file (it parses only when the file changed: an evaluation's
  // lookup costs no JSON parse of every task's entry).
  std::size_t loads() const { return loads_; }

 private:
  const nlohmann::json& load_locked();  // memo_, read again when the file changed
  std::filesystem::path file_;
  std::mutex mu_;
  nlohmann::json memo_;                          // the file as last read or written
  std::filesystem::file_time_type memo_mtime_{};  // and its identity then
  std::uintmax_t memo_size_ = 0;
  bool memo_valid_ = false;
  std::size_t loads_ = 0;
};

}  // namespace d2k::runner
