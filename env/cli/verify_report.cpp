#include "env/cli/verify_report.hpp"

#include <algorithm>
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
  if (task.memory_bound) return *task.memory_bound;  // stated in task.json, with its reason
  for (const auto& w : task.workloads) {
    const double b = task.bytes_of(w);
    if (!(b > 0) || task.flops_of(w) / b > kMemoryBoundIntensity) return false;
  }
  return !task.workloads.empty();
}

std::vector<SolRow> speed_of_light(const tasks::Task& task, const KernelVerdict& kernel, double copy_bytes_per_s,
                                   double large_bytes, double target) {
  if (target < 0) target = task.speed_of_light_target;
  std::vector<SolRow> out;
  for (const auto& w : task.workloads) {
    SolRow r;
    r.workload = w.name;
    r.bytes = task.sol_bytes_of(w);  // the task's stated bound (bytes a design must touch) when it has one
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
  std::string line;
  std::vector<std::string> candidates;
  while (std::getline(in, line))
    if (!line.empty() && line.front() == '{') candidates.push_back(line);
  if (candidates.empty()) {
    std::string head = stdout_text.substr(0, 300);
    for (char& c : head)
      if (c == '\n' || c == '\r') c = ' ';
    throw std::runtime_error("no JSON object line on stdout" + (head.empty() ? std::string(" (empty)") : "; it began: " + head));
  }
  // The last complete object counts: a vendor.py prints one after every workload, and a run killed
  // at its deadline may leave the last one cut short.
  nlohmann::json out;
  std::string first_error;
  bool parsed = false;
  for (auto it = candidates.rbegin(); it != candidates.rend() && !parsed; ++it) {
    try {
      out = nlohmann::json::parse(*it);
      parsed = true;
      v.partial = it != candidates.rbegin();
    } catch (const std::exception& e) {
      if (first_error.empty()) first_error = e.what();
    }
  }
  if (!parsed) throw std::runtime_error("malformed JSON line: " + first_error);
  if (!out.is_object() || !out.contains("workloads") || !out["workloads"].is_array())
    throw std::runtime_error("the JSON line has no \"workloads\" array");
  std::map<std::string, double> times;
  std::map<std::string, std::string> wrong;
  bool checked = true;
  for (const auto& w : out["workloads"]) {
    if (!w.is_object() || !w.contains("name") || !w["name"].is_string() || !w.contains("median_s") ||
        !w["median_s"].is_number())
      throw std::runtime_error("a workload entry lacks a string \"name\" or a numeric \"median_s\"");
    const std::string name = w["name"].get<std::string>();
    if (!w.contains("correct")) {
      checked = false;
    } else if (!w["correct"].is_boolean()) {
      throw std::runtime_error("workload '" + name + "': \"correct\" is not a boolean");
    } else if (!w["correct"].get<bool>()) {
      wrong[name] = w.contains("detail") && w["detail"].is_string() && !w["detail"].get<std::string>().empty()
                        ? w["detail"].get<std::string>().substr(0, 300)
                        : "differs from the reference";
      continue;  // a wrong result's time is no yardstick
    }
    const double t = w["median_s"].get<double>();
    if (t > 0 && std::isfinite(t)) times[name] = t;
  }
  if (out.contains("vendor") && out["vendor"].is_string())
    v.what += (v.what.empty() ? "" : " — ") + out["vendor"].get<std::string>();
  v.times = std::move(times);
  v.wrong = std::move(wrong);
  v.checked = checked;
  if (!v.wrong.empty()) {
    v.status = "incorrect";
    v.message.clear();
    for (const auto& [w, why] : v.wrong) v.message += (v.message.empty() ? "wrong on " : "; ") + w + " (" + why + ")";
  }
}

std::vector<VendorRow> vendor_rows(const tasks::Task& task, const KernelVerdict& l3, const VendorVerdict& vendor) {
  std::vector<VendorRow> out;
  const bool by_bytes = memory_bound(task);
  for (const auto& w : task.workloads) {
    const auto a = l3.times.find(w.name);
    const auto b = vendor.times.find(w.name);
    if (a == l3.times.end() || b == vendor.times.end() || !(a->second > 0) || !(b->second > 0)) continue;
    VendorRow r;
    r.workload = w.name;
    r.flops = task.flops_of(w);
    r.bytes = task.bytes_of(w);
    r.l3_s = a->second;
    r.vendor_s = b->second;
    r.fraction = r.vendor_s / r.l3_s;
    r.large = by_bytes ? task.sol_bytes_of(w) >= kLargeBytes : r.flops >= kLargeFlops;  // large as the speed of light counts it
    r.passed = !r.large || r.fraction >= (vendor.gating ? vendor.min_fraction : kLibraryTarget);
    out.push_back(r);
  }
  return out;
}

bool TaskVerdict::passed() const {
  if (!partial.empty()) return false;
  for (const auto& c : checks)
    if (!c.passed) return false;
  return !checks.empty();
}

std::string result_word(const TaskVerdict& v) {
  if (v.partial.empty()) return pass(v.passed());
  for (const auto& c : v.checks)
    if (!c.passed) return "FAIL";
  return "PARTIAL";
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
    else detail = short_of.empty() ? "every large workload (" + std::to_string(large) + ") ≥ " + fmt("%.0f", 100 * task.speed_of_light_target) + "% of copy bandwidth"
                                   : "short: " + short_of;
    if (!task.bound_bytes.empty()) detail += " (on the task's stated bound, " + task.bound_bytes + " bytes: " + task.bound_why + ")";
    if (task.memory_bound) detail += " (memory-bound as task.json states: " + task.memory_bound_why + ")";
    v.checks.push_back({"speed of light: L3 ≥ " + fmt("%.0f", 100 * task.speed_of_light_target) +
                            "% of copy bandwidth on large workloads",
                        ok && large > 0, detail});
  } else {
    v.checks.push_back({"speed of light", true,
                        task.memory_bound ? "not memory-bound (task.json: " + task.memory_bound_why +
                                                "): compared with copy bandwidth only for information"
                                          : "not memory-bound (flops/byte > 4): compared with copy bandwidth only for information"});
  }

  if (v.vendor && v.vendor->gating) {  // a library yardstick is reported, not checked
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
    // A partial run (--kernels, --time-budget) judges only the kernels it ran; a full run has all
    // four, missing files included (status "missing").
    if (!v.partial.empty() && cur == nullptr) continue;
    for (const auto& p : task.properties) {
      if (p.layer > k) continue;
      const PropertyResult* r = cur ? find_property(*cur, p.id) : nullptr;
      // A partial run cannot judge what needs a kernel it skipped (speedup over the baseline):
      // left out (the properties table still shows "unknown"), never a pass.
      const bool unjudged = !v.partial.empty() && (r == nullptr || r->state == PropertyState::unknown);
      const bool holds = r != nullptr && r->state == PropertyState::holds;
      if (!unjudged)
        v.checks.push_back({std::string("property on ") + labels[k] + ": " + p.id + " (L" + std::to_string(p.layer) + ") holds",
                          holds, r ? std::string(to_string(r->state)) + ": " + r->detail : "not evaluated"});
      if (p.layer != k || (!v.partial.empty() && prev == nullptr)) continue;
      const PropertyResult* q = prev ? find_property(*prev, p.id) : nullptr;
      const bool absent = q != nullptr && q->state == PropertyState::fails;
      v.checks.push_back({std::string("property new at L") + std::to_string(k) + ": " + p.id + " absent on " + labels[k - 1],
                          absent, q ? std::string(to_string(q->state)) + ": " + q->detail : "not evaluated"});
    }
  }
}

