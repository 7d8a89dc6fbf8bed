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

nlohmann::json CalibrationCache::load_locked() {
  std::ifstream in(file_);
  if (!in) return nlohmann::json::object();
  try {
    auto j = nlohmann::json::parse(in);
    return j.is_object() ? j : nlohmann::json::object();
  } catch (const nlohmann::json::exception&) {
    return nlohmann::json::object();  // a damaged cache is remeasured, not fatal
  }
}

std::optional<CalibrationEntry> CalibrationCache::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto j = load_locked();
  if (!j.contains(key)) return std::nullopt;
  try {
    return CalibrationEntry::from_json(j.at(key));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void CalibrationCache::store(const std::string& key, const CalibrationEntry& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  auto j = load_locked();
  j[key] = entry.to_json();
  std::filesystem::create_directories(file_.parent_path());
  const auto tmp = file_.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << '\n';
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, file_);
}

}  // namespace d2k::runner
