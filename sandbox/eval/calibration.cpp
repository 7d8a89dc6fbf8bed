#include "sandbox/eval/calibration.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace d2k::runner {

nlohmann::json CalibrationEntry::to_json() const {
  nlohmann::json ex = nlohmann::json::object();
  for (const auto& [layer, times] : experts) ex[std::to_string(layer)] = times;
  return {{"baseline", baseline}, {"experts", ex}, {"measured_at", measured_at}};
}

CalibrationEntry CalibrationEntry::from_json(const nlohmann::json& j) {
  try {
    CalibrationEntry e;
    e.baseline = j.at("baseline").get<std::map<std::string, double>>();
    for (const auto& [layer, times] : j.at("experts").items())
      e.experts[std::stoi(layer)] = times.get<std::map<std::string, double>>();
    e.measured_at = j.value("measured_at", "");
    return e;
  } catch (const std::exception& ex) {
    throw std::runtime_error(std::string("bad calibration entry: ") + ex.what());
  }
}

double CalibrationEntry::geomean(const std::map<std::string, double>& times) {
  if (times.empty()) return 0;
  double log_sum = 0;
  for (const auto& [name, t] : times) log_sum += std::log(std::max(t, 1e-12));
  return std::exp(log_sum / static_cast<double>(times.size()));
}

CalibrationCache::CalibrationCache(std::filesystem::path file) : file_(std::move(file)) {}

std::string CalibrationCache::key(const std::string& gpu_model, const std::string& driver,
                                  const std::string& toolchain, const std::string& task_hash) {
  return gpu_model + "|" + driver + "|" + toolchain + "|" + task_hash;
}

const nlohmann::json& CalibrationCache::load_locked() {
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(file_, ec);
  if (ec) {  // no file (yet)
    memo_valid_ = false;
    memo_ = nlohmann::json::object();
    return memo_;
  }
  const auto size = std::filesystem::file_size(file_, ec);
  if (!ec && memo_valid_ && mtime == memo_mtime_ && size == memo_size_) return memo_;
  ++loads_;
  nlohmann::json j = nlohmann::json::object();
  if (std::ifstream in(file_); in) {
    try {
      j = nlohmann::json::parse(in);
      if (!j.is_object()) j = nlohmann::json::object();
    } catch (const nlohmann::json::exception&) {
      j = nlohmann::json::object();  // a damaged cache is remeasured, not fatal
    }
  }
  memo_ = std::move(j);
  memo_mtime_ = mtime;
  memo_size_ = ec ? 0 : size;
  memo_valid_ = !ec;
  return memo_;
}

std::optional<CalibrationEntry> CalibrationCache::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const nlohmann::json& j = load_locked();
  if (!j.contains(key)) return std::nullopt;
  try {
    return CalibrationEntry::from_json(j.at(key));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void CalibrationCache::store(const std::string& key, const CalibrationEntry& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json j = load_locked();
  j[key] = entry.to_json();
  std::filesystem::create_directories(file_.parent_path());
  const auto tmp = file_.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << '\n';
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, file_);
  memo_valid_ = false;  // read back (and memoised) by the next lookup
}

}  // namespace d2k::runner