std::string render_task_markdown(const TaskVerdict& v) {
  std::ostringstream o;
  o << "## " << v.task << " — " << cell(v.title) << ": **" << result_word(v) << "**\n\n";
  if (!v.partial.empty()) o << "Partial run: " << cell(v.partial) << ".\n\n";
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
    // Memory-bound tasks compare bytes moved per second, compute-bound ones FLOP/s.
    const bool mb = v.is_memory_bound;
    const double unit = mb ? 1e9 : 1e12;
    o << "\n### " << (vd.gating ? "Vendor yardstick: " : "Library yardstick: ") << cell(vd.what) << " (`" << vd.file
      << "`, timed in the same run; "
      << cell(vd.status + (vd.message.empty() ? "" : ": " + vd.message.substr(0, 200))) << ")\n\n";
    if (!vd.gating)
      o << "Information, not a check: the target is L3 ≥ " << fmt("%.1f", kLibraryTarget)
        << "× the library on the large workloads (≥ " << (mb ? "256 MiB moved" : fmt("%.0f", kLargeFlops / 1e9) + " GFLOP")
        << "); where L3 is short, the task's README says by how much and why.\n\n";
    if (!vd.checked) o << "The vendor did not report a correctness check of its output.\n\n";
    if (vd.partial) o << "The vendor's run was cut short: its last complete result line counted.\n\n";
    for (const auto& [w, why] : vd.wrong) o << "- vendor output wrong on " << w << ": " << cell(why) << "\n";
    if (!vd.wrong.empty()) o << "\n";
    o << (mb ? "| workload | MB | L3 µs | L3 GB/s | vendor µs | vendor GB/s | L3 / vendor | large | result |\n"
             : "| workload | GFLOP | L3 µs | L3 TFLOP/s | vendor µs | vendor TFLOP/s | L3 / vendor | large | result |\n")
      << "|---|---:|---:|---:|---:|---:|---:|---|---|\n";
    for (const auto& r : vd.rows) {
      const double work = mb ? r.bytes : r.flops;
      const std::string result = !r.large ? "—" : vd.gating ? pass(r.passed) : (r.passed ? "at target" : "short");
      o << "| " << r.workload << " | " << fmt("%.1f", work / (mb ? 1e6 : 1e9)) << " | " << us(r.l3_s) << " | "
        << fmt("%.0f", work / r.l3_s / unit) << " | " << us(r.vendor_s) << " | " << fmt("%.0f", work / r.vendor_s / unit)
        << " | " << (vd.gating ? fmt("%.0f", 100 * r.fraction) + "%" : fmt("%.2f", r.fraction) + "×") << " | "
        << (r.large ? "yes" : "no") << " | " << result << " |\n";
    }
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
std::string render_run(const RunHeader& h, int failed, int partial = 0) {
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
    << "| result | "
    << (failed > 0    ? "FAIL (" + std::to_string(failed) + " task(s))"
        : partial > 0 ? "PARTIAL (" + std::to_string(partial) + " task(s) not fully run; no check failed)"
                      : std::string("PASS"))
    << " |\n\n";
  return o.str();
}

}  // namespace

