// The `d2k` subcommands. Each registers its options on the CLI11 app and returns the exit code.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace d2k::cli {

using Runner = std::function<int()>;

// Each adds its subcommand to `app`; `run` is set to the command's body.
void add_serve(CLI::App& app, Runner& run);
void add_tasks(CLI::App& app, Runner& run);
void add_play(CLI::App& app, Runner& run);
void add_demo(CLI::App& app, Runner& run);
void add_keys(CLI::App& app, Runner& run);
void add_calibrate(CLI::App& app, Runner& run);

// The built-in tasks: $D2K_TASKS, else the source tree's tasks/, else <exe>/../share/d2k/tasks.
std::filesystem::path default_tasks_dir();
// This executable's path (for starting `d2k serve` as a child).
std::filesystem::path self_exe();

}  // namespace d2k::cli
