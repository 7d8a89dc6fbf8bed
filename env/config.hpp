// The server's configuration: one struct, and one list of its keys (Config::for_each_key) that
// everything else derives from: the config file (JSON), `hello`'s config (to_json) and
// `d2k serve`'s flags with their help and defaults (env/cli/config_flags).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

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

// The agent's tools (docs/agent-tools.md): what each costs in steps, the deadline of a GPU tool run
// and the size of what comes back.
struct ToolsConfig {
  std::uint32_t profile_steps = 3;                // ncu replays each kernel dozens of times
  std::uint32_t sanitize_steps = 2;
  std::uint32_t disassemble_steps = 1;
  double deadline_s = 300;                        // one profile / sanitize run, tool start-up included
  std::uint32_t max_items = 20;                   // launches (profile) / findings (sanitize) in a reply
  std::uint32_t disassemble_max_bytes = 64u << 10;  // listing text in a reply (an action may ask for less)
};

// The values `log_level` accepts, most verbose first.
inline constexpr std::array<std::string_view, 6> kLogLevels = {"trace", "debug", "info", "warn", "error", "off"};

// One key of the config: where it lives in the JSON ("max_sessions", or "default_budget.max_steps"
// inside an object), the `d2k serve` flag that sets it (empty: config file only) and what it means.
struct ConfigKey {
  std::string_view key;
  std::string_view flag;
  std::string_view help;
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
  ToolsConfig tools;                                 // profile, sanitize, disassemble
  protocol::Limits limits;                           // message, nesting, string and file limits (`hello.limits`, not a key)
  std::size_t max_workspace_bytes = 2u << 20;        // all files of one workspace
  std::size_t reply_cache_per_session = 16;          // retried ids answered from here
  std::size_t reply_cache_global = 4096;             // for ops without a session
  std::size_t reply_cache_session_bytes = 8u << 20;  // step replies one session keeps (its latest always)
  std::size_t reply_cache_bytes = 256u << 20;        // all cached replies of the server together
  double compile_deadline_s = 120;                   // wall clock of one nvcc run
  // Compile budgets (docs/multi-tenant-compile.md; sandbox::CompilerConfig has the same defaults).
  std::uint64_t compile_jail_memory_bytes = 4ull << 30;  // memory of one compile jail (cgroup memory.max, or its reservation)
  std::uint64_t compile_jail_pids = 64;                  // processes of one compile jail (RLIMIT_NPROC; cgroup pids.max)
  std::uint64_t compile_memory_bytes = 0;                // all concurrent compiles together; 0 = half the physical memory
  std::uint64_t compile_cache_bytes = 4ull << 30;        // compile cache size, least recently used evicted; 0 = unbounded
  std::string compile_cgroup = "auto";                   // "auto", "off", or a delegated cgroup v2 directory
  bool record = true;                                // write episode logs and the catalogue
  bool gpu_resident = true;                          // evaluate: outputs and inputs on the GPU; false is refused (class 11)
  bool prepare = true;                               // ready every task on every GPU at start (docs/pipeline.md)
  bool replay_oracle = true;                         // the owner replays timed calls with the task's L3 expert
  std::filesystem::path log_dir;                     // episode logs; default state_dir/episodes
  std::uint64_t log_budget_bytes = 16ull << 30;      // episode logs kept; the oldest finished go first; 0 = no bound
  std::filesystem::path catalogue;                   // SQLite index of episodes; default state_dir/catalogue.sqlite
  std::string events_endpoint;                       // PUB socket for `d2k watch`; default: port+1 / <ipc>.events; "none" = off
  bool events_source = false;                        // without CURVE, events carry agent source too (single-user hosts)
  std::string log_level = "info";                    // server log: one of kLogLevels
  std::filesystem::path server_key;                  // CURVE key pair of the server (`d2k keys`); "" = no CURVE
  std::filesystem::path allowed_keys;                // client public keys that may connect (re-read when it changes)

  // Every key of the config file and of to_json, once. Calls visit(ConfigKey, member_of) where
  // member_of(config) returns the key's member of a Config (const or not).
  template <typename Visit>
  static void for_each_key(Visit&& visit);

