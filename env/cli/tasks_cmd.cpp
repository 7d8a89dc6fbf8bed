#include <iostream>

#include <nlohmann/json.hpp>

#include "env/cli/commands.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::cli {

void add_tasks(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("tasks", "List the tasks of a tasks folder, and check them (no GPU needed)");
  auto dir = std::make_shared<std::string>();
  auto check = std::make_shared<bool>(false);
  auto as_json = std::make_shared<bool>(false);
  cmd->add_option("--tasks", *dir, "Tasks folder (default: the built-in tasks)");
  cmd->add_flag("--check", *check,
                "Run the CPU-side checks of every task (schema, files, guidance without CUDA code); "
                "exit 1 on any problem");
  cmd->add_flag("--json", *as_json, "Print JSON instead of a table");
  auto body = [=]() -> int {
    std::filesystem::path root = dir->empty() ? default_tasks_dir() : std::filesystem::path(*dir);
    tasks::TaskSet set = tasks::load_tasks(root);
    int problems = 0;
    nlohmann::json out = nlohmann::json::array();
    if (!*as_json) std::cout << "tasks in " << root.string() << "\n";
    for (const auto& t : set.tasks) {
      std::size_t hidden = t.workloads.size() - t.visible_workloads().size();
      std::vector<std::string> issues = *check ? tasks::check_task(t) : std::vector<std::string>{};
      problems += static_cast<int>(issues.size());
      if (*as_json) {
        out.push_back({{"id", t.id}, {"title", t.title}, {"category", t.category},
                       {"visible_workloads", t.visible_workloads().size()}, {"hidden_workloads", hidden},
                       {"problems", issues}});
        continue;
      }
      std::printf("  %-22s %-14s %-40s %zu visible, %zu hidden workloads%s\n", t.id.c_str(), t.category.c_str(),
                  t.title.c_str(), t.visible_workloads().size(), hidden,
                  *check ? (issues.empty() ? "  [ok]" : "  [PROBLEMS]") : "");
      for (const auto& p : issues) std::printf("      - %s\n", p.c_str());
    }
    for (const auto& e : set.errors) {
      ++problems;
      if (*as_json)
        out.push_back({{"error", e.what()}, {"file", e.file}, {"field", e.field}});
      else
        std::printf("  NOT LOADED %s: %s\n", e.file.c_str(), e.what());
    }
    if (*as_json) std::cout << out.dump(2) << "\n";
    if (*check && !*as_json)
      std::printf("%zu task(s), %d problem(s)\n", set.tasks.size(), problems);
    return (problems > 0 && (*check || !set.errors.empty())) ? 1 : 0;
  };
  cmd->callback([&run, body] { run = body; });
}

}  // namespace d2k::cli
