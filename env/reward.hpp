// The reward for one evaluation: d2k's own formula (speed relative to the expert design for the
// active guidance layer) and named presets that reproduce the anchors' published formulas, so a
// run here can be compared with Kevin-32B, KernelGYM (Dr. Kernel) and OpenEnv kernrl.
// docs/reward.md describes every formula with its source, and the breakdown's fields.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/outcome.hpp"

namespace d2k::env {

// What one evaluation measured. Times are per workload, in the same workload order in all three
// vectors; each is the runner's timing statistic (median) in microseconds.
struct RewardInputs {
  // A step outcome: ok, compile_error, incorrect, runtime_error, timeout, sandbox_violation, flagged.
  sandbox::Outcome status = sandbox::Outcome::internal_error;
  bool compiled = false;
  std::vector<double> agent_us;     // the agent's kernel
  std::vector<double> expert_us;    // the expert for this layer (experts/L3 at L0)
  std::vector<double> baseline_us;  // the task's naive baseline kernel
  int layer = 0;                    // active guidance layer, 0..3 (recorded in the breakdown)
};

struct RewardConfig {
  std::string preset = "d2k";  // "d2k", "kevin", "kernelgym", "kernrl"
  // d2k preset only: reward = correct_bonus + speed_weight * clip(transform(score)), where
  // transform is "log" (log2 score) or "linear" (score - 1); both are 0 at parity with the expert.
  std::string transform = "log";
  double correct_bonus = 0.3;
  double speed_weight = 1.0;
  double clip_min = -1.0;  // bounds on transform(score), before speed_weight
  double clip_max = 2.0;
  // Failure constants. The d2k preset uses all six; the other presets carry their source's own
  // values for compile_error/incorrect/runtime_error/timeout and use only the last two here
  // (the anchors have no sandbox or anti-cheat verdict of their own).
  double compile_error = -0.1;
  double incorrect = 0.0;
  double runtime_error = -0.1;
  double timeout = -0.1;
  double sandbox_violation = -1.0;
  double flagged = -1.0;

  // Only the keys that act under `preset` are written, so to_json/from_json round-trip.
  [[nodiscard]] nlohmann::json to_json() const;
  // Missing keys keep their defaults. Unknown keys, keys that have no effect under the chosen
  // preset, wrong types, unknown presets/transforms, non-finite numbers and clip_min > clip_max
  // throw std::invalid_argument naming the key.
  static RewardConfig from_json(const nlohmann::json& j);
};

struct RewardResult {
  double reward = 0.0;
  // {preset, status, compiled, correct, layer, expert_layer, score, speedup_vs_baseline,
  //  fraction_of_expert, per_workload: [{agent_us, expert_us, baseline_us}], t_agent_us,
  //  t_expert_us, t_baseline_us, terms: {...}}; time-derived fields are null when not measured.
  nlohmann::json breakdown;
};

// Throws std::invalid_argument for a status that is not a step outcome (sandbox/outcome.hpp), an
// unknown preset, a layer outside 0..3, an "ok" input that did not compile, and, on an "ok" input,
// missing, mismatched, non-finite or non-positive times (the caller reports those as an internal error, never as a reward).
RewardResult compute_reward(const RewardInputs& in, const RewardConfig& cfg);

// exp(mean(ln x)). Throws std::invalid_argument on an empty input or any value that is not a
// finite positive number.
double geometric_mean(const std::vector<double>& values);

}  // namespace d2k::env
