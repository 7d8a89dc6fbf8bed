// `d2k export --jsonl OUT`: episodes as training data, one JSON record per step (docs/export.md).
#include <fstream>
#include <iostream>

#include "env/cli/recording.hpp"
#include "env/episode_log.hpp"
#include "env/recorder.hpp"

namespace d2k::cli {

using nlohmann::json;

namespace {

// Writes one line per step of `log`; returns the number of lines.
std::size_t export_log(const env::EpisodeLog& log, const std::filesystem::path& path, std::ostream& out,
                       bool with_next) {
  env::EpisodeRow row = env::row_from_log(log, path);
  const json& h = log.header;
  json episode = {{"session", row.session},
                  {"task", row.task},
                  {"task_hash", row.task_hash},
                  {"layer", row.layer},
                  {"label", row.label},
                  {"seed", row.seed},
                  {"outcome", row.outcome},
                  {"end_reason", row.end_reason},
                  {"steps", row.steps},
                  {"total_reward", row.total_reward},
                  {"best_score", row.best_score ? json(*row.best_score) : json(nullptr)},
                  {"server_version", row.server_version},
                  {"protocol", h.value("protocol", json())},
                  {"reward_config", h.contains("server") && h["server"].is_object() && h["server"].contains("config") &&
                                            h["server"]["config"].is_object()
                                        ? h["server"]["config"].value("reward", json())
                                        : json()},
                  {"complete", log.end.has_value() && !log.torn_tail},
                  {"log", path.string()}};
  json observation;  // what the agent saw before each action
  std::size_t lines = 0;
  for (const env::LogExchange& x : log.exchanges) {
    if (!x.reply.is_object() || !x.reply.value("ok", false)) continue;  // refused requests change nothing
    std::string op = x.request.value("op", "");
    if (op == "step") {
      json rec = {{"episode", episode},
                  {"step", x.reply["observation"].value("step", 0)},
                  {"observation", observation},
                  {"action", x.request.value("action", json())},
                  {"reward", x.reply.value("reward", 0.0)},
                  {"terminated", x.reply.value("terminated", false)},
                  {"truncated", x.reply.value("truncated", false)},
                  {"result", x.reply["observation"].value("last", json())},
                  {"info", x.reply.value("info", json())},
                  {"t", x.t_reply - x.t_request}};
      if (with_next) rec["next_observation"] = x.reply["observation"];
      out << rec.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
      ++lines;
    }
    if (x.reply.contains("observation")) observation = x.reply["observation"];
  }
  return lines;
}

}  // namespace

void add_export(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("export", "Write episodes as training data: JSONL, one record per step");
  auto o = std::make_shared<CatalogueOptions>();
  auto out_path = std::make_shared<std::string>();
  auto logs = std::make_shared<std::vector<std::string>>();
  auto with_next = std::make_shared<bool>(false);
  cmd->add_option("--jsonl", *out_path, "Output file ('-' = stdout)")->required();
  cmd->add_option("--logs", *logs, "Export these episode logs instead of the catalogue's episodes");
  cmd->add_flag("--with-next", *with_next, "Add each step's next_observation (larger files)");
  add_catalogue_options(cmd, *o);
  cmd->callback([&run, o, out_path, logs, with_next] {
    run = [o, out_path, logs, with_next]() -> int {
      std::vector<std::filesystem::path> files(logs->begin(), logs->end());
      if (files.empty()) {
        std::filesystem::path path = catalogue_path(*o);
        if (!std::filesystem::exists(path)) {
          std::cerr << "d2k export: no catalogue at " << path << "\n";
          return 1;
        }
        env::Catalogue catalogue(path);
        for (const auto& r : catalogue.query(make_filter(*o))) {
          if (r.outcome == "running") continue;
          if (r.log_path.empty()) {
            std::cerr << "d2k export: episode " << r.session << " has no log (" << r.log_status << "); skipped\n";
            continue;
          }
          files.emplace_back(r.log_path);
        }
      }
      std::ofstream file;
      if (*out_path != "-") {
        file.open(*out_path, std::ios::binary | std::ios::trunc);
        if (!file) {
          std::cerr << "d2k export: cannot write " << *out_path << "\n";
          return 1;
        }
      }
      std::ostream& out = *out_path == "-" ? std::cout : file;
      std::size_t lines = 0, episodes = 0;
      int bad = 0;
      for (const auto& f : files) {
        try {
          env::EpisodeLog log = env::read_episode_log(f);
          if (log.torn_tail) std::cerr << "d2k export: " << f << ": torn tail (" << log.torn_tail->reason << "); exported up to it\n";
          lines += export_log(log, f, out, *with_next);
          ++episodes;
        } catch (const env::LogError& e) {
          std::cerr << "d2k export: " << e.what() << "; skipped\n";
          ++bad;
        }
      }
      out.flush();
      if (!out.good()) {
        std::cerr << "d2k export: write failed\n";
        return 1;
      }
      std::cerr << "d2k export: " << lines << " step(s) from " << episodes << " episode(s)\n";
      return bad ? 1 : 0;
    };
  });
}

}  // namespace d2k::cli
