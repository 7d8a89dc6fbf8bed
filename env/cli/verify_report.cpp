#include "env/cli/verify_report.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace d2k::runner {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string us(double s) { return s > 0 ? fmt("%.1f", s * 1e6) : "—"; }

std::string cell(std::string s) {  // a Markdown table cell: no pipes, no line breaks
  for (char& c : s)
    if (c == '|') c = '/';
    else if (c == '\n' || c == '\r') c = ' ';
  return s;
}

const KernelVerdict* find_kernel(const TaskVerdict& v, const std::string& label) {
  for (const auto& k : v.kernels)
    if (k.label == label) return &k;
  return nullptr;
}

const PropertyResult* find_property(const KernelVerdict& k, const std::string& id) {
  for (const auto& p : k.properties)
    if (p.id == id) return &p;
  return nullptr;
}

std::string pass(bool b) { return b ? "PASS" : "FAIL"; }

}  // namespace

LadderStep ladder_step(const KernelVerdict& slower, const KernelVerdict& faster, double min_ratio) {
  LadderStep s;
  s.slower = slower.label;
  s.faster = faster.label;
  s.min_ratio = min_ratio;
  if (!slower.ok() || !faster.ok()) {
    s.detail = "not measurable: " + (slower.ok() ? faster.label + " " + faster.status : slower.label + " " + slower.status);
    return s;
  }
  double log_sum = 0;
  for (const auto& [w, t_slow] : slower.times) {
    const auto f = faster.times.find(w);
    if (f == faster.times.end() || !(t_slow > 0) || !(f->second > 0)) continue;
    log_sum += std::log(t_slow / f->second);
    ++s.workloads;
  }
  if (s.workloads == 0) {
    s.detail = "no workload timed for both";
    return s;
  }
  s.ratio = std::exp(log_sum / s.workloads);
  s.passed = s.ratio >= min_ratio;
  s.detail = faster.label + " is " + fmt("%.3f", s.ratio) + "× " + slower.label + " (geomean of " +
             std::to_string(s.workloads) + " workloads; need ≥ " + fmt("%.2f", min_ratio) + "×)";
  return s;
}

bool memory_bound(const tasks::Task& task) {
  for (const auto& w : task.workloads) {
    const double b = task.bytes_of(w);
    if (!(b > 0) || task.flops_of(w) / b > kMemoryBoundIntensity) return false;
  }
  return !task.workloads.empty();
}

std::vector<SolRow> speed_of_light(const tasks::Task& task, const KernelVerdict& kernel, double copy_bytes_per_s,
                                   double large_bytes, double target) {
  std::vector<SolRow> out;
  for (const auto& w : task.workloads) {
    SolRow r;
    r.workload = w.name;
    r.bytes = task.bytes_of(w);
    r.large = r.bytes >= large_bytes;
    const auto t = kernel.times.find(w.name);
    if (t != kernel.times.end() && t->second > 0) {
      r.time_s = t->second;
      r.achieved_bytes_per_s = r.bytes / r.time_s;
      if (copy_bytes_per_s > 0) r.fraction = r.achieved_bytes_per_s / copy_bytes_per_s;
    }
    if (r.large) {
      r.passed = copy_bytes_per_s > 0 && r.time_s > 0 && r.fraction >= target;
      if (!(copy_bytes_per_s > 0)) r.why = "copy bandwidth not measured";
      else if (!(r.time_s > 0)) r.why = "L3 not timed on it";
    }
    if (r.time_s > 0 && copy_bytes_per_s > 0 && r.fraction < target) {
      const double ideal_s = r.bytes / copy_bytes_per_s;
      const auto th = kernel.throttled.find(w.name);
      if (th != kernel.throttled.end() && th->second)
        r.why = "SM clock throttled while timed";
      else if (ideal_s < 20e-6)
        r.why = "short call (" + us(ideal_s) + " µs at copy speed): launch and ramp-up latency dominate";
      else if (r.bytes < 4.0 * 64 * (1 << 20))
        r.why = "working set within a few L2 sizes: the L2 flush before each sample leaves DRAM cold, ramp-up dominates";
      else
        r.why = "kernel moves data below copy speed (see its design properties)";
    }
    out.push_back(r);
  }
  return out;
}

