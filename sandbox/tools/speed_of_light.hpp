// Speed of light in every evaluation (issue 20, item 4): per timed workload, the achieved bandwidth
// and FLOP/s (task.json's byte and FLOP expressions over the measured median) against the GPU's
// measured copy bandwidth and its peak FLOP/s, and the time against the active layer's expert;
// and the mechanical implementation score: which design properties of the active layer (and
// those below) the kernel holds and lacks.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tasks/loader/task.hpp"

namespace d2k::tools {

struct PeakFlops {
  double flops_per_s = 0;  // 0: unknown for this GPU and dtype
  std::string source;      // e.g. "H200 dense bf16 tensor-core peak (datasheet)"
};
// The datasheet peak of the GPU (by name) for the task's arithmetic: its widest floating input dtype
// (bf16/f16 → tensor cores, fp8 → fp8 tensor cores, f32 → FMA units). Unknown GPUs: 0.
PeakFlops peak_flops_for(const std::string& gpu_name, const tasks::Task& task);

struct SolInputs {
  double copy_bytes_per_s = 0;        // measured device-to-device copy bandwidth (0: unknown)
  std::string copy_source;            // how it was measured, or why the fallback
  PeakFlops peak;
  int expert_layer = 3;
  std::map<std::string, double> expert_s;  // workload → the expert's median (calibration)
};

struct MeasuredMedian {
  std::string workload;
  double median_s = 0;
};

// {reference: {copy_bytes_per_s, copy_source, peak_flops_per_s?, peak_source?, expert_layer},
//  workloads: [{workload, median_s, bytes, achieved_bytes_per_s, bandwidth_fraction, flops?,
//  achieved_flops_per_s?, flops_fraction?, expert_s?, time_vs_expert?}], bound: "memory"|"compute"}
nlohmann::json speed_of_light(const tasks::Task& task, const std::vector<MeasuredMedian>& medians, const SolInputs& in);

// From the evaluation's `properties` ({id: {state, layer, title, ...}}): {layer, held[], lacking[],
// undetermined[], score (held / properties of layers ≤ layer; null when there are none)}. Layer 0
// (no guidance) is scored against every property.
nlohmann::json implementation_score(const nlohmann::json& properties, int layer);

}  // namespace d2k::tools
