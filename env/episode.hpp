// One agent's attempt at one task at one layer: workspace, budget, step count, last outcome, end.
// Owned and mutated only by the server loop thread; long work runs on copies of its files, and a
// workspace action (write_file, edit, patch) on a copy of the whole episode that the loop installs
// when it lands (Server::start_workspace_step).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "env/config.hpp"
#include "env/workspace.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::env {

class Episode {
 public:
  using Clock = std::chrono::steady_clock;

  Episode(std::string id, const tasks::Task& task, int layer, std::uint64_t seed, Budget budget,
          std::string label, Workspace::Limits limits);

  const std::string& id() const { return id_; }
  const tasks::Task& task() const { return *task_; }
  int layer() const { return layer_; }
  std::uint64_t seed() const { return seed_; }
  const std::string& label() const { return label_; }
  Workspace& workspace() { return workspace_; }
  const Workspace& workspace() const { return workspace_; }
  const Budget& budget() const { return budget_; }

  bool ended() const { return end_reason_.has_value(); }
  const std::optional<std::string>& end_reason() const { return end_reason_; }
  bool terminated() const { return end_reason_ && *end_reason_ == "submitted"; }
  bool truncated() const { return end_reason_ && *end_reason_ != "submitted"; }
  void end(std::string reason) {
    if (!end_reason_) end_reason_ = std::move(reason);
  }

  std::uint32_t steps() const { return steps_; }
  std::uint32_t compiles() const { return compiles_; }
  std::uint32_t evaluations() const { return evaluations_; }
  bool compiles_left() const { return compiles_ < budget_.max_compiles; }
  bool evaluations_left() const { return evaluations_ < budget_.max_evaluations; }
  double seconds_used() const;
  bool wall_time_exceeded() const { return seconds_used() > budget_.wall_seconds; }

  // Records one step: the outcome (the observation's `last`) and its reward; ends the episode
  // when the step budget is used up. `cost`: the steps it uses (a tool may cost several).
  void record_step(nlohmann::json last, double reward, std::uint32_t cost = 1);
  std::uint32_t steps_left() const { return steps_ < budget_.max_steps ? budget_.max_steps - steps_ : 0; }
  void count_compile() { ++compiles_; }
  void count_evaluation() { ++evaluations_; }
  // The server could not run the counted action (its disk was full): the agent is not charged.
  void refund_compile() { compiles_ -= compiles_ > 0 ? 1 : 0; }
  void refund_evaluation() { evaluations_ -= evaluations_ > 0 ? 1 : 0; }

  double total_reward() const { return total_reward_; }
  double last_reward() const { return last_reward_; }

  nlohmann::json observation() const;
  nlohmann::json info() const;

  Clock::time_point last_activity() const { return last_activity_; }
  void touch() { last_activity_ = Clock::now(); }

 private:
  std::string id_;
  const tasks::Task* task_;
  int layer_;
  std::uint64_t seed_;
  Budget budget_;
  std::string label_;
  Workspace workspace_;
  Clock::time_point started_ = Clock::now();
  Clock::time_point last_activity_ = started_;
  std::uint32_t steps_ = 0, compiles_ = 0, evaluations_ = 0;
  nlohmann::json last_ = nullptr;
  double last_reward_ = 0, total_reward_ = 0;
  std::optional<std::string> end_reason_;
};

}  // namespace d2k::env
