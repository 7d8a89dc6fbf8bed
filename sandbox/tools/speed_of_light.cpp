#include "sandbox/tools/speed_of_light.hpp"

#include <algorithm>

namespace d2k::tools {

using nlohmann::json;

PeakFlops peak_flops_for(const std::string& gpu_name, const tasks::Task& task) {
  // H100/H200 SXM datasheet figures (dense, no sparsity); the H200 shares the H100's SMs and clocks.
  const bool hopper = gpu_name.find("H200") != std::string::npos || gpu_name.find("H100") != std::string::npos;
  if (!hopper) return {};
  bool f8 = false, f16 = false, f32 = false;
  for (const tasks::Arg& a : task.args) {
    if (a.role == tasks::Role::scalar) continue;
    for (const tasks::Workload& w : task.workloads) {
      const std::string d(tasks::to_string(task.dtype_of(a, w)));
      f8 = f8 || d.find("f8") != std::string::npos || d.find("e4m3") != std::string::npos || d.find("e5m2") != std::string::npos;
      f16 = f16 || d == "bf16" || d == "f16";
      f32 = f32 || d == "f32";
    }
  }
  const std::string gpu = gpu_name.find("H200") != std::string::npos ? "H200" : "H100";
  if (f8) return {1978.9e12, gpu + " dense fp8 tensor-core peak (datasheet)"};
  if (f16) return {989.4e12, gpu + " dense bf16/f16 tensor-core peak (datasheet)"};
  if (f32) return {66.9e12, gpu + " fp32 FMA peak (datasheet; tf32 tensor cores: 494.7e12)"};
  return {};
}

json speed_of_light(const tasks::Task& task, const std::vector<MeasuredMedian>& medians, const SolInputs& in) {
  json ref = {{"copy_bytes_per_s", in.copy_bytes_per_s}, {"copy_source", in.copy_source}, {"expert_layer", in.expert_layer}};
  if (in.peak.flops_per_s > 0) {
    ref["peak_flops_per_s"] = in.peak.flops_per_s;
    ref["peak_source"] = in.peak.source;
  }
  json rows = json::array();
  double bw_sum = 0, fl_sum = 0;
  int n = 0;
  for (const auto& m : medians) {
    const tasks::Workload* w = task.find_workload(m.workload);
    if (w == nullptr || !(m.median_s > 0)) continue;
    json r = {{"workload", m.workload}, {"median_s", m.median_s}};
    double bytes = 0, flops = 0;
    try {
      bytes = task.bytes_of(*w);
      flops = task.flops_of(*w);
    } catch (const std::exception&) {
    }
    if (bytes > 0) {
      r["bytes"] = bytes;
      r["achieved_bytes_per_s"] = bytes / m.median_s;
      if (in.copy_bytes_per_s > 0) {
        r["bandwidth_fraction"] = bytes / m.median_s / in.copy_bytes_per_s;
        bw_sum += r["bandwidth_fraction"].get<double>();
      }
    }
    if (flops > 0) {
      r["flops"] = flops;
      r["achieved_flops_per_s"] = flops / m.median_s;
      if (in.peak.flops_per_s > 0) {
        r["flops_fraction"] = flops / m.median_s / in.peak.flops_per_s;
        fl_sum += r["flops_fraction"].get<double>();
      }
    }
    if (auto e = in.expert_s.find(m.workload); e != in.expert_s.end() && e->second > 0) {
      r["expert_s"] = e->second;
      r["time_vs_expert"] = m.median_s / e->second;  // 1: the expert's time; below 1: faster
    }
    rows.push_back(std::move(r));
    ++n;
  }
  json out = {{"reference", ref}, {"workloads", rows}};
  // Which roof the kernel is nearer on average (fractions of the two speeds of light).
  if (n > 0 && (bw_sum > 0 || fl_sum > 0)) out["nearest_roof"] = fl_sum > bw_sum ? "compute" : "memory";
  return out;
}

json implementation_score(const json& properties, int layer) {
  json held = json::array(), lacking = json::array(), undetermined = json::array();
  if (properties.is_object())
    for (const auto& [id, p] : properties.items()) {
      if (!p.is_object()) continue;
      if (layer > 0 && p.value("layer", 1) > layer) continue;
      const std::string state = p.value("state", std::string("unknown"));
      (state == "holds" ? held : state == "fails" ? lacking : undetermined).push_back(id);
    }
  const std::size_t total = held.size() + lacking.size() + undetermined.size();
  json out = {{"layer", layer}, {"held", held}, {"lacking", lacking}, {"undetermined", undetermined}};
  out["score"] = total == 0 ? json(nullptr) : json(static_cast<double>(held.size()) / static_cast<double>(total));
  return out;
}

}  // namespace d2k::tools
