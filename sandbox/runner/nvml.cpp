#include "sandbox/runner/nvml.hpp"

#include <dlfcn.h>


namespace d2k::runner {
namespace {
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM in nvml.h
constexpr int kNvmlTemperatureGpu = 0;       // NVML_TEMPERATURE_GPU
constexpr int kNvmlThresholdSlowdown = 1;    // NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
constexpr int kNvmlThresholdGpuMax = 3;      // NVML_TEMPERATURE_THRESHOLD_GPU_MAX
template <class F>
F sym(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}
}  // namespace

Nvml::~Nvml() {
  if (shutdown_ != nullptr && device_ != nullptr) shutdown_();
  if (lib_ != nullptr) dlclose(lib_);
}

bool Nvml::open(const std::string& pci_bus_id) {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) return false;
  auto init = sym<int (*)()>(lib_, "nvmlInit_v2");
  auto by_pci = sym<int (*)(const char*, void**)>(lib_, "nvmlDeviceGetHandleByPciBusId_v2");
  clock_ = sym<int (*)(void*, int, unsigned*)>(lib_, "nvmlDeviceGetClockInfo");
  max_clock_ = sym<int (*)(void*, int, unsigned*)>(lib_, "nvmlDeviceGetMaxClockInfo");
  driver_ = sym<int (*)(char*, unsigned)>(lib_, "nvmlSystemGetDriverVersion");
  shutdown_ = sym<int (*)()>(lib_, "nvmlShutdown");
  temperature_ = sym<int (*)(void*, int, unsigned*)>(lib_, "nvmlDeviceGetTemperature");
  threshold_ = sym<int (*)(void*, int, unsigned*)>(lib_, "nvmlDeviceGetTemperatureThreshold");
  events_ = sym<int (*)(void*, unsigned long long*)>(lib_, "nvmlDeviceGetCurrentClocksEventReasons");
  if (events_ == nullptr)  // drivers before 535 name it after throttling
    events_ = sym<int (*)(void*, unsigned long long*)>(lib_, "nvmlDeviceGetCurrentClocksThrottleReasons");
  if (init == nullptr || by_pci == nullptr || clock_ == nullptr || init() != 0) return false;
  void* dev = nullptr;
  if (by_pci(pci_bus_id.c_str(), &dev) != 0) {
    if (shutdown_ != nullptr) shutdown_();
    return false;
  }
  device_ = dev;
  return true;
}

unsigned Nvml::sm_clock_mhz() const {
  unsigned v = 0;
  if (device_ == nullptr || clock_(device_, kNvmlClockSm, &v) != 0) return 0;
  return v;
}

unsigned Nvml::sm_clock_max_mhz() const {
  unsigned v = 0;
  if (device_ == nullptr || max_clock_ == nullptr || max_clock_(device_, kNvmlClockSm, &v) != 0) return 0;
  return v;
}

std::string Nvml::driver_version() const {
  char buf[96] = {};
  if (driver_ == nullptr || driver_(buf, sizeof buf) != 0) return "";
  return buf;
}

DeviceCondition Nvml::condition() const {
  DeviceCondition c;
  if (device_ == nullptr) return c;
  if (temperature_ != nullptr && temperature_(device_, kNvmlTemperatureGpu, &c.temperature_c) != 0) c.temperature_c = 0;
  if (threshold_ != nullptr && threshold_(device_, kNvmlThresholdSlowdown, &c.slowdown_c) != 0) c.slowdown_c = 0;
  if (c.slowdown_c == 0 && threshold_ != nullptr && threshold_(device_, kNvmlThresholdGpuMax, &c.slowdown_c) != 0)
    c.slowdown_c = 0;
  unsigned long long events = 0;
  if (events_ != nullptr && events_(device_, &events) == 0) {
    c.events = events;
    c.events_known = true;
  }
  return c;
}

std::string hot_reason(const DeviceCondition& c) {
  std::string why;
  auto add = [&](const std::string& s) { why += (why.empty() ? "" : ", ") + s; };
  if (c.temperature_c > 0 && c.slowdown_c > kThermalMarginC && c.temperature_c + kThermalMarginC >= c.slowdown_c)
    add("at " + std::to_string(c.temperature_c) + " C (slowdown at " + std::to_string(c.slowdown_c) + " C)");
  if (c.events_known && (c.events & kSlowdownEvents) != 0) {
    const struct {
      std::uint64_t bit;
      const char* name;
    } names[] = {{kEventSwPowerCap, "sw_power_cap"}, {kEventHwSlowdown, "hw_slowdown"}, {kEventSwThermal, "sw_thermal_slowdown"},
                 {kEventHwThermal, "hw_thermal_slowdown"}, {kEventHwPowerBrake, "hw_power_brake"}};
    for (const auto& n : names)
      if ((c.events & n.bit) != 0) add(std::string("clocks held down: ") + n.name);
  }
  return why;
}

}  // namespace d2k::runner
