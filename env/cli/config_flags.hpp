// `d2k serve`'s configuration on the command line: --config FILE and one flag for every Config key
// that has one (Config::for_each_key names it). The file is read first; only the flags the user
// actually gave override it, so a flag given at its default value still wins over the file.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "env/config.hpp"

namespace d2k::cli {

class ConfigFlags {
 public:
  explicit ConfigFlags(CLI::App& cmd);  // registers the flags on cmd; cmd must outlive this
  ConfigFlags(const ConfigFlags&) = delete;
  ConfigFlags& operator=(const ConfigFlags&) = delete;

  // After parsing: the config file's keys (if --config was given), then the flags given. Throws
  // std::runtime_error for an unreadable file and std::invalid_argument for an unknown key or a
  // bad value, naming the key.
  env::Config read() const;
  // read(), an empty tasks_dir made default_tasks, tasks_dir made absolute, then finalize().
  env::Config load(const std::filesystem::path& default_tasks) const;

 private:
  std::string file_;
  env::Config values_;  // where the flags' values land; copied out only for the flags given
  std::vector<std::pair<const CLI::Option*, std::function<void(env::Config&, const env::Config&)>>> flags_;
};

}  // namespace d2k::cli
