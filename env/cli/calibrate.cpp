// `d2k calibrate`: prepares tasks on this machine's GPUs ahead of `d2k serve` (issue 15 item 3):
// the same preparation the server runs in the background at start (trusted builds, calibration of
// baseline and experts), persisted in the same state dir, so a server started afterwards is ready
// at once. Takes the server's configuration flags (--state-dir above all).
#include <iostream>
#include <set>

#include "env/cli/commands.hpp"
#include "env/cli/config_flags.hpp"
#include "env/gpu_setup.hpp"
#include "env/log.hpp"
#include "env/prepare.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::cli {

void add_calibrate(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand(
      "calibrate",
      "Prepare tasks on every GPU ahead of `d2k serve`: trusted builds and calibration, persisted in the state dir");
  auto flags = std::make_shared<ConfigFlags>(*cmd);
  auto only = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--task", *only, "Only these tasks (repeatable; default: every task)");
  auto body = [=]() -> int {
    const env::Config config = flags->load(default_tasks_dir());
    env::set_log_level(config.log_level);
    tasks::TaskSet set = tasks::load_tasks(config.tasks_dir);
    for (const auto& e : set.errors) env::log_warn("task not loaded: " + e.file + ": " + e.what());
    std::vector<const tasks::Task*> chosen;
    const std::set<std::string> wanted(only->begin(), only->end());
    for (const auto& t : set.tasks)
      if (wanted.empty() || wanted.count(t.id)) chosen.push_back(&t);
    for (const auto& w : wanted)
      if (!set.find(w)) {
        std::cerr << "d2k calibrate: no task '" << w << "' in " << config.tasks_dir.string() << "\n";
        return 2;
      }
    if (chosen.empty()) {
      std::cerr << "d2k calibrate: no tasks found in " << config.tasks_dir.string() << "\n";
      return 2;
    }
    std::string note;
    auto gpu = env::make_gpu_backend(config, set, note);
    if (!gpu) {
      std::cerr << "d2k calibrate: no GPU to calibrate on: " << note << "\n";
      return 2;
    }
    const std::size_t gpus = gpu->gpus().size();
    std::cout << "preparing " << chosen.size() << " task(s) on " << note << " (state dir "
              << config.state_dir.string() << ")" << std::endl;
    env::Preparation prep(gpu, chosen, gpus, [](const std::string& line) { std::cout << line << std::endl; });
    prep.start();
    while (!prep.wait_done(std::chrono::hours(1))) {
    }
    int failed = 0;
    for (std::size_t i = 0; i < gpus; ++i) {
      const auto p = prep.progress(static_cast<int>(i));
      std::cout << "GPU " << i << ": " << p["ready"].get<std::size_t>() << "/" << p["tasks"].get<std::size_t>()
                << " ready in " << p["seconds"].get<double>() << " s" << std::endl;
      for (const auto& [task, why] : p["errors"].items()) {
        std::cout << "  " << task << " failed: " << why.get<std::string>() << std::endl;
        ++failed;
      }
    }
    prep.stop();
    return failed ? 1 : 0;
  };
  cmd->callback([&run, body] { run = body; });
}

}  // namespace d2k::cli
