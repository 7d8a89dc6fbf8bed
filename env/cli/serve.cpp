#include <signal.h>


#include "env/cli/commands.hpp"
#include "env/cli/config_flags.hpp"
#include "env/gpu_setup.hpp"
#include "env/log.hpp"
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
  auto flags = std::make_shared<ConfigFlags>(*cmd);
  auto strict = std::make_shared<bool>(false);
  auto no_gpu = std::make_shared<bool>(false);
  cmd->add_flag("--strict", *strict, "Refuse to start if any task folder fails to load (default: off)");
  auto no_prepare = std::make_shared<bool>(false);
  cmd->add_flag("--no-prepare", *no_prepare,
                "Do not prepare tasks in the background at start (config key prepare=false): each task's first "
                "evaluation on a GPU builds and calibrates inline (docs/pipeline.md)");
  cmd->add_flag("--no-gpu", *no_gpu, "Do not look for GPUs: a compile-only server (default: off, GPUs are used when found)");
  auto body = [=]() -> int {
    // The one finalize(): the server and the GPU backend use this config as it is.
    env::Config config = flags->load(default_tasks_dir());
    if (*no_prepare) config.prepare = false;  // no derived value depends on it
    env::set_log_level(config.log_level);  // validated by the config
    tasks::TaskSet set = tasks::load_tasks(config.tasks_dir);
    for (const auto& e : set.errors) env::log_warn("task not loaded: " + e.file + ": " + e.what());
    if (*strict && !set.errors.empty()) return 2;
    if (set.tasks.empty()) {
      env::log_error("no tasks found in " + config.tasks_dir.string());
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
    env::log_info("listening on " + server.endpoint() + " with " + server.config().tasks_dir.string() +
                  "; GPUs: " + gpu_note + "; events: " +
                  (server.events_endpoint().empty() ? std::string("off") : server.events_endpoint()));
    server.run();
    g_server = nullptr;
    env::log_info("stopped cleanly");
    return 0;
  };
  cmd->callback([&run, body] { run = body; });
}

}  // namespace d2k::cli
