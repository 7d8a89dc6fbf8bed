// The server's configuration: one struct, every option once with its default and why.
// The CLI (`d2k serve --help`), the config file (JSON, same keys) and `hello` all read this.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "env/reward.hpp"
#include "protocol/codec.hpp"

namespace d2k::env {

struct Budget {
  std::uint32_t max_steps = 50;         // steps per episode (every action is a step)
  std::uint32_t max_compiles = 30;      // compile actions per episode (evaluate compiles for free)
  std::uint32_t max_evaluations = 20;   // evaluate actions per episode (submit is separate)
  double wall_seconds = 3600;           // episode wall-clock time, checked on each step
};

// Rewards of steps that evaluate nothing (edits, compiles). A failed compile step gets
// RewardConfig::compile_error, the same constant as an evaluation whose kernel did not compile.
struct StepRewards {
  double invalid_action = -0.1;  // a step whose action could not apply (bad path, edit not found)
  double ok_step = 0.0;          // an edit or a compile that succeeded
};

struct Config {
  std::string endpoint = "tcp://127.0.0.1:5555";   // loopback by default; ipc:// works too
  std::filesystem::path tasks_dir;                   // built-in tasks when empty (source tree)
  std::filesystem::path state_dir;                   // cache + scratch; default $XDG_CACHE_HOME/d2k or /tmp/d2k-<uid>
  std::uint32_t max_sessions = 1024;                 // open sessions at once; beyond → `capacity`
  double idle_timeout_s = 900;                       // a session idle this long is closed ("idle_timeout")
  std::uint32_t compile_workers = 0;                 // parallel sandboxed compiles; 0 = number of cores
  double shutdown_grace_s = 30;                      // SIGINT/SIGTERM: wait this long for work in flight
  Budget default_budget;                             // per episode unless reset options say otherwise
  Budget max_budget{1000, 500, 500, 86400};          // reset options are clamped to these
  RewardConfig reward;                               // evaluation rewards: preset, transform, failure constants
  StepRewards step_reward;
  protocol::Limits limits;                           // message, nesting, string and file limits
  std::size_t max_workspace_bytes = 2u << 20;        // all files of one workspace
  std::size_t reply_cache_per_session = 16;          // retried ids answered from here
  std::size_t reply_cache_global = 4096;             // for ops without a session
  double compile_deadline_s = 120;                   // wall clock of one nvcc run
  bool record = true;                                // write episode logs and the catalogue
  std::filesystem::path log_dir;                     // episode logs; default state_dir/episodes
  std::filesystem::path catalogue;                   // SQLite index of episodes; default state_dir/catalogue.sqlite
  std::string events_endpoint;                       // PUB socket for `d2k watch`; default: port+1 / <ipc>.events; "none" = off

  // Fills unset paths and derived values (state_dir, compile_workers).
  void finalize();
  nlohmann::json to_json() const;             // the whole config, as `hello` reports it
  static Config from_json(const nlohmann::json& j);  // keys as to_json; unknown keys → error
};

}  // namespace d2k::env
