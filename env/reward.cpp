// Reward formulas. Each preset's comment names where its numbers come from; docs/reward.md has
// the same sources with the mapping from the anchor's terms onto d2k's times.
#include "env/reward.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace d2k::env {
namespace {

using nlohmann::json;
using sandbox::Outcome;

constexpr std::array<std::string_view, 4> kPresets = {"d2k", "kevin", "kernelgym", "kernrl"};

// Keys that act only under the d2k preset; the others carry their source's constants.
constexpr std::array<std::string_view, 9> kD2kOnlyKeys = {
    "transform",     "correct_bonus", "speed_weight",  "clip_min", "clip_max",
    "compile_error", "incorrect",     "runtime_error", "timeout"};
constexpr std::array<std::string_view, 3> kCommonKeys = {"preset", "sandbox_violation", "flagged"};

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& set, std::string_view s) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

void check_preset(const std::string& preset) {
  if (!contains(kPresets, preset)) {
    throw std::invalid_argument("reward config key 'preset': unknown preset '" + preset +
                                "' (expected d2k, kevin, kernelgym or kernrl)");
  }
}

void check_d2k_fields(const RewardConfig& c) {
  if (c.transform != "log" && c.transform != "linear") {
    throw std::invalid_argument("reward config key 'transform': unknown transform '" +
                                c.transform + "' (expected log or linear)");
  }
  const std::array<std::pair<const char*, double>, 10> numbers = {{
      {"correct_bonus", c.correct_bonus},
      {"speed_weight", c.speed_weight},
      {"clip_min", c.clip_min},
      {"clip_max", c.clip_max},
      {"compile_error", c.compile_error},
      {"incorrect", c.incorrect},
      {"runtime_error", c.runtime_error},
      {"timeout", c.timeout},
      {"sandbox_violation", c.sandbox_violation},
      {"flagged", c.flagged},
  }};
  for (const auto& [key, v] : numbers) {
    if (!std::isfinite(v)) {
      throw std::invalid_argument(std::string("reward config key '") + key +
                                  "': must be a finite number");
    }
  }
  if (c.clip_min > c.clip_max) {
    throw std::invalid_argument("reward config key 'clip_min': greater than clip_max");
  }
}

void validate(const RewardConfig& c) {
  check_preset(c.preset);
  check_d2k_fields(c);
}

// The constant a failed evaluation earns. Under the anchor presets the four evaluation outcomes
// the anchors know take their source's values; sandbox_violation and flagged always come from
// the config.
double failure_constant(Outcome status, const RewardConfig& c) {
  if (status == Outcome::sandbox_violation) return c.sandbox_violation;
  if (status == Outcome::flagged) return c.flagged;
  if (c.preset == "kevin" || c.preset == "kernelgym") {
    // Kevin: 0.3*1{correct} + speedup*1{correct} is 0 for any kernel that is not correct.
    // KernelGYM: penalty_score = 0.0 for failed tasks; an incorrect kernel gets
    // 0.5*0 + 0.5*speedup with speedup reported as 0 (performance is measured only when correct).
    return 0.0;
  }
  if (c.preset == "kernrl") {
    // OpenEnv kernrl _compute_reward: compilation failure -0.5; a failed correctness check
    // (wrong output, exception or timeout while running) -0.25.
    return status == Outcome::compile_error ? -0.5 : -0.25;
  }
  if (status == Outcome::compile_error) return c.compile_error;
  if (status == Outcome::incorrect) return c.incorrect;
  if (status == Outcome::runtime_error) return c.runtime_error;
  return c.timeout;
}

bool all_finite_positive(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x) && x > 0.0; });
}

struct Times {
  double agent, expert, baseline;  // geometric means, microseconds
};

// The geometric means when the three series are complete and valid; nullopt otherwise, with
// the reason in *why.
std::optional<Times> summarize(const RewardInputs& in, std::string* why) {
  if (in.agent_us.empty() || in.expert_us.empty() || in.baseline_us.empty()) {
    *why = "agent_us, expert_us and baseline_us must all be non-empty";
    return std::nullopt;
  }
  if (in.agent_us.size() != in.expert_us.size() || in.agent_us.size() != in.baseline_us.size()) {
    *why = "agent_us, expert_us and baseline_us must have one entry per workload (sizes " +
           std::to_string(in.agent_us.size()) + ", " + std::to_string(in.expert_us.size()) +
           ", " + std::to_string(in.baseline_us.size()) + ")";
    return std::nullopt;
  }
  for (const auto* v : {&in.agent_us, &in.expert_us, &in.baseline_us}) {
    if (!all_finite_positive(*v)) {
      *why = "times must be finite and positive";
      return std::nullopt;
    }
  }
  return Times{geometric_mean(in.agent_us), geometric_mean(in.expert_us),
               geometric_mean(in.baseline_us)};
}

