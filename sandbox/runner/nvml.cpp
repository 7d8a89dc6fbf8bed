#include "sandbox/runner/nvml.hpp"

#include <dlfcn.h>

namespace d2k::runner {
namespace {
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM in nvml.h
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

}  // namespace d2k::runner
