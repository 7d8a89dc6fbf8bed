// Finds the GPUs this server may use and builds the backend that evaluates on them, or says why
// there is none. The server itself never initialises CUDA.
#pragma once

#include <memory>
#include <string>

#include "env/config.hpp"
#include "env/gpu_backend.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::env {

// Returns nullptr when no GPU can be used; `note` says what was found ("1 × NVIDIA H200" or why none).
std::shared_ptr<GpuBackend> make_gpu_backend(const Config& config, const tasks::TaskSet& tasks, std::string& note);

}  // namespace d2k::env
