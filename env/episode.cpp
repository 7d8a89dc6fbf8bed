#include "env/episode.hpp"

namespace d2k::env {

using nlohmann::json;

Episode::Episode(std::string id, const tasks::Task& task, int layer, std::uint64_t seed, Budget budget,
                 std::string label, Workspace::Limits limits)
    : id_(std::move(id)), task_(&task), layer_(layer), seed_(seed), budget_(budget),
      label_(std::move(label)), workspace_(limits) {
  workspace_.write(task.main_file, task.starter);
}

double Episode::seconds_used() const {
  return std::chrono::duration<double>(Clock::now() - started_).count();
}

void Episode::record_step(json last, double reward, std::uint32_t cost) {
  steps_ += cost;
  last_ = std::move(last);
  last_reward_ = reward;
  total_reward_ += reward;
  if (!ended() && steps_ >= budget_.max_steps) end("step_budget");
}

json Episode::observation() const {
  json workloads = json::array();
  for (const tasks::Workload* w : task_->visible_workloads()) {
    json sizes = json::object();
    for (const auto& [k, v] : w->sizes) sizes[k] = v;
    json entry = {{"name", w->name}, {"sizes", sizes}, {"timed", w->timed}};
    // The tensor dtypes of this workload where they differ by workload (void* arguments).
    if (!w->dtypes.empty()) {
      json dtypes = json::object();
      for (const tasks::Arg& a : task_->args)
        if (a.role != tasks::Role::scalar && a.untyped) dtypes[a.name] = std::string(tasks::to_string(task_->dtype_of(a, *w)));
      entry["dtypes"] = dtypes;
    }
    if (!w->params.empty()) entry["params"] = w->params;
    workloads.push_back(std::move(entry));
  }
  json guidance = json::array();
  for (const tasks::Guidance& g : task_->guidance_up_to(layer_))
    guidance.push_back({{"layer", g.layer}, {"title", g.title}, {"text", g.text}});
  json files = json::object();
  for (const auto& [path, content] : workspace_.files()) files[path] = content;
  return {
      {"task",
       {{"id", task_->id},
        {"title", task_->title},
        {"category", task_->category},
        {"statement", task_->statement},
        {"signature", task_->signature},
        {"entry", task_->entry},
        {"main_file", task_->main_file},
        {"workloads", workloads}}},
      {"layer", layer_},
      {"guidance", guidance},
      {"files", files},
      {"last", last_},
      {"budget",
       {{"steps_used", steps_},
        {"max_steps", budget_.max_steps},
        {"compiles_used", compiles_},
        {"max_compiles", budget_.max_compiles},
        {"evaluations_used", evaluations_},
        {"max_evaluations", budget_.max_evaluations},
        {"seconds_used", seconds_used()},
        {"wall_seconds", budget_.wall_seconds}}},
      {"step", steps_},
      {"done", ended()},
      {"end_reason", end_reason_ ? json(*end_reason_) : json(nullptr)},
  };
}

json Episode::info() const {
  return {{"end_reason", end_reason_ ? json(*end_reason_) : json(nullptr)},
          {"task", task_->id},
          {"layer", layer_},
          {"seed", seed_},
          {"total_reward", total_reward_}};
}

}  // namespace d2k::env
