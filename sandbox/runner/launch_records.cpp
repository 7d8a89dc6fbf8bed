#include "sandbox/runner/launch_records.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <cupti.h>

namespace d2k::runner {
namespace {

struct Api {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
};
Api api;

// Filled by CUPTI's buffer-completed callback (which may run on a CUPTI thread).
std::mutex records_mu;
std::vector<LaunchRecord> records;
std::string records_error;

constexpr std::size_t kBufferBytes = 1u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(records_mu);
  while (buffer != nullptr && api.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    if (records.size() >= kMaxLaunchRecords) {
      records_error = "more than " + std::to_string(kMaxLaunchRecords) + " kernel launches in one call";
      continue;
    }
    // The record layout of the CUPTI this runner was built with (same toolkit as the machine's).
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    LaunchRecord l;
    l.kernel = k->name != nullptr ? k->name : "";
    l.grid_x = static_cast<std::uint32_t>(k->gridX);
    l.grid_y = static_cast<std::uint32_t>(k->gridY);
    l.grid_z = static_cast<std::uint32_t>(k->gridZ);
    l.block_x = static_cast<std::uint32_t>(k->blockX);
    l.block_y = static_cast<std::uint32_t>(k->blockY);
    l.block_z = static_cast<std::uint32_t>(k->blockZ);
    l.registers_per_thread = k->registersPerThread;
    l.static_shared_bytes = static_cast<std::uint32_t>(k->staticSharedMemory);
    l.dynamic_shared_bytes = static_cast<std::uint32_t>(k->dynamicSharedMemory);
    l.local_bytes_per_thread = k->localMemoryPerThread;
    records.push_back(std::move(l));
  }
  std::free(buffer);
}

std::string describe(const char* what, CUptiResult rc) {
  const char* s = nullptr;
  if (api.result_string != nullptr) api.result_string(rc, &s);
  return std::string(what) + ": " + (s != nullptr ? s : "CUPTI error " + std::to_string(static_cast<int>(rc)));
}

template <class F>
bool load(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  return out != nullptr;
}

}  // namespace

bool LaunchRecorder::open(std::string& error) {
  if (open_) return true;
  void* lib = nullptr;
  for (const char* name : {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/lib64/libcupti.so",
                           "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) {
    error = "CUPTI (libcupti.so) not found";
    return false;
  }
  if (!load(lib, "cuptiActivityRegisterCallbacks", api.register_callbacks) ||
      !load(lib, "cuptiActivityEnable", api.enable) || !load(lib, "cuptiActivityDisable", api.disable) ||
      !load(lib, "cuptiActivityFlushAll", api.flush_all) ||
      !load(lib, "cuptiActivityGetNextRecord", api.next_record) ||
      !load(lib, "cuptiGetResultString", api.result_string)) {
    error = "libcupti lacks the activity API";
    return false;
  }
  if (const CUptiResult rc = api.register_callbacks(buffer_requested, buffer_completed); rc != CUPTI_SUCCESS) {
    error = describe("cuptiActivityRegisterCallbacks", rc);
    return false;
  }
  open_ = true;
  return true;
}

bool LaunchRecorder::begin(std::string& error) {
  {
    std::lock_guard<std::mutex> lock(records_mu);
    records.clear();
    records_error.clear();
  }
  if (const CUptiResult rc = api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); rc != CUPTI_SUCCESS) {
    error = describe("cuptiActivityEnable", rc);
    return false;
  }
  return true;
}

bool LaunchRecorder::end(std::vector<LaunchRecord>& out, std::string& error) {
  const CUptiResult flushed = api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const CUptiResult disabled = api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (flushed != CUPTI_SUCCESS) {
    error = describe("cuptiActivityFlushAll", flushed);
    return false;
  }
  if (disabled != CUPTI_SUCCESS) {
    error = describe("cuptiActivityDisable", disabled);
    return false;
  }
  return take(out, error);
}

bool LaunchRecorder::stop(std::string& error) {
  if (const CUptiResult rc = api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); rc != CUPTI_SUCCESS) {
    error = describe("cuptiActivityDisable", rc);
    return false;
  }
  return true;
}

bool LaunchRecorder::collect(std::vector<LaunchRecord>& out, std::string& error) {
  if (const CUptiResult rc = api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); rc != CUPTI_SUCCESS) {
    error = describe("cuptiActivityFlushAll", rc);
    return false;
  }
  return take(out, error);
}

bool LaunchRecorder::take(std::vector<LaunchRecord>& out, std::string& error) {
  std::lock_guard<std::mutex> lock(records_mu);
  if (!records_error.empty()) {
    error = records_error;
    return false;
  }
  out = std::move(records);
  records.clear();
  return true;
}

}  // namespace d2k::runner