void parse_vendor_output(const std::string& stdout_text, VendorVerdict& v) {
  std::istringstream in(stdout_text);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty() && line.front() == '{') last = line;
  if (last.empty()) {
    std::string head = stdout_text.substr(0, 300);
    for (char& c : head)
      if (c == '\n' || c == '\r') c = ' ';
    throw std::runtime_error("no JSON object line on stdout" + (head.empty() ? std::string(" (empty)") : "; it began: " + head));
  }
  nlohmann::json out;
  try {
    out = nlohmann::json::parse(last);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("malformed JSON line: ") + e.what());
  }
  if (!out.is_object() || !out.contains("workloads") || !out["workloads"].is_array())
    throw std::runtime_error("the JSON line has no \"workloads\" array");
  std::map<std::string, double> times;
  for (const auto& w : out["workloads"]) {
    if (!w.is_object() || !w.contains("name") || !w["name"].is_string() || !w.contains("median_s") ||
        !w["median_s"].is_number())
      throw std::runtime_error("a workload entry lacks a string \"name\" or a numeric \"median_s\"");
    const double t = w["median_s"].get<double>();
    if (t > 0 && std::isfinite(t)) times[w["name"].get<std::string>()] = t;
  }
  if (out.contains("vendor") && out["vendor"].is_string()) v.what += " — " + out["vendor"].get<std::string>();
  v.times = std::move(times);
}

std::vector<VendorRow> vendor_rows(const tasks::Task& task, const KernelVerdict& l3, const VendorVerdict& vendor) {
  std::vector<VendorRow> out;
  for (const auto& w : task.workloads) {
    const auto a = l3.times.find(w.name);
    const auto b = vendor.times.find(w.name);
    if (a == l3.times.end() || b == vendor.times.end() || !(a->second > 0) || !(b->second > 0)) continue;
    VendorRow r;
    r.workload = w.name;
    r.flops = task.flops_of(w);
    r.l3_s = a->second;
    r.vendor_s = b->second;
    r.fraction = r.vendor_s / r.l3_s;
    r.large = r.flops >= kLargeFlops;
    r.passed = !r.large || r.fraction >= vendor.min_fraction;
    out.push_back(r);
  }
  return out;
}

bool TaskVerdict::passed() const {
  for (const auto& c : checks)
    if (!c.passed) return false;
  return !checks.empty();
}