namespace {

std::string ratio_range(std::vector<double> xs, const char* f, const std::string& suffix) {
  std::sort(xs.begin(), xs.end());
  if (xs.empty()) return "—";
  const std::string lo = fmt(f, xs.front()), hi = fmt(f, xs.back());
  return (lo == hi ? lo : lo + "–" + hi) + suffix;
}

constexpr const char* kSuiteHeader =
    "| task | category | workloads | ladder (base → L1 → L2 → L3) | L3 vs speed of light | L3 vs library | result | run |\n"
    "|---|---|---|---|---|---|---|---|\n";

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

TaskSummary summarize(const TaskVerdict& v) {
  TaskSummary s;
  s.task = v.task;
  s.category = (v.category.empty() ? "" : v.category + ", ") + (v.is_memory_bound ? "memory-bound" : "compute-bound");
  int hidden = 0;
  for (const auto& w : v.workloads) hidden += v.visible.count(w) && v.visible.at(w) ? 0 : 1;
  s.workloads = std::to_string(v.workloads.size()) + " (" + std::to_string(hidden) + " hidden)";

  for (const auto& st : v.ladder)
    s.ladder += (s.ladder.empty() ? "" : " · ") + (st.workloads > 0 ? fmt("%.2f", st.ratio) + "×" : std::string("—"));
  if (s.ladder.empty()) s.ladder = "not run";

  // L3 against the copy bandwidth on the large workloads; the largest one when none is large.
  std::vector<double> large;
  const SolRow* largest = nullptr;
  for (const auto& r : v.sol) {
    if (!(r.fraction > 0)) continue;
    if (r.large) large.push_back(100 * r.fraction);
    if (largest == nullptr || r.bytes > largest->bytes) largest = &r;
  }
  if (!large.empty())
    s.sol = ratio_range(large, "%.0f", "% of copy bw") + " (" + std::to_string(large.size()) + " large)";
  else if (largest != nullptr)
    s.sol = fmt("%.0f", 100 * largest->fraction) + "% of copy bw (largest: " + largest->workload + ", " +
            fmt("%.0f", largest->bytes / 1e6) + " MB)";
  else
    s.sol = "not measured";
  if (!v.is_memory_bound) s.sol = "compute-bound (" + s.sol + ")";

  if (!v.vendor) {
    s.library = "no library yardstick";
  } else {
    const VendorVerdict& vd = *v.vendor;
    std::vector<double> big, all;
    const VendorRow* biggest = nullptr;
    for (const auto& r : vd.rows) {
      all.push_back(r.fraction);
      if (r.large) big.push_back(r.fraction);
      const double work = v.is_memory_bound ? r.bytes : r.flops;
      if (biggest == nullptr || work > (v.is_memory_bound ? biggest->bytes : biggest->flops)) biggest = &r;
    }
    if (!big.empty())
      s.library = ratio_range(big, "%.2f", "×") + " (" + std::to_string(big.size()) + " large)";
    else if (biggest != nullptr)
      s.library = fmt("%.2f", biggest->fraction) + "× (largest: " + biggest->workload + ")";
    else
      s.library = "not measured";
    s.library += " of " + vd.what;
    const double target = vd.gating ? vd.min_fraction : kLibraryTarget;
    const auto lowest = std::min_element(big.begin(), big.end());
    if (lowest != big.end())
      s.library += *lowest >= target ? "" : "; short of " + fmt("%.2f", target) + "×" + (vd.gating ? " (a check)" : "");
    if (!vd.ok()) s.library += "; " + vd.status + (vd.message.empty() ? "" : ": " + vd.message.substr(0, 160));
  }
  s.result = result_word(v);
  return s;
}

std::string summary_line(const TaskVerdict& v) {
  const TaskSummary s = summarize(v);
  return s.task + ": " + s.result + "; L3 vs speed of light: " + s.sol + "; L3 vs library: " + s.library;
}

std::string suite_row(const RunHeader& h, const TaskVerdict& v) {
  const TaskSummary s = summarize(v);
  return "| " + cell(s.task) + " | " + cell(s.category) + " | " + cell(s.workloads) + " | " + cell(s.ladder) + " | " +
         cell(s.sol) + " | " + cell(s.library) + " | " + cell(s.result) + " | " + cell(h.date) + " |";
}

std::string merge_suite_table(const std::string& existing, const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string before, after;
  std::vector<std::pair<std::string, std::string>> kept;  // task → row, in table order
  const auto b = existing.find(kSuiteBegin);
  if (b == std::string::npos) {
    before = existing.empty() ? "# Task suite\n" : existing;
    if (!before.empty() && before.back() != '\n') before += "\n";
    before += "\n## Suite table\n\nOne row per task: its latest `d2k verify-tasks` run (the run column), rewritten by "
              "the tool; each task's full report is `<task>/RESULTS.md`. Ratios above 1× mean L3 is faster than "
              "the library.\n\n";
  } else {
    const auto body = existing.find('\n', b);
    const auto e = existing.find(kSuiteEnd, b);
    if (body == std::string::npos || e == std::string::npos || e < body)
      throw std::runtime_error("the suite table's begin marker has no end marker after it");
    before = existing.substr(0, b);
    const auto end_of_end = existing.find('\n', e);
    after = end_of_end == std::string::npos ? "\n" : existing.substr(end_of_end);
    std::istringstream in(existing.substr(body + 1, e - body - 1));
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("| ", 0) != 0 || line.rfind("| task |", 0) == 0) continue;
      const auto bar = line.find('|', 2);
      if (bar == std::string::npos) continue;
      kept.emplace_back(trim(line.substr(2, bar - 2)), line);
    }
  }
  for (const auto& [task, row] : rows) {
    auto it = std::find_if(kept.begin(), kept.end(), [&](const auto& k) { return k.first == task; });
    if (it != kept.end()) it->second = row;
    else kept.emplace_back(task, row);
  }
  std::string out = before + kSuiteBegin + "\n" + kSuiteHeader;
  for (const auto& [task, row] : kept) out += row + "\n";
  out += kSuiteEnd;
  out += after.empty() ? "\n" : after;
  return out;
}

