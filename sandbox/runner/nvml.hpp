// SM clock readings through NVML, loaded with dlopen (libnvidia-ml ships with the driver, not the
// toolkit, and has no header here). Absent NVML means no throttle detection, never a failure.
#pragma once

#include <string>

namespace d2k::runner {

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

 private:
  void* lib_ = nullptr;
  void* device_ = nullptr;
  int (*clock_)(void*, int, unsigned*) = nullptr;
  int (*max_clock_)(void*, int, unsigned*) = nullptr;
  int (*driver_)(char*, unsigned) = nullptr;
  int (*shutdown_)() = nullptr;
};

}  // namespace d2k::runner