void derive_checks(TaskVerdict& v, const tasks::Task& task, double copy_bytes_per_s) {
  v.checks.clear();
  for (const auto& k : v.kernels) {
    bool all = k.ok() && k.correct.size() == task.workloads.size();
    std::string bad;
    for (const auto& [w, c] : k.correct)
      if (!c) bad += (bad.empty() ? "" : ", ") + w;
    all = all && bad.empty();
    v.checks.push_back({"correct: " + k.label, all,
                        k.ok() ? (bad.empty() ? "all " + std::to_string(k.correct.size()) + " workloads, every seed"
                                              : "wrong on " + bad)
                               : k.status + (k.message.empty() ? "" : ": " + k.message.substr(0, 300))});
  }
  for (const auto& s : v.ladder) v.checks.push_back({"ladder: " + s.slower + " → " + s.faster, s.passed, s.detail});

  if (v.is_memory_bound) {
    bool ok = copy_bytes_per_s > 0;
    std::string detail, short_of;
    int large = 0;
    for (const auto& r : v.sol) {
      if (!r.large) continue;
      ++large;
      if (!r.passed) {
        ok = false;
        short_of += (short_of.empty() ? "" : "; ") + r.workload + " " + fmt("%.1f", 100 * r.fraction) + "% (" + r.why + ")";
      }
    }
    if (large == 0) detail = "no workload moves ≥ 256 MiB: nothing to check";
    else if (!(copy_bytes_per_s > 0)) detail = "copy bandwidth not measured";
    else detail = short_of.empty() ? "every large workload (" + std::to_string(large) + ") ≥ " + fmt("%.0f", 100 * kSolTarget) + "% of copy bandwidth"
                                   : "short: " + short_of;
    v.checks.push_back({"speed of light: L3 ≥ 75% of copy bandwidth on large workloads", ok && large > 0, detail});
  } else {
    v.checks.push_back({"speed of light", true,
                        "not memory-bound (flops/byte > 4): compared with copy bandwidth only for information"});
  }

  if (v.vendor) {
    const VendorVerdict& vd = *v.vendor;
    const std::string name = "vendor: L3 ≥ " + fmt("%.0f", 100 * vd.min_fraction) + "% of " + vd.what +
                             " throughput on large shapes (≥ " + fmt("%.0f", kLargeFlops / 1e9) + " GFLOP)";
    if (!vd.ok()) {
      v.checks.push_back({name, false, vd.status + (vd.message.empty() ? "" : ": " + vd.message.substr(0, 300))});
    } else {
      int large = 0;
      std::string detail;
      bool ok = true;
      for (const auto& r : vd.rows) {
        if (!r.large) continue;
        ++large;
        ok = ok && r.passed;
        detail += (detail.empty() ? "" : ", ") + r.workload + " " + fmt("%.0f", 100 * r.fraction) + "%";
      }
      v.checks.push_back({name, ok && large > 0, large > 0 ? detail : "no large workload timed by both"});
    }
  }

  // Properties: present from their layer on, and new at layer k absent on the layer k−1 kernel.
  const char* labels[] = {"baseline", "L1", "L2", "L3"};
  for (int k = 1; k <= 3; ++k) {
    const KernelVerdict* cur = find_kernel(v, labels[k]);
    const KernelVerdict* prev = find_kernel(v, labels[k - 1]);
    for (const auto& p : task.properties) {
      if (p.layer > k) continue;
      const PropertyResult* r = cur ? find_property(*cur, p.id) : nullptr;
      const bool holds = r != nullptr && r->state == PropertyState::holds;
      v.checks.push_back({std::string("property on ") + labels[k] + ": " + p.id + " (L" + std::to_string(p.layer) + ") holds",
                          holds, r ? std::string(to_string(r->state)) + ": " + r->detail : "not evaluated"});
      if (p.layer != k) continue;
      const PropertyResult* q = prev ? find_property(*prev, p.id) : nullptr;
      const bool absent = q != nullptr && q->state == PropertyState::fails;
      v.checks.push_back({std::string("property new at L") + std::to_string(k) + ": " + p.id + " absent on " + labels[k - 1],
                          absent, q ? std::string(to_string(q->state)) + ": " + q->detail : "not evaluated"});
    }
  }
}

