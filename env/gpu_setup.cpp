#include "env/gpu_setup.hpp"

#include <filesystem>

namespace d2k::env {

std::shared_ptr<GpuBackend> make_gpu_backend(const Config&, const tasks::TaskSet&, std::string& note) {
  bool device_nodes = std::filesystem::exists("/dev/nvidiactl") || std::filesystem::exists("/dev/nvidia0");
  if (!device_nodes) {
    note = "none (no /dev/nvidia* device) — compile only; evaluate and submit answer no_gpu";
    return nullptr;
  }
  note = "a GPU device exists, but this build has no GPU evaluator — compile only; evaluate and submit answer no_gpu";
  return nullptr;
}

}  // namespace d2k::env
