#include <signal.h>

#include <fstream>
#include <iostream>

#include "env/cli/commands.hpp"
#include "env/gpu_setup.hpp"
#include "env/server.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::cli {

namespace {

env::Server* g_server = nullptr;

void on_signal(int) {
  if (g_server) g_server->request_stop();  // async-signal-safe: one write(2) to an eventfd
}

}  // namespace

void add_serve(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("serve", "Run the environment server (ZeroMQ ROUTER, protocol v1)");
  auto cfg = std::make_shared<env::Config>();
  auto config_file = std::make_shared<std::string>();
  auto strict = std::make_shared<bool>(false);
  auto no_gpu = std::make_shared<bool>(false);
  auto tasks_dir = std::make_shared<std::string>();
  auto state_dir = std::make_shared<std::string>();
  cmd->add_option("--config", *config_file, "JSON config file (keys as in `hello`'s config); flags override it");
  cmd->add_option("--endpoint", cfg->endpoint, "Where to listen: tcp://HOST:PORT or ipc://PATH")
      ->capture_default_str();
  cmd->add_option("--tasks", *tasks_dir, "Tasks folder (default: the built-in tasks)");
  cmd->add_option("--state-dir", *state_dir,
                  "Compile cache and scratch space (default: $XDG_CACHE_HOME/d2k or ~/.cache/d2k)");
  cmd->add_option("--max-sessions", cfg->max_sessions, "Open sessions at once; more get `capacity`")
      ->capture_default_str();
  cmd->add_option("--idle-timeout", cfg->idle_timeout_s, "Seconds before an idle session is closed")
      ->capture_default_str();
  cmd->add_option("--compile-workers", cfg->compile_workers, "Parallel sandboxed compiles (0 = one per core)")
      ->capture_default_str();
  cmd->add_option("--max-steps", cfg->default_budget.max_steps, "Default steps per episode")->capture_default_str();
  cmd->add_option("--max-compiles", cfg->default_budget.max_compiles, "Default compiles per episode")
      ->capture_default_str();
  cmd->add_option("--max-evaluations", cfg->default_budget.max_evaluations, "Default evaluations per episode")
      ->capture_default_str();
  cmd->add_option("--wall-seconds", cfg->default_budget.wall_seconds, "Default episode wall-clock budget")
      ->capture_default_str();
  cmd->add_option("--shutdown-grace", cfg->shutdown_grace_s,
                  "On SIGINT/SIGTERM, seconds to let work in flight finish before cancelling it")
      ->capture_default_str();
  cmd->add_flag_function("--no-record", [cfg](std::int64_t) { cfg->record = false; },
                "Write no episode logs and no catalogue (sessions can also opt out: reset options.record=false)");
  cmd->add_option("--log-dir", cfg->log_dir, "Episode logs (default: <state-dir>/episodes)");
  cmd->add_option("--catalogue", cfg->catalogue, "SQLite episode catalogue (default: <state-dir>/catalogue.sqlite)");
  cmd->add_option("--events", cfg->events_endpoint,
                  "PUB endpoint for `d2k watch` (default: the server port + 1, or <ipc path>.events; 'none' = off)");
  cmd->add_flag("--strict", *strict, "Refuse to start if any task folder fails to load");
  cmd->add_flag("--no-gpu", *no_gpu, "Do not look for GPUs (compile-only server)");
  auto body = [=]() -> int {
    env::Config config = *cfg;
    if (!config_file->empty()) {
      std::ifstream in(*config_file);
      if (!in) throw std::runtime_error("cannot read config file " + *config_file);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(in);
      } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error("config file " + *config_file + ": " + e.what());
      }
      env::Config from_file = env::Config::from_json(j);
      // Flags given on the command line win over the file.
      env::Config defaults;
      if (config.endpoint == defaults.endpoint) config.endpoint = from_file.endpoint;
      if (config.max_sessions == defaults.max_sessions) config.max_sessions = from_file.max_sessions;
      if (config.idle_timeout_s == defaults.idle_timeout_s) config.idle_timeout_s = from_file.idle_timeout_s;
      if (config.compile_workers == defaults.compile_workers) config.compile_workers = from_file.compile_workers;
      config.tasks_dir = from_file.tasks_dir;
      config.state_dir = from_file.state_dir;
      config.max_budget = from_file.max_budget;
      config.reward = from_file.reward;
      config.step_reward = from_file.step_reward;
      config.max_workspace_bytes = from_file.max_workspace_bytes;
      config.compile_deadline_s = from_file.compile_deadline_s;
      if (config.record) config.record = from_file.record;
      if (config.log_dir.empty()) config.log_dir = from_file.log_dir;
      if (config.catalogue.empty()) config.catalogue = from_file.catalogue;
      if (config.events_endpoint.empty()) config.events_endpoint = from_file.events_endpoint;
    }
    if (!tasks_dir->empty()) config.tasks_dir = *tasks_dir;
    if (config.tasks_dir.empty()) config.tasks_dir = default_tasks_dir();
    if (!state_dir->empty()) config.state_dir = *state_dir;
    config.tasks_dir = std::filesystem::absolute(config.tasks_dir);

    tasks::TaskSet set = tasks::load_tasks(config.tasks_dir);
    for (const auto& e : set.errors) std::cerr << "d2k serve: task not loaded: " << e.file << ": " << e.what() << "\n";
    if (*strict && !set.errors.empty()) return 2;
    if (set.tasks.empty()) {
      std::cerr << "d2k serve: no tasks found in " << config.tasks_dir << "\n";
      return 2;
    }
    std::shared_ptr<env::GpuBackend> gpu;
    std::string gpu_note;
    if (!*no_gpu) gpu = env::make_gpu_backend(config, set, gpu_note);
    else gpu_note = "disabled by --no-gpu";

    // Block nothing; the handler only writes to the server's eventfd.
    env::Server server(config, std::move(set), gpu);
    server.bind();
    g_server = &server;
    struct sigaction sa{};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
    std::cerr << "d2k serve: listening on " << server.endpoint() << " with " << server.config().tasks_dir
              << "; GPUs: " << gpu_note << "; events: "
              << (server.events_endpoint().empty() ? std::string("off") : server.events_endpoint()) << "\n"
              << std::flush;
    server.run();
    g_server = nullptr;
    std::cerr << "d2k serve: stopped cleanly\n";
    return 0;
  };
  cmd->callback([&run, body] { run = body; });
}

}  // namespace d2k::cli