  // Fills unset paths and derived values (state_dir, log_dir, catalogue, compile_workers). Whoever
  // builds a Config from user input calls it once; the Server and the GPU backend take the result
  // as it is (they throw std::logic_error on a Config that was never finalized).
  void finalize();
  bool finalized() const;
  // Throws std::invalid_argument naming the key of a value out of its range (log_level).
  void validate() const;
  nlohmann::json to_json() const;                    // every key, as `hello` reports it
  // Keys as to_json; missing keys keep their defaults. Unknown keys, wrong types and bad values
  // throw std::invalid_argument naming the key ("default_budget.max_steps").
  static Config from_json(const nlohmann::json& j);

  // What agent code and the compile jail must never see: the tasks (experts, hidden workloads) and
  // the server's state (caches, scratch of other sessions, episode logs and catalogue). Call on a
  // finalized Config.
  std::vector<std::filesystem::path> hidden_paths() const;
};

// The key list. D2K_CONFIG_KEY spells each member once: its JSON key is the member's own name
// ("default_budget.max_steps" is max_steps inside the default_budget object).
#define D2K_CONFIG_KEY(member, flag, help) \
  visit(ConfigKey{#member, flag, help}, [](auto& c) -> auto& { return c.member; })
template <typename Visit>
void Config::for_each_key(Visit&& visit) {
  D2K_CONFIG_KEY(endpoint, "--endpoint", "Where to listen: tcp://HOST:PORT or ipc://PATH");
  D2K_CONFIG_KEY(tasks_dir, "--tasks", "Tasks folder (default: the built-in tasks)");
  D2K_CONFIG_KEY(state_dir, "--state-dir", "Compile cache and scratch space (default: $XDG_CACHE_HOME/d2k, else ~/.cache/d2k, else /tmp/d2k-<uid>)");
  D2K_CONFIG_KEY(max_sessions, "--max-sessions", "Open sessions at once; more get `capacity`");
  D2K_CONFIG_KEY(idle_timeout_s, "--idle-timeout", "Seconds before an idle session is closed");
  D2K_CONFIG_KEY(compile_workers, "--compile-workers", "Parallel sandboxed compiles (0 = one per core)");
  D2K_CONFIG_KEY(shutdown_grace_s, "--shutdown-grace", "On SIGINT/SIGTERM, seconds to let work in flight finish before cancelling it");
  D2K_CONFIG_KEY(default_budget.max_steps, "--max-steps", "Default steps per episode");
  D2K_CONFIG_KEY(default_budget.max_compiles, "--max-compiles", "Default compiles per episode");
  D2K_CONFIG_KEY(default_budget.max_evaluations, "--max-evaluations", "Default evaluations per episode");
  D2K_CONFIG_KEY(default_budget.wall_seconds, "--wall-seconds", "Default episode wall-clock budget in seconds");
  D2K_CONFIG_KEY(max_budget.max_steps, "", "Most steps per episode a reset may ask for");
  D2K_CONFIG_KEY(max_budget.max_compiles, "", "Most compiles per episode a reset may ask for");
  D2K_CONFIG_KEY(max_budget.max_evaluations, "", "Most evaluations per episode a reset may ask for");
  D2K_CONFIG_KEY(max_budget.wall_seconds, "", "Longest episode wall-clock budget a reset may ask for");
  D2K_CONFIG_KEY(reward, "", "Evaluation rewards: preset, transform and failure constants (docs/reward.md)");
  D2K_CONFIG_KEY(step_reward.invalid_action, "", "Reward of a step whose action could not apply");
  D2K_CONFIG_KEY(step_reward.ok_step, "", "Reward of an edit or a compile that succeeded");
  D2K_CONFIG_KEY(tools.profile_steps, "", "Steps a profile action costs");
  D2K_CONFIG_KEY(tools.sanitize_steps, "", "Steps a sanitize action costs");
  D2K_CONFIG_KEY(tools.disassemble_steps, "", "Steps a disassemble action costs");
  D2K_CONFIG_KEY(tools.deadline_s, "", "Wall-clock seconds of one profile or sanitize run (the tool, the runner and the kernel)");
  D2K_CONFIG_KEY(tools.max_items, "", "Kernel launches (profile) or findings (sanitize) in one reply");
  D2K_CONFIG_KEY(tools.disassemble_max_bytes, "", "Bytes of SASS/PTX listing in one disassemble reply");
  D2K_CONFIG_KEY(max_workspace_bytes, "", "Bytes of all files of one workspace");
  D2K_CONFIG_KEY(reply_cache_per_session, "", "Replies kept per session to answer retried request ids");
  D2K_CONFIG_KEY(reply_cache_global, "", "Replies kept for retried requests without a session");
  D2K_CONFIG_KEY(reply_cache_session_bytes, "", "Bytes of step replies one session keeps for retries (its latest reply always stays)");
  D2K_CONFIG_KEY(reply_cache_bytes, "", "Bytes of all cached replies together; the oldest go first, never a session's latest step reply");
  D2K_CONFIG_KEY(compile_deadline_s, "", "Wall-clock seconds of one nvcc run");
  D2K_CONFIG_KEY(compile_jail_memory_bytes, "--compile-jail-memory", "Bytes of memory one compile jail may use (cgroup memory.max, no swap; in budget mode the reservation each compile makes)");
  D2K_CONFIG_KEY(compile_jail_pids, "--compile-jail-pids", "Processes one compile jail may run (RLIMIT_NPROC on its uid; cgroup pids.max too)");
  D2K_CONFIG_KEY(compile_memory_bytes, "--compile-memory", "Bytes of memory all concurrent compiles may use together (0 = half the physical memory, at least one jail's)");
  D2K_CONFIG_KEY(compile_cache_bytes, "--compile-cache-bytes", "Bytes the compile cache may hold; least recently used entries are evicted (0 = unbounded)");
  D2K_CONFIG_KEY(compile_cgroup, "--compile-cgroup", "Where compile jails get cgroup v2 limits: auto (below the server's own cgroup), off, or an empty delegated cgroup directory");
  D2K_CONFIG_KEY(gpu_resident, "", "Evaluations keep outputs on the GPU: a trusted runner owns the output slots and the timed inputs and compares there (docs/timing-protocol.md). Must be true: false (the host path, where the inputs' key enters the agent's process: docs/threat-model.md, class 11) is refused; the host path is for trusted kernels only (d2k verify-tasks --host-path)");
  D2K_CONFIG_KEY(replay_oracle, "", "The owner replays an agent kernel's timed calls with the task's L3 expert, not its reference, and compares them with its outputs (the correctness calls stay on the reference; docs/threat-model.md \"The replay oracle\"); false: the reference replays them, as before (slower on the compute-bound tasks: gemm_bf16 11 s instead of 0.8 s on the H200). Turn it off for tasks whose experts `d2k verify-tasks` has not checked");
  D2K_CONFIG_KEY(record, "--record", "Write episode logs and the catalogue; --no-record writes none (a session can also opt out: reset options.record=false)");
  D2K_CONFIG_KEY(prepare, "", "Prepare every task on every GPU in the background at start (trusted builds, calibration; docs/pipeline.md); false (`d2k serve --no-prepare`): each task's first evaluation does it inline");
  D2K_CONFIG_KEY(log_dir, "--log-dir", "Episode logs (default: <state-dir>/episodes)");
  D2K_CONFIG_KEY(log_budget_bytes, "", "Bytes of episode logs kept in the log dir; beyond it the oldest finished logs are deleted (0 = keep all)");
  D2K_CONFIG_KEY(catalogue, "--catalogue", "SQLite episode catalogue (default: <state-dir>/catalogue.sqlite)");
  D2K_CONFIG_KEY(events_endpoint, "--events", "PUB endpoint for `d2k watch` (default: the server port + 1, or <ipc path>.events; 'none' = off)");
  D2K_CONFIG_KEY(events_source, "--events-source", "Without CURVE, let event subscribers (not authenticated) see agent source; only where all who can connect may see it (with CURVE each key sees its own sessions whole)");
  D2K_CONFIG_KEY(log_level, "--log-level", "Server log level: trace, debug, info, warn, error or off");
  D2K_CONFIG_KEY(server_key, "--server-key", "CURVE key pair of the server (a .key file from `d2k keys server`); needed to serve beyond loopback/ipc");
  D2K_CONFIG_KEY(allowed_keys, "--allowed-keys", "Client public keys that may connect, one per line (.pub lines); re-read when the file changes");
}
#undef D2K_CONFIG_KEY

}  // namespace d2k::env