std::string render_task_markdown(const TaskVerdict& v) {
  std::ostringstream o;
  o << "## " << v.task << " — " << cell(v.title) << ": **" << pass(v.passed()) << "**\n\n";
  o << "### Times (median µs per call; every workload, several seeds checked)\n\n";
  o << "| workload | visible | bytes |";
  for (const auto& k : v.kernels) o << " " << k.label << " |";
  o << " L3 % of copy bw |\n|---|---|---:|";
  for (std::size_t i = 0; i < v.kernels.size(); ++i) o << "---:|";
  o << "---:|\n";
  for (const auto& w : v.workloads) {
    o << "| " << w << " | " << (v.visible.count(w) && v.visible.at(w) ? "yes" : "hidden") << " | "
      << fmt("%.0f", v.bytes.count(w) ? v.bytes.at(w) : 0) << " |";
    for (const auto& k : v.kernels) {
      const auto t = k.times.find(w);
      const auto c = k.correct.find(w);
      std::string s = t != k.times.end() ? us(t->second) : "—";
      if (c != k.correct.end() && !c->second) s += " (wrong)";
      o << " " << s << " |";
    }
    std::string sol = "—";
    for (const auto& r : v.sol)
      if (r.workload == w && r.fraction > 0) sol = fmt("%.1f", 100 * r.fraction) + (r.large ? "" : " (small)");
    o << " " << sol << " |\n";
  }
  o << "\n| kernel | file | status | compile s | evaluate s |\n|---|---|---|---:|---:|\n";
  for (const auto& k : v.kernels)
    o << "| " << k.label << " | " << k.file << " | " << cell(k.status + (k.message.empty() ? "" : ": " + k.message.substr(0, 200)))
      << " | " << fmt("%.1f", k.compile_s) << " | " << fmt("%.1f", k.evaluate_s) << " |\n";

  o << "\n### Ladder (each step ≥ " << fmt("%.2f", kLadderMinRatio) << "× by geometric mean)\n\n"
    << "| step | speedup | workloads | result |\n|---|---:|---:|---|\n";
  for (const auto& s : v.ladder)
    o << "| " << s.slower << " → " << s.faster << " | " << (s.workloads ? fmt("%.3f", s.ratio) + "×" : "—") << " | "
      << s.workloads << " | " << pass(s.passed) << " |\n";

  o << "\n### Speed of light (L3; achieved bytes/s over the measured copy bandwidth"
    << (v.is_memory_bound ? "" : "; task not memory-bound, for information") << ")\n\n"
    << "| workload | bytes | L3 µs | GB/s | % of copy | large | result | why short |\n|---|---:|---:|---:|---:|---|---|---|\n";
  for (const auto& r : v.sol)
    o << "| " << r.workload << " | " << fmt("%.0f", r.bytes) << " | " << us(r.time_s) << " | "
      << fmt("%.0f", r.achieved_bytes_per_s / 1e9) << " | " << fmt("%.1f", 100 * r.fraction) << " | "
      << (r.large ? "yes" : "no") << " | " << (r.large && v.is_memory_bound ? pass(r.passed) : "—") << " | "
      << cell(v.is_memory_bound ? r.why : "") << " |\n";

  if (v.vendor) {
    const VendorVerdict& vd = *v.vendor;
    o << "\n### Vendor yardstick: " << cell(vd.what) << " (`" << vd.file << "`, timed in the same run; "
      << cell(vd.status + (vd.message.empty() ? "" : ": " + vd.message.substr(0, 200))) << ")\n\n"
      << "| workload | GFLOP | L3 µs | L3 TFLOP/s | vendor µs | vendor TFLOP/s | L3 / vendor | large | result |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---|---|\n";
    for (const auto& r : vd.rows)
      o << "| " << r.workload << " | " << fmt("%.1f", r.flops / 1e9) << " | " << us(r.l3_s) << " | "
        << fmt("%.0f", r.flops / r.l3_s / 1e12) << " | " << us(r.vendor_s) << " | " << fmt("%.0f", r.flops / r.vendor_s / 1e12)
        << " | " << fmt("%.0f", 100 * r.fraction) << "% | " << (r.large ? "yes" : "no") << " | "
        << (r.large ? pass(r.passed) : "—") << " |\n";
  }

  if (!v.kernels.empty() && !v.kernels.front().properties.empty()) {
    o << "\n### Design properties (detected on each kernel's own code)\n\n| property | layer | kind |";
    for (const auto& k : v.kernels) o << " " << k.label << " |";
    o << "\n|---|---|---|";
    for (std::size_t i = 0; i < v.kernels.size(); ++i) o << "---|";
    o << "\n";
    for (const auto& p : v.kernels.front().properties) {
      o << "| " << p.id << " | L" << p.layer << " | " << p.kind << " |";
      for (const auto& k : v.kernels) {
        const PropertyResult* r = find_property(k, p.id);
        o << " " << (r ? std::string(to_string(r->state)) : "—") << " |";
      }
      o << "\n";
    }
    o << "\n<details><summary>property details</summary>\n\n";
    for (const auto& k : v.kernels)
      for (const auto& p : k.properties)
        o << "- " << k.label << " / " << p.id << ": " << to_string(p.state) << " — " << cell(p.detail) << "\n";
    o << "\n</details>\n";
  }

  o << "\n### Checks\n\n| check | result | detail |\n|---|---|---|\n";
  for (const auto& c : v.checks) o << "| " << cell(c.name) << " | " << pass(c.passed) << " | " << cell(c.detail) << " |\n";
  o << "\n";
  return o.str();
}

