#include "env/cli/config_flags.hpp"

#include <fstream>
#include <stdexcept>
#include <type_traits>

namespace d2k::cli {

ConfigFlags::ConfigFlags(CLI::App& cmd) {
  cmd.add_option("--config", file_,
                 "JSON config file (keys as in `hello`'s config); the flags given on the command line override it");
  env::Config::for_each_key([&](const env::ConfigKey& k, auto member_of) {
    if (k.flag.empty()) return;
    auto& value = member_of(values_);
    const std::string help(k.help);
    CLI::Option* opt = nullptr;
    if constexpr (std::is_same_v<std::remove_reference_t<decltype(value)>, bool>) {
      // --record and its negation --no-record
      opt = cmd.add_flag(std::string(k.flag) + ",!--no-" + std::string(k.flag.substr(2)), value,
                         help + (value ? " (default: on)" : " (default: off)"));
    } else {
      opt = cmd.add_option(std::string(k.flag), value, help)->capture_default_str();
    }
    flags_.emplace_back(opt, [member_of](env::Config& to, const env::Config& from) { member_of(to) = member_of(from); });
  });
}

env::Config ConfigFlags::read() const {
  env::Config config;
  if (!file_.empty()) {
    std::ifstream in(file_);
    if (!in) throw std::runtime_error("cannot read config file " + file_);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("config file " + file_ + ": " + e.what());
    }
    try {
      config = env::Config::from_json(j);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("config file " + file_ + ": " + e.what());
    }
  }
  for (const auto& [opt, copy] : flags_)
    if (opt->count() > 0) copy(config, values_);
  config.validate();
  return config;
}

env::Config ConfigFlags::load(const std::filesystem::path& default_tasks) const {
  env::Config config = read();
  if (config.tasks_dir.empty()) config.tasks_dir = default_tasks;
  config.tasks_dir = std::filesystem::absolute(config.tasks_dir);
  config.finalize();
  return config;
}

}  // namespace d2k::cli