json per_workload(const RewardInputs& in) {
  json rows = json::array();
  if (in.agent_us.size() != in.expert_us.size() || in.agent_us.size() != in.baseline_us.size()) {
    return rows;
  }
  for (std::size_t i = 0; i < in.agent_us.size(); ++i) {
    rows.push_back({{"agent_us", in.agent_us[i]},
                    {"expert_us", in.expert_us[i]},
                    {"baseline_us", in.baseline_us[i]}});
  }
  return rows;
}

// Reward and terms for a correct evaluation; score = t_k/t, speedup = t_base/t.
double correct_reward(const RewardConfig& c, double score, double speedup, json& terms) {
  if (c.preset == "kevin") {
    // Kevin-32B (Cognition blog https://cognition.ai/blog/kevin-32b; arXiv 2507.11948):
    // per-kernel score 0.3*1{correct} + (T_baseline/T_kernel)*1{correct}, baseline = PyTorch
    // eager. Here T_baseline/T_kernel is the task baseline's time over the agent's.
    terms = {{"correct", 0.3}, {"speedup", speedup}};
    return 0.3 + speedup;
  }
  if (c.preset == "kernelgym") {
    // KernelGYM / Dr. Kernel (github.com/hkust-nlp/KernelGYM,
    // drkernel/kernel/rewards/reward_client.py calculate_reward_speedup, run by
    // drkernel/kernel/scripts/rl/8b_trloo_mrs_pr_prs.sh with weights from
    // drkernel/kernel/config/kernel_trainer.yaml): init_correct_weight (0.5) * correct +
    // init_performance_weight (0.5) * speedup clipped to speedup_reward_upper_bound (3.0), and
    // set to 0 below speedup_reward_lower_bound (0.0). The profiling (coverage) term is left out.
    double s = std::min(speedup, 3.0);
    if (s < 0.0) s = 0.0;
    terms = {{"correct", 0.5}, {"performance", 0.5 * s}};
    return 0.5 + 0.5 * s;
  }
  if (c.preset == "kernrl") {
    // OpenEnv kernrl (github.com/meta-pytorch/OpenEnv envs/kernrl/server/evaluator.py
    // _compute_reward): faster than the baseline min(speedup - 1, 2); otherwise
    // (speedup - 1) * 0.5. Correctness alone earns nothing.
    const double r = speedup > 1.0 ? std::min(speedup - 1.0, 2.0) : (speedup - 1.0) * 0.5;
    terms = {{"speed", r}};
    return r;
  }
  // d2k: speed against the expert design for the active layer; both transforms are 0 at parity.
  const double raw = c.transform == "log" ? std::log2(score) : score - 1.0;
  const double clipped = std::clamp(raw, c.clip_min, c.clip_max);
  terms = {{"correct", c.correct_bonus},
           {"speed", c.speed_weight * clipped},
           {"transform", c.transform},
           {"transformed_score", raw},
           {"clipped", clipped != raw}};
  return c.correct_bonus + c.speed_weight * clipped;
}

}  // namespace

double geometric_mean(const std::vector<double>& values) {
  if (values.empty()) throw std::invalid_argument("geometric_mean: no values");
  double sum_log = 0.0;
  for (double v : values) {
    if (!std::isfinite(v) || v <= 0.0) {
      throw std::invalid_argument("geometric_mean: values must be finite and positive");
    }
    sum_log += std::log(v);
  }
  return std::exp(sum_log / static_cast<double>(values.size()));
}

json RewardConfig::to_json() const {
  json j = {{"preset", preset}, {"sandbox_violation", sandbox_violation}, {"flagged", flagged}};
  if (preset == "d2k") {
    j["transform"] = transform;
    j["correct_bonus"] = correct_bonus;
    j["speed_weight"] = speed_weight;
    j["clip_min"] = clip_min;
    j["clip_max"] = clip_max;
    j["compile_error"] = compile_error;
    j["incorrect"] = incorrect;
    j["runtime_error"] = runtime_error;
    j["timeout"] = timeout;
  }
  return j;
}

