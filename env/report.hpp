// The D2K diagnosis over a set of catalogued episodes: per agent (label) and per guidance layer,
// how often the submitted kernel was correct, how fast it was, how close to the layer's expert, how
// many of the layer's design properties it implements, and what each guidance layer changed against
// L0. Text tables for the terminal and one self-contained HTML page (inline SVG, no network).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "env/catalogue.hpp"

namespace d2k::env {

struct LayerStats {
  std::string label;
  int layer = 0;
  int episodes = 0;                       // ended episodes (running ones are left out)
  int correct = 0;                        // submitted and correct
  int submitted = 0;                      // submitted and evaluated (correct or not); 0 without a GPU
  double correct_rate = 0;                // correct / episodes (shown as n/a when submitted is 0)
  std::optional<double> speedup_gmean;    // geometric mean of t_baseline/t over correct submits
  int speedup_n = 0;
  std::optional<double> expert_gmean;     // geometric mean of t_expert(layer)/t over correct submits
  int expert_n = 0;
  std::optional<double> properties_share; // mean of met/total over episodes where properties were measured
  int properties_n = 0;                   // episodes with measured properties (0 = unknown)
};

struct LayerDelta {                       // layer k against L0, same label
  std::string label;
  int layer = 1;
  double correct_rate_delta = 0;          // rate(Lk) - rate(L0)
  bool correct_measured = true;           // both layers had evaluated submits (else the delta is n/a)
  std::optional<double> speedup_ratio;    // gmean speedup(Lk) / gmean speedup(L0)
  std::optional<double> expert_ratio;     // gmean fraction-of-expert(Lk) / (L0)
};

struct TaskPoint {                        // one correct submit, for the per-task scatter
  std::string label, task;
  int layer = 0;
  double speedup = 0;
};

struct Report {
  std::vector<LayerStats> layers;         // sorted by label, then layer
  std::vector<LayerDelta> deltas;
  std::vector<TaskPoint> points;
  int running_skipped = 0;
  nlohmann::json to_json() const;
};

Report build_report(const std::vector<EpisodeRow>& rows);
std::string render_report_text(const Report& report);
std::string render_report_html(const Report& report, const std::string& title);

}  // namespace d2k::env
