#include "env/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace d2k::env {

using nlohmann::json;

namespace {

std::optional<double> gmean(const std::vector<double>& v) {
  if (v.empty()) return std::nullopt;
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string fmt_opt(const char* f, const std::optional<double>& v, const char* none = "-") {
  return v ? fmt(f, *v) : std::string(none);
}

std::string pad(std::string s, std::size_t w, bool right = false) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

Report build_report(const std::vector<EpisodeRow>& rows) {
  Report r;
  struct Acc {
    int episodes = 0, correct = 0, submitted = 0;
    std::vector<double> speedups, experts, shares;
  };
  std::map<std::pair<std::string, int>, Acc> acc;
  for (const EpisodeRow& row : rows) {
    if (row.outcome == "running") {
      ++r.running_skipped;
      continue;
    }
    Acc& a = acc[{row.label, row.layer}];
    ++a.episodes;
    if (row.outcome == "correct" || row.outcome == "incorrect") ++a.submitted;
    if (row.outcome == "correct") {
      ++a.correct;
      if (row.submit_speedup && *row.submit_speedup > 0 && std::isfinite(*row.submit_speedup)) {
        a.speedups.push_back(*row.submit_speedup);
        r.points.push_back({row.label, row.task, row.layer, *row.submit_speedup});
      }
      if (row.submit_score && *row.submit_score > 0 && std::isfinite(*row.submit_score))
        a.experts.push_back(*row.submit_score);
    }
    if (row.properties_total && *row.properties_total > 0 && row.properties_met)
      a.shares.push_back(static_cast<double>(*row.properties_met) / *row.properties_total);
  }
  for (auto& [key, a] : acc) {
    LayerStats s;
    s.label = key.first;
    s.layer = key.second;
    s.episodes = a.episodes;
    s.correct = a.correct;
    s.submitted = a.submitted;
    s.correct_rate = a.episodes ? static_cast<double>(a.correct) / a.episodes : 0.0;
    s.speedup_gmean = gmean(a.speedups);
    s.speedup_n = static_cast<int>(a.speedups.size());
    s.expert_gmean = gmean(a.experts);
    s.expert_n = static_cast<int>(a.experts.size());
    if (!a.shares.empty()) {
      double sum = 0;
      for (double x : a.shares) sum += x;
      s.properties_share = sum / static_cast<double>(a.shares.size());
    }
    s.properties_n = static_cast<int>(a.shares.size());
    r.layers.push_back(s);
  }
  for (const LayerStats& s : r.layers) {
    if (s.layer == 0) continue;
    auto base = std::find_if(r.layers.begin(), r.layers.end(),
                             [&](const LayerStats& b) { return b.label == s.label && b.layer == 0; });
    if (base == r.layers.end()) continue;
    LayerDelta d;
    d.label = s.label;
    d.layer = s.layer;
    d.correct_rate_delta = s.correct_rate - base->correct_rate;
    d.correct_measured = s.submitted > 0 && base->submitted > 0;
    if (s.speedup_gmean && base->speedup_gmean) d.speedup_ratio = *s.speedup_gmean / *base->speedup_gmean;
    if (s.expert_gmean && base->expert_gmean) d.expert_ratio = *s.expert_gmean / *base->expert_gmean;
    r.deltas.push_back(d);
  }
  return r;
}

json Report::to_json() const {
  json layers_j = json::array(), deltas_j = json::array(), points_j = json::array();
  for (const auto& s : layers)
    layers_j.push_back({{"label", s.label}, {"layer", s.layer}, {"episodes", s.episodes}, {"correct", s.correct},
                        {"submitted", s.submitted}, {"correct_rate", s.correct_rate},
                        {"speedup_gmean", opt(s.speedup_gmean)},
                        {"speedup_n", s.speedup_n}, {"expert_gmean", opt(s.expert_gmean)}, {"expert_n", s.expert_n},
                        {"properties_share", opt(s.properties_share)}, {"properties_n", s.properties_n}});
  for (const auto& d : deltas)
    deltas_j.push_back({{"label", d.label}, {"layer", d.layer}, {"correct_rate_delta", d.correct_rate_delta},
                        {"correct_measured", d.correct_measured},
                        {"speedup_ratio", opt(d.speedup_ratio)}, {"expert_ratio", opt(d.expert_ratio)}});
  for (const auto& p : points)
    points_j.push_back({{"label", p.label}, {"task", p.task}, {"layer", p.layer}, {"speedup", p.speedup}});
  return {{"layers", layers_j}, {"deltas", deltas_j}, {"points", points_j}, {"running_skipped", running_skipped}};
}

std::string render_report_text(const Report& r) {
  std::ostringstream o;
  if (r.layers.empty()) {
    o << "no ended episodes match\n";
    return o.str();
  }
  std::size_t label_w = 20;  // wide enough for the longest label, and a gap
  for (const auto& s : r.layers) label_w = std::max(label_w, s.label.size() + 2);
  bool any_unevaluated = false;
  o << "D2K diagnosis: per agent (label) and guidance layer, over submitted kernels\n\n";
  o << pad("label", label_w) << pad("layer", 6) << pad("episodes", 9, true) << pad("correct", 9, true)
    << pad("speedup", 10, true) << pad("expert", 10, true) << pad("properties", 12, true) << "\n";
  for (const auto& s : r.layers) {
    std::string props = s.properties_n ? fmt("%.0f%%", 100 * *s.properties_share) + " (" +
                                             std::to_string(s.properties_n) + ")"
                                       : "unknown";
    any_unevaluated = any_unevaluated || s.submitted == 0;
    o << pad(s.label.empty() ? "(none)" : s.label, label_w) << pad("L" + std::to_string(s.layer), 6)
      << pad(std::to_string(s.episodes), 9, true)
      << pad(s.submitted ? fmt("%.0f%%", 100 * s.correct_rate) : std::string("n/a"), 9, true)
      << pad(fmt_opt("%.2fx", s.speedup_gmean), 10, true) << pad(fmt_opt("%.2f", s.expert_gmean), 10, true)
      << pad(props, 12, true) << "\n";
  }
  o << "\ncorrect: share of episodes whose submitted kernel was correct (unsubmitted count as not correct)";
  if (any_unevaluated)
    o << ";\n  n/a = no kernel of these episodes was submitted and evaluated (a server without a GPU only compiles)";
  o << "\n"
       "speedup: geometric mean of t_baseline/t over correct submits\n"
       "expert: geometric mean of t_expert/t (the layer's expert; L3's at L0) over correct submits; 1 = parity\n"
       "properties: mean share of the layer's design properties the submitted kernel implements, over the\n"
       "  episodes where they were measured (count in brackets); \"unknown\" = never measured (e.g. no GPU)\n";
  if (!r.deltas.empty()) {
    o << "\nWith guidance vs without (Lk against L0, same label)\n";
    o << pad("label", label_w) << pad("layer", 6) << pad("d correct", 11, true) << pad("x speedup", 11, true)
      << pad("x expert", 11, true) << "\n";
    for (const auto& d : r.deltas)
      o << pad(d.label.empty() ? "(none)" : d.label, label_w) << pad("L" + std::to_string(d.layer), 6)
        << pad(d.correct_measured ? fmt("%+.0f pp", 100 * d.correct_rate_delta) : std::string("n/a"), 11, true)
        << pad(fmt_opt("%.2f", d.speedup_ratio), 11, true)
        << pad(fmt_opt("%.2f", d.expert_ratio), 11, true) << "\n";
  }
  if (r.running_skipped) o << "\n" << r.running_skipped << " running episode(s) left out\n";
  return o.str();
}

namespace {

const char* kBarCorrect = "#4e79a7";  // correctness bars
const char* kBarExpert = "#f28e2b";   // fraction-of-expert bars
const char* kLayerColors[4] = {"#59a14f", "#edc948", "#b07aa1", "#e15759"};

// Grouped bars: one group per (label, layer); value in [0, vmax].
// A chart with nothing to draw says why, in the middle of its plot.
std::string empty_note(int x, int y, const std::string& text) {
  return "<text class=\"empty\" x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(y) +
         "\" font-size=\"12\" fill=\"#777\" text-anchor=\"middle\" font-family=\"sans-serif\">" + html_escape(text) +
         "</text>\n";
}

// An x-axis label, turned 35 degrees so that neighbours never overlap.
std::string slanted_label(double x, double y, const std::string& text, int font_size) {
  std::ostringstream o;
  o << "<text x=\"" << x << "\" y=\"" << y << "\" font-size=\"" << font_size << "\" text-anchor=\"end\" "
    << "transform=\"rotate(-35 " << x << " " << y << ")\" font-family=\"sans-serif\">" << html_escape(text)
    << "</text>\n";
  return o.str();
}

const char* kNothingEvaluated =
    "nothing measured: no submitted kernel was evaluated (a server without a GPU only compiles)";

std::string bar_chart(const Report& r, const std::string& title, bool expert) {
  const int w = 720, h = 300, left = 50, bottom = 100, top = 30;
  double vmax = 1.0;
  for (const auto& s : r.layers)
    if (expert && s.expert_gmean) vmax = std::max(vmax, *s.expert_gmean);
  std::ostringstream o;
  o << "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" role=\"img\" aria-label=\"" << html_escape(title) << "\">\n";
  o << "<text x=\"" << left << "\" y=\"18\" font-size=\"14\" font-family=\"sans-serif\">" << html_escape(title)
    << "</text>\n";
  const int plot_h = h - bottom - top;
  o << "<line x1=\"" << left << "\" y1=\"" << top + plot_h << "\" x2=\"" << w - 10 << "\" y2=\"" << top + plot_h
    << "\" stroke=\"#333\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    double v = vmax * i / 4;
    int y = top + plot_h - static_cast<int>(plot_h * i / 4);
    o << "<text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" font-size=\"10\" text-anchor=\"end\" "
      << "font-family=\"sans-serif\">" << (expert ? fmt("%.2f", v) : fmt("%.0f%%", 100 * v)) << "</text>\n";
  }
  std::size_t n = std::max<std::size_t>(r.layers.size(), 1);
  double slot = static_cast<double>(w - left - 20) / static_cast<double>(n);
  bool any = false;
  for (const auto& s : r.layers) any = any || (expert ? s.expert_gmean.has_value() : s.submitted > 0);
  if (!any) o << empty_note(left + (w - left) / 2, top + plot_h / 2, kNothingEvaluated);
  for (std::size_t i = 0; i < r.layers.size(); ++i) {
    const auto& s = r.layers[i];
    const bool measured = expert ? s.expert_gmean.has_value() : s.submitted > 0;
    double v = expert ? s.expert_gmean.value_or(0) : s.correct_rate;
    int bh = static_cast<int>(std::lround(plot_h * std::clamp(v / vmax, 0.0, 1.0)));
    int x = left + static_cast<int>(slot * static_cast<double>(i) + slot * 0.15);
    int bw = std::max(4, static_cast<int>(slot * 0.7));
    o << "<rect x=\"" << x << "\" y=\"" << top + plot_h - bh << "\" width=\"" << bw << "\" height=\"" << bh
      << "\" fill=\"" << (expert ? kBarExpert : kBarCorrect) << "\"><title>"
      << html_escape(s.label) << " L" << s.layer << ": "
      << (measured ? (expert ? fmt("%.3f", *s.expert_gmean) : fmt("%.1f%%", 100 * s.correct_rate))
                   : std::string("not measured"))
      << "</title></rect>\n";
    if (!measured && any)
      o << "<text x=\"" << x + bw / 2 << "\" y=\"" << top + plot_h - 4
        << "\" font-size=\"9\" fill=\"#777\" text-anchor=\"middle\" font-family=\"sans-serif\">n/a</text>\n";
    o << slanted_label(x + bw / 2.0, top + plot_h + 14, (s.label.empty() ? "(none)" : s.label.substr(0, 24)) + " L" +
                                                         std::to_string(s.layer), 10);
  }
  o << "</svg>\n";
  return o.str();
}

std::string scatter(const Report& r) {
  const int w = 720, h = 330, left = 60, bottom = 100, top = 30;
  std::vector<std::string> tasks;
  for (const auto& p : r.points)
    if (std::find(tasks.begin(), tasks.end(), p.task) == tasks.end()) tasks.push_back(p.task);
  std::sort(tasks.begin(), tasks.end());
  double lo = 0, hi = 1;  // log10 speedup range, always including 1x .. 10x
  for (const auto& p : r.points) {
    lo = std::min(lo, std::floor(std::log10(p.speedup)));
    hi = std::max(hi, std::ceil(std::log10(p.speedup)));
  }
  const int plot_h = h - bottom - top;
  auto ypos = [&](double s) { return top + plot_h - (std::log10(s) - lo) / (hi - lo) * plot_h; };
  std::ostringstream o;
  o << "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" role=\"img\" aria-label=\"speedup per task\">\n";
  o << "<text x=\"" << left << "\" y=\"18\" font-size=\"14\" font-family=\"sans-serif\">"
    << "Speedup over the baseline per task (correct submits, log scale)</text>\n";
  o << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << top + plot_h
    << "\" stroke=\"#333\"/>\n";
  for (double e = lo; e <= hi + 1e-9; e += 1) {
    double y = ypos(std::pow(10.0, e));
    o << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << w - 10 << "\" y2=\"" << y
      << "\" stroke=\"#ddd\"/><text x=\"" << left - 6 << "\" y=\"" << y + 4
      << "\" font-size=\"10\" text-anchor=\"end\" font-family=\"sans-serif\">" << fmt("%gx", std::pow(10.0, e))
      << "</text>\n";
  }
  double slot = static_cast<double>(w - left - 20) / static_cast<double>(std::max<std::size_t>(tasks.size(), 1));
  for (std::size_t i = 0; i < tasks.size(); ++i)
    o << slanted_label(left + slot * (static_cast<double>(i) + 0.5), top + plot_h + 14, tasks[i], 10);
  if (r.points.empty()) o << empty_note(left + (w - left) / 2, top + plot_h / 2, kNothingEvaluated);
  for (const auto& p : r.points) {
    auto i = static_cast<std::size_t>(std::find(tasks.begin(), tasks.end(), p.task) - tasks.begin());
    double x = left + slot * (static_cast<double>(i) + 0.2 + 0.2 * p.layer);
    o << "<circle cx=\"" << x << "\" cy=\"" << ypos(p.speedup) << "\" r=\"7\" fill=\""
      << kLayerColors[std::clamp(p.layer, 0, 3)] << "\"><title>" << html_escape(p.label) << " " << html_escape(p.task)
      << " L" << p.layer << ": " << fmt("%.2fx", p.speedup) << "</title></circle>\n";
  }
  for (int l = 0; l < 4; ++l)
    o << "<circle cx=\"" << left + 20 + 70 * l << "\" cy=\"" << h - 18 << "\" r=\"6\" fill=\"" << kLayerColors[l]
      << "\"/><text x=\"" << left + 30 + 70 * l << "\" y=\"" << h - 14
      << "\" font-size=\"11\" font-family=\"sans-serif\">L" << l << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

}  // namespace

std::string render_report_html(const Report& r, const std::string& title) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << html_escape(title)
    << "</title>\n<style>body{font-family:sans-serif;margin:16px;background:#fff;color:#222}"
       "table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;"
       "text-align:right}th{background:#f4f4f4}td:first-child{text-align:left}.charts{display:flex;"
       "flex-wrap:wrap;gap:12px}.note{color:#555;font-size:12px;max-width:900px}</style></head><body>\n";
  o << "<h1 style=\"font-size:18px;margin:4px 0\">" << html_escape(title) << "</h1>\n";
  o << "<div class=\"charts\">\n" << bar_chart(r, "Correct submits by agent and layer", false)
    << bar_chart(r, "Fraction of the layer's expert (geomean t_expert/t)", true) << scatter(r) << "</div>\n";
  o << "<h2 style=\"font-size:15px\">Per agent and layer</h2>\n<table><tr><th>label</th><th>layer</th>"
       "<th>episodes</th><th>correct</th><th>speedup (geomean)</th><th>fraction of expert</th>"
       "<th>design properties</th></tr>\n";
  for (const auto& s : r.layers)
    o << "<tr><td>" << html_escape(s.label.empty() ? "(none)" : s.label) << "</td><td>L" << s.layer << "</td><td>"
      << s.episodes << "</td><td>"
      << (s.submitted ? fmt("%.1f%%", 100 * s.correct_rate) : std::string("n/a (none evaluated)")) << "</td><td>"
      << fmt_opt("%.3fx", s.speedup_gmean) << "</td><td>" << fmt_opt("%.3f", s.expert_gmean) << "</td><td>"
      << (s.properties_n ? fmt("%.0f%%", 100 * *s.properties_share) + " of " + std::to_string(s.properties_n)
                         : std::string("unknown (not measured)"))
      << "</td></tr>\n";
  o << "</table>\n<h2 style=\"font-size:15px\">With guidance vs without (Lk against L0)</h2>\n<table><tr>"
       "<th>label</th><th>layer</th><th>&Delta; correct</th><th>speedup ratio</th><th>expert ratio</th></tr>\n";
  for (const auto& d : r.deltas)
    o << "<tr><td>" << html_escape(d.label.empty() ? "(none)" : d.label) << "</td><td>L" << d.layer << "</td><td>"
      << (d.correct_measured ? fmt("%+.1f pp", 100 * d.correct_rate_delta) : std::string("n/a")) << "</td><td>"
      << fmt_opt("%.3f", d.speedup_ratio)
      << "</td><td>" << fmt_opt("%.3f", d.expert_ratio) << "</td></tr>\n";
  o << "</table>\n<p class=\"note\">Correct: share of ended episodes whose submitted kernel was correct "
       "(unsubmitted count as not correct). Speedup and fraction of expert are geometric means over correct "
       "submits. Design properties: mean share of the layer's properties the submitted kernels implement, where "
       "measured; unknown when no evaluation measured them.";
  if (r.running_skipped) o << " " << r.running_skipped << " running episode(s) left out.";
  o << "</p>\n</body></html>\n";
  return o.str();
}

}  // namespace d2k::env