namespace {

// The run's table: what it ran on, how, and its result over `failed` failed task(s).
std::string render_run(const RunHeader& h, int failed) {
  std::ostringstream o;
  o << "## Run " << h.date << "\n\n"
    << "| | |\n|---|---|\n"
    << "| date | " << h.date << " |\n"
    << "| host | " << cell(h.host) << " |\n"
    << "| GPU | " << cell(h.gpu) << " |\n"
    << "| driver | " << cell(h.driver) << (h.cuda_driver.empty() ? "" : " (CUDA " + h.cuda_driver + ")") << " |\n"
    << "| toolchain | " << cell(h.toolchain) << " |\n"
    << "| cuobjdump | " << cell(h.cuobjdump) << " |\n"
    << "| copy bandwidth (D2D, read + write) | "
    << (h.copy_bytes_per_s > 0 ? fmt("%.0f", h.copy_bytes_per_s / 1e9) + " GB/s (cudaMemcpyAsync of " +
                                     fmt("%.1f", static_cast<double>(h.copy_bytes) / (1 << 30)) + " GiB, median of " +
                                     std::to_string(h.copy_samples) + ")"
                               : "not measured: " + cell(h.copy_error))
    << " |\n"
    << "| peak DRAM bandwidth (clock × bus × 2) | "
    << (h.peak_dram_bytes_per_s > 0 ? fmt("%.0f", h.peak_dram_bytes_per_s / 1e9) + " GB/s" : "unknown") << " |\n"
    << "| seeds per workload | " << h.seeds << " |\n"
    << "| command | `" << cell(h.command) << "` |\n"
    << "| result | " << (failed == 0 ? "PASS" : "FAIL (" + std::to_string(failed) + " task(s))") << " |\n\n";
  return o.str();
}

}  // namespace

std::string render_markdown(const RunHeader& h, const std::vector<TaskVerdict>& verdicts) {
  std::ostringstream o;
  int failed = 0;
  for (const auto& v : verdicts) failed += v.passed() ? 0 : 1;
  o << "# Task verification results\n\n"
    << "Written by `d2k verify-tasks` (env/cli/verify_tasks.cpp): every kernel of every task compiled by the "
       "sandboxed compiler with the task's flags and evaluated in agent-mode runners on all workloads "
       "(visible and hidden). Regenerate it on a GPU machine; do not edit by hand.\n\n";
  o << render_run(h, failed);
  for (const auto& v : verdicts) o << render_task_markdown(v);
  return o.str();
}

std::string render_task_results(const RunHeader& h, const TaskVerdict& v) {
  std::ostringstream o;
  o << "# " << v.task << ": latest verification\n\n"
    << "Written by `d2k verify-tasks` (env/cli/verify_tasks.cpp): every kernel of the task compiled by the "
       "sandboxed compiler with the task's flags and evaluated in agent-mode runners on all workloads "
       "(visible and hidden). Only the latest run is kept here; earlier runs are in git history. "
       "Regenerate it on a GPU machine (scripts/gpu-check.sh); do not edit by hand.\n\n";
  o << render_run(h, v.passed() ? 0 : 1);
  o << render_task_markdown(v);
  return o.str();
}

std::filesystem::path task_results_path(const std::filesystem::path& results_dir, const std::string& task) {
  // A task id is one folder name (the loader checks it): never a path that leaves results_dir.
  if (task.empty() || task == "." || task == ".." || task.find('/') != std::string::npos ||
      task.find('\0') != std::string::npos)
    throw std::invalid_argument("not a task id: '" + task + "'");
  return results_dir / task / "RESULTS.md";
}

std::vector<std::filesystem::path> write_task_results(const std::filesystem::path& results_dir, const RunHeader& h,
                                                      const std::vector<TaskVerdict>& verdicts) {
  std::vector<std::filesystem::path> written;
  for (const auto& v : verdicts) {
    const std::filesystem::path path = task_results_path(results_dir, v.task);
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) throw std::runtime_error("cannot create " + path.parent_path().string() + ": " + ec.message());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << render_task_results(h, v);
    out.close();
    if (!out) throw std::runtime_error("cannot write " + path.string());
    written.push_back(path);
  }
  return written;
}

}  // namespace d2k::runner