RewardConfig RewardConfig::from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("reward config: expected a JSON object");
  RewardConfig c;
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) {
      throw std::invalid_argument("reward config key 'preset': expected a string");
    }
    c.preset = j["preset"].get<std::string>();
  }
  check_preset(c.preset);
  for (const auto& [key, value] : j.items()) {
    if (!contains(kCommonKeys, key) && !contains(kD2kOnlyKeys, key)) {
      throw std::invalid_argument("reward config key '" + key + "': unknown key");
    }
    if (c.preset != "d2k" && contains(kD2kOnlyKeys, key)) {
      throw std::invalid_argument("reward config key '" + key + "': has no effect with preset '" +
                                  c.preset + "' (its formula is fixed by its source)");
    }
    if (key == "preset") continue;
    if (key == "transform") {
      if (!value.is_string()) {
        throw std::invalid_argument("reward config key 'transform': expected a string");
      }
      c.transform = value.get<std::string>();
      continue;
    }
    if (!value.is_number()) {
      throw std::invalid_argument("reward config key '" + key + "': expected a number");
    }
    const double v = value.get<double>();
    if (key == "correct_bonus") c.correct_bonus = v;
    else if (key == "speed_weight") c.speed_weight = v;
    else if (key == "clip_min") c.clip_min = v;
    else if (key == "clip_max") c.clip_max = v;
    else if (key == "compile_error") c.compile_error = v;
    else if (key == "incorrect") c.incorrect = v;
    else if (key == "runtime_error") c.runtime_error = v;
    else if (key == "timeout") c.timeout = v;
    else if (key == "sandbox_violation") c.sandbox_violation = v;
    else if (key == "flagged") c.flagged = v;
  }
  validate(c);
  return c;
}

RewardResult compute_reward(const RewardInputs& in, const RewardConfig& cfg) {
  validate(cfg);
  if (!sandbox::is_step_outcome(in.status)) {
    throw std::invalid_argument("reward: '" + std::string(sandbox::to_string(in.status)) +
                                "' is not an evaluation outcome the reward knows");
  }
  if (in.layer < 0 || in.layer > 3) {
    throw std::invalid_argument("reward: layer " + std::to_string(in.layer) + " is outside 0..3");
  }
  const bool correct = in.status == Outcome::ok;
  if (correct && !in.compiled) {
    throw std::invalid_argument("reward: status 'ok' for an evaluation that did not compile");
  }

  std::string why;
  const std::optional<Times> t = summarize(in, &why);
  if (correct && !t) throw std::invalid_argument("reward: status 'ok' but " + why);

  json b = {{"preset", cfg.preset},
            {"status", sandbox::to_string(in.status)},
            {"compiled", in.compiled},
            {"correct", correct},
            {"layer", in.layer},
            {"expert_layer", in.layer == 0 ? 3 : in.layer},
            {"per_workload", per_workload(in)},
            {"score", nullptr},
            {"speedup_vs_baseline", nullptr},
            {"fraction_of_expert", nullptr},
            {"t_agent_us", nullptr},
            {"t_expert_us", nullptr},
            {"t_baseline_us", nullptr}};
  if (t) {
    b["t_agent_us"] = t->agent;
    b["t_expert_us"] = t->expert;
    b["t_baseline_us"] = t->baseline;
    b["score"] = t->expert / t->agent;
    b["speedup_vs_baseline"] = t->baseline / t->agent;
    // Share of the baseline-to-expert gain reached, in log time: 0 at the baseline's time,
    // 1 at the expert's. Undefined when the expert is no faster than the baseline.
    const double gap = std::log(t->baseline / t->expert);
    if (gap > 1e-12) b["fraction_of_expert"] = std::log(t->baseline / t->agent) / gap;
  }

  RewardResult r;
  json terms = json::object();
  if (correct) {
    r.reward = correct_reward(cfg, t->expert / t->agent, t->baseline / t->agent, terms);
  } else {
    r.reward = failure_constant(in.status, cfg);
    terms = {{"failure", r.reward}};
  }
  b["terms"] = std::move(terms);
  r.breakdown = std::move(b);
  return r;
}

}  // namespace d2k::env
