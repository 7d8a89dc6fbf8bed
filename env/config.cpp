#include "env/config.hpp"

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace d2k::env {

using nlohmann::json;

void Config::finalize() {
  if (state_dir.empty()) {
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
      state_dir = std::filesystem::path(x) / "d2k";
    else if (const char* h = std::getenv("HOME"); h && *h)
      state_dir = std::filesystem::path(h) / ".cache" / "d2k";
    else
      state_dir = "/tmp/d2k-" + std::to_string(::getuid());
  }
  if (log_dir.empty()) log_dir = state_dir / "episodes";
  if (catalogue.empty()) catalogue = state_dir / "catalogue.sqlite";
  if (compile_workers == 0) compile_workers = std::max(1u, std::thread::hardware_concurrency());
}

namespace {

json budget_json(const Budget& b) {
  return {{"max_steps", b.max_steps},
          {"max_compiles", b.max_compiles},
          {"max_evaluations", b.max_evaluations},
          {"wall_seconds", b.wall_seconds}};
}

template <typename T>
void read(const json& j, const char* key, T& out, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return;
  try {
    out = it->get<T>();
  } catch (const json::exception&) {
    throw std::invalid_argument("config: '" + where + key + "' has the wrong type");
  }
}

void check_keys(const json& j, std::initializer_list<const char*> keys, const std::string& where) {
  if (!j.is_object()) throw std::invalid_argument("config: '" + where + "' must be an object");
  for (auto& [k, v] : j.items()) {
    bool known = false;
    for (const char* key : keys) known = known || k == key;
    if (!known) throw std::invalid_argument("config: unknown key '" + where + k + "'");
  }
}

Budget budget_from(const json& j, Budget b, const std::string& where) {
  check_keys(j, {"max_steps", "max_compiles", "max_evaluations", "wall_seconds"}, where);
  read(j, "max_steps", b.max_steps, where + ".");
  read(j, "max_compiles", b.max_compiles, where + ".");
  read(j, "max_evaluations", b.max_evaluations, where + ".");
  read(j, "wall_seconds", b.wall_seconds, where + ".");
  return b;
}

}  // namespace

json Config::to_json() const {
  return {{"endpoint", endpoint},
          {"tasks_dir", tasks_dir.string()},
          {"state_dir", state_dir.string()},
          {"max_sessions", max_sessions},
          {"idle_timeout_s", idle_timeout_s},
          {"compile_workers", compile_workers},
          {"shutdown_grace_s", shutdown_grace_s},
          {"default_budget", budget_json(default_budget)},
          {"max_budget", budget_json(max_budget)},
          {"reward", reward.to_json()},
          {"step_reward", {{"invalid_action", step_reward.invalid_action}, {"ok_step", step_reward.ok_step}}},
          {"max_workspace_bytes", max_workspace_bytes},
          {"reply_cache_per_session", reply_cache_per_session},
          {"reply_cache_global", reply_cache_global},
          {"compile_deadline_s", compile_deadline_s},
          {"record", record},
          {"log_dir", log_dir.string()},
          {"catalogue", catalogue.string()},
          {"events_endpoint", events_endpoint}};
}

Config Config::from_json(const json& j) {
  Config c;
  check_keys(j,
             {"endpoint", "tasks_dir", "state_dir", "max_sessions", "idle_timeout_s", "compile_workers",
              "shutdown_grace_s", "default_budget", "max_budget", "reward", "step_reward", "max_workspace_bytes",
              "reply_cache_per_session", "reply_cache_global", "compile_deadline_s", "record", "log_dir",
              "catalogue", "events_endpoint"},
             "");
  read(j, "endpoint", c.endpoint, "");
  std::string p;
  read(j, "tasks_dir", p, "");
  c.tasks_dir = p;
  p.clear();
  read(j, "state_dir", p, "");
  c.state_dir = p;
  read(j, "max_sessions", c.max_sessions, "");
  read(j, "idle_timeout_s", c.idle_timeout_s, "");
  read(j, "compile_workers", c.compile_workers, "");
  read(j, "shutdown_grace_s", c.shutdown_grace_s, "");
  if (j.contains("default_budget")) c.default_budget = budget_from(j["default_budget"], c.default_budget, "default_budget");
  if (j.contains("max_budget")) c.max_budget = budget_from(j["max_budget"], c.max_budget, "max_budget");
  if (j.contains("reward")) c.reward = RewardConfig::from_json(j["reward"]);
  if (j.contains("step_reward")) {
    check_keys(j["step_reward"], {"invalid_action", "ok_step"}, "step_reward");
    read(j["step_reward"], "invalid_action", c.step_reward.invalid_action, "step_reward.");
    read(j["step_reward"], "ok_step", c.step_reward.ok_step, "step_reward.");
  }
  read(j, "max_workspace_bytes", c.max_workspace_bytes, "");
  read(j, "reply_cache_per_session", c.reply_cache_per_session, "");
  read(j, "reply_cache_global", c.reply_cache_global, "");
  read(j, "compile_deadline_s", c.compile_deadline_s, "");
  read(j, "record", c.record, "");
  p.clear();
  read(j, "log_dir", p, "");
  c.log_dir = p;
  p.clear();
  read(j, "catalogue", p, "");
  c.catalogue = p;
  read(j, "events_endpoint", c.events_endpoint, "");
  return c;
}

}  // namespace d2k::env
