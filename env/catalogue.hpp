// The episode catalogue: one SQLite table indexing episodes (task, layer, label, seed, outcome,
// scores, steps, wall time, log path), written by the Recorder as episodes start and end, read by
// `d2k episodes`, `d2k report` and `d2k export`. Several servers may share one file (WAL mode).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

struct sqlite3;

namespace d2k::env {

struct EpisodeRow {
  std::string session;
  std::string task;
  std::string task_hash;
  int layer = 0;
  std::string label;                 // reset's options.label (agent/model), "" when none
  std::uint64_t seed = 0;
  double started_at = 0;             // unix seconds
  std::optional<double> ended_at;    // unset while running
  double wall_s = 0;
  std::uint32_t steps = 0;
  // "running", "correct" (submitted, correct), "incorrect" (submitted, not correct),
  // "unsubmitted" (ended without a submit).
  std::string outcome = "running";
  std::string end_reason;            // submitted, step_budget, wall_time, closed, idle_timeout, server_shutdown
  double total_reward = 0;
  std::optional<double> best_score;          // best t_expert/t over correct evaluations/submit
  std::optional<double> submit_score;        // the submitted kernel's t_expert/t (correct submits)
  std::optional<double> submit_speedup;      // the submitted kernel's t_baseline/t
  std::optional<int> properties_met;         // design properties the submitted kernel implements
  std::optional<int> properties_total;       // ... out of the layer's; unset when not measured
  std::string log_path;
  std::string log_status = "ok";     // "ok", "failed: <why>", "disabled" (options.record = false)
  std::string server_version;

  nlohmann::json to_json() const;
};

struct EpisodeFilter {
  std::optional<std::string> task, label, outcome;
  std::optional<int> layer;
  std::optional<double> since;  // started_at >= since (unix seconds)
  std::optional<std::size_t> limit;
};

// "1700000000" (unix seconds), "2025-06-01", "2025-06-01T12:30:00" (UTC), or a relative age
// "90s", "30m", "12h", "7d" (before now). Throws std::invalid_argument with the accepted forms.
double parse_since(const std::string& text, double now);

class Catalogue {
 public:
  // Opens (creating when missing) the database and its table. Throws std::runtime_error.
  explicit Catalogue(const std::filesystem::path& path);
  ~Catalogue();
  Catalogue(const Catalogue&) = delete;
  Catalogue& operator=(const Catalogue&) = delete;

  void upsert(const EpisodeRow& row);  // insert or replace by session
  void set_log_status(const std::string& session, const std::string& status);
  std::vector<EpisodeRow> query(const EpisodeFilter& filter) const;  // newest first
  std::optional<EpisodeRow> find(const std::string& session) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
};

}  // namespace d2k::env
