// `d2k episodes`: query the episode catalogue; `--index LOG...` adds logs to it (e.g. the logs of
// a server that was killed before its sessions ended).
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "env/cli/recording.hpp"
#include "env/config.hpp"
#include "env/episode_log.hpp"
#include "env/recorder.hpp"

namespace d2k::cli {

using nlohmann::json;

void add_catalogue_options(CLI::App* cmd, CatalogueOptions& o) {
  cmd->add_option("--catalogue", o.catalogue, "Catalogue file (default: <state dir>/catalogue.sqlite)");
  cmd->add_option("--state-dir", o.state_dir, "The server's state dir (default as `d2k serve`)");
  cmd->add_option("--task", o.task, "Only this task id");
  cmd->add_option("--layer", o.layer, "Only this guidance layer (0-3)")->check(CLI::Range(0, 3));
  cmd->add_option("--label", o.label, "Only this agent/model label (reset's options.label)");
  cmd->add_option("--outcome", o.outcome, "Only this outcome")
      ->check(CLI::IsMember({"running", "correct", "incorrect", "unsubmitted"}));
  cmd->add_option("--since", o.since, "Started at or after: unix seconds, YYYY-MM-DD[THH:MM:SS] (UTC), or 30m/12h/7d");
  cmd->add_option("--limit", o.limit, "At most this many episodes (newest first)");
}

std::filesystem::path catalogue_path(const CatalogueOptions& o) {
  if (!o.catalogue.empty()) return o.catalogue;
  env::Config c;
  if (!o.state_dir.empty()) c.state_dir = o.state_dir;
  c.finalize();
  return c.catalogue;
}

env::EpisodeFilter make_filter(const CatalogueOptions& o) {
  env::EpisodeFilter f;
  f.task = o.task;
  f.label = o.label;
  f.outcome = o.outcome;
  f.layer = o.layer;
  f.limit = o.limit;
  if (o.since) f.since = env::parse_since(*o.since, env::unix_now());
  return f;
}

namespace {

std::string when(double t) {
  std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

// The catalogue counts a session's steps when it ends; while it runs, its log (written as it
// goes) knows how far it is: the step count of the newest observation.
std::uint32_t steps_so_far(const env::EpisodeRow& row) {
  if (row.outcome != "running" || row.log_status != "ok" || row.log_path.empty()) return row.steps;
  try {
    env::EpisodeLog log = env::read_episode_log(row.log_path);
    std::uint32_t steps = row.steps;
    for (const env::LogExchange& x : log.exchanges) {
      const json* step = nullptr;
      if (auto o = x.reply.find("observation"); o != x.reply.end() && o->is_object())
        if (auto s = o->find("step"); s != o->end() && s->is_number_unsigned()) step = &*s;
      if (step) steps = std::max(steps, step->get<std::uint32_t>());
    }
    return steps;
  } catch (const std::exception&) {
    return row.steps;  // unreadable right now (being written, removed): what the catalogue says
  }
}

std::string opt_num(const std::optional<double>& v, const char* f) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, f, *v);
  return buf;
}

}  // namespace

void add_episodes(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("episodes", "List recorded episodes from the catalogue (filters combine)");
  auto o = std::make_shared<CatalogueOptions>();
  auto as_json = std::make_shared<bool>(false);
  auto index = std::make_shared<std::vector<std::string>>();
  add_catalogue_options(cmd, *o);
  cmd->add_flag("--json", *as_json, "One JSON array of catalogue rows");
  cmd->add_option("--index", *index, "Add (or refresh) these episode logs in the catalogue first");
  cmd->callback([&run, o, as_json, index] {
    run = [o, as_json, index]() -> int {
      std::filesystem::path path = catalogue_path(*o);
      if (index->empty() && !std::filesystem::exists(path)) {
        std::cerr << "d2k episodes: no catalogue at " << path << " (no episode recorded yet?)\n";
        return 1;
      }
      env::Catalogue catalogue(path);
      int bad = 0;
      for (const std::string& file : *index) {
        try {
          env::EpisodeLog log = env::read_episode_log(file);
          catalogue.upsert(env::row_from_log(log, std::filesystem::absolute(file)));
          if (log.torn_tail)
            std::cerr << "d2k episodes: " << file << ": torn tail (" << log.torn_tail->reason << "), indexed up to it\n";
        } catch (const env::LogError& e) {
          std::cerr << "d2k episodes: " << e.what() << "\n";
          ++bad;
        }
      }
      auto rows = catalogue.query(make_filter(*o));
      for (auto& r : rows) r.steps = steps_so_far(r);
      if (*as_json) {
        json out = json::array();
        for (const auto& r : rows) out.push_back(r.to_json());
        std::cout << out.dump(2) << "\n";
        return bad ? 1 : 0;
      }
      std::printf("%-16s  %-16s %-14s %-2s %-12s %-11s %5s %8s %7s %8s  %s\n", "started (UTC)", "session", "task", "L",
                  "label", "outcome", "steps", "wall_s", "best", "speedup", "log");
      for (const auto& r : rows)
        std::printf("%-16s  %-16s %-14s %-2d %-12s %-11s %5u %8.1f %7s %8s  %s\n", when(r.started_at).c_str(),
                    r.session.substr(0, 16).c_str(), r.task.c_str(), r.layer,
                    (r.label.empty() ? "-" : r.label).c_str(), r.outcome.c_str(), r.steps, r.wall_s,
                    opt_num(r.best_score, "%.3f").c_str(), opt_num(r.submit_speedup, "%.2fx").c_str(),
                    r.log_status == "ok" ? r.log_path.c_str() : ("(" + r.log_status + ") " + r.log_path).c_str());
      std::printf("%zu episode(s)\n", rows.size());
      return bad ? 1 : 0;
    };
  });
}

}  // namespace d2k::cli