std::filesystem::path write_suite_table(const std::filesystem::path& results_dir, const RunHeader& h,
                                        const std::vector<TaskVerdict>& verdicts) {
  const std::filesystem::path path = results_dir / "RESULTS.md";
  std::string existing;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in) throw std::runtime_error("cannot read " + path.string());
    existing = ss.str();
  }
  std::vector<std::pair<std::string, std::string>> rows;
  for (const auto& v : verdicts) rows.emplace_back(v.task, suite_row(h, v));
  std::string text;
  try {
    text = merge_suite_table(existing, rows);
  } catch (const std::exception& e) {
    throw std::runtime_error(path.string() + ": " + e.what());
  }
  std::filesystem::create_directories(results_dir, ec);
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw std::runtime_error("cannot write " + tmp.string());
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error("cannot replace " + path.string() + ": " + ec.message());
  return path;
}

std::string render_markdown(const RunHeader& h, const std::vector<TaskVerdict>& verdicts) {
  std::ostringstream o;
  int failed = 0, partial = 0;
  for (const auto& v : verdicts) {
    const std::string r = result_word(v);
    failed += r == "FAIL" ? 1 : 0;
    partial += r == "PARTIAL" ? 1 : 0;
  }
  o << "# Task verification results\n\n"
    << "Written by `d2k verify-tasks` (env/cli/verify_tasks.cpp): every kernel of every task compiled by the "
       "sandboxed compiler with the task's flags and evaluated in agent-mode runners on all workloads "
       "(visible and hidden). Regenerate it on a GPU machine; do not edit by hand.\n\n";
  o << render_run(h, failed, partial);
  o << "## Suite table\n\n" << kSuiteHeader;
  for (const auto& v : verdicts) o << suite_row(h, v) << "\n";
  o << "\n";
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
  o << render_run(h, result_word(v) == "FAIL" ? 1 : 0, result_word(v) == "PARTIAL" ? 1 : 0);
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
