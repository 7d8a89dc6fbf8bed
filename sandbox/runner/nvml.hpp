// SM clock, temperature and clock-event readings through NVML, loaded with dlopen (libnvidia-ml
// ships with the driver, not the toolkit, and has no header here). Absent NVML means no throttle
// detection and no thermal check, never a failure.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace d2k::runner {

// ---- Class 14: the device's thermal and clock state before a job -------------------------------
// NVML's clock event reasons (nvmlClocksEventReason*, the old "throttle reasons"): the ones that
// mean "slowed by heat or power", which a previous kernel can leave behind. Idle, application
// clock settings, sync boost and display clocks are not in the mask: they are how the board is set.
inline constexpr std::uint64_t kEventSwPowerCap = 0x4;
inline constexpr std::uint64_t kEventHwSlowdown = 0x8;
inline constexpr std::uint64_t kEventSwThermal = 0x20;
inline constexpr std::uint64_t kEventHwThermal = 0x40;
inline constexpr std::uint64_t kEventHwPowerBrake = 0x80;
inline constexpr std::uint64_t kSlowdownEvents =
    kEventSwPowerCap | kEventHwSlowdown | kEventSwThermal | kEventHwThermal | kEventHwPowerBrake;
// A GPU this close to its slowdown temperature (degrees C) counts as hot.
inline constexpr unsigned kThermalMarginC = 5;

// One reading; 0 / false where NVML could not tell.
struct DeviceCondition {
  unsigned temperature_c = 0;
  unsigned slowdown_c = 0;          // slowdown threshold (else the maximum operating temperature)
  std::uint64_t events = 0;         // active clock event reasons
  bool events_known = false;
};
// Why the device is not in a clean thermal state ("" when it is, or when nothing is known).
std::string hot_reason(const DeviceCondition& c);

class Nvml {
 public:
  Nvml() = default;
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  ~Nvml();
  // Loads the library and finds the device by its PCI bus id ("0000:3B:00.0"). False on failure.
  bool open(const std::string& pci_bus_id);
  bool ok() const { return device_ != nullptr; }
  unsigned sm_clock_mhz() const;       // current SM clock, 0 when unknown
  unsigned sm_clock_max_mhz() const;   // the board's maximum SM clock, 0 when unknown
  std::string driver_version() const;  // "" when unknown
  DeviceCondition condition() const;   // temperature, slowdown threshold, clock event reasons

 private:
  void* lib_ = nullptr;
  void* device_ = nullptr;
  int (*clock_)(void*, int, unsigned*) = nullptr;
  int (*max_clock_)(void*, int, unsigned*) = nullptr;
  int (*driver_)(char*, unsigned) = nullptr;
  int (*shutdown_)() = nullptr;
  int (*temperature_)(void*, int, unsigned*) = nullptr;
  int (*threshold_)(void*, int, unsigned*) = nullptr;
  int (*events_)(void*, unsigned long long*) = nullptr;
};


}  // namespace d2k::runner
