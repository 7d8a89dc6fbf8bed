#include "sandbox/tools/gpu_tool.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "sandbox/eval/evaluator.hpp"
#include "sandbox/eval/runner_process.hpp"
#include "sandbox/runner/tool_host.hpp"
#include "sandbox/seccomp.hpp"
#include "sandbox/tools/text.hpp"

namespace d2k::tools {
namespace {

using nlohmann::json;

using text::for_each_line;
using text::trim;

std::string read_capped(const std::filesystem::path& p, std::size_t cap) {
  std::ifstream in(p, std::ios::binary);
  std::string s(cap, '\0');
  in.read(s.data(), static_cast<std::streamsize>(cap));
  s.resize(static_cast<std::size_t>(std::max<std::streamsize>(0, in.gcount())));
  return s;
}

// Scale of a unit of `ncu --print-units base` (and the prefixed and short ones, should a version
// print them); nullopt for a unit not listed (percentages, counts: taken as they are).
std::optional<double> unit_scale(std::string_view unit) {
  static const std::map<std::string, double, std::less<>> k = {
      {"nsecond", 1e-9}, {"usecond", 1e-6}, {"msecond", 1e-3}, {"second", 1},    {"ns", 1e-9},
      {"us", 1e-6},      {"ms", 1e-3},      {"s", 1},          {"byte", 1},      {"B", 1},
      {"Kbyte", 1e3},    {"Mbyte", 1e6},    {"Gbyte", 1e9},    {"Tbyte", 1e12},  {"KB", 1024},
      {"MB", 1048576},   {"GB", 1073741824}};
  auto it = k.find(unit);
  if (it == k.end()) return std::nullopt;
  return it->second;
}

}  // namespace

// ---- Nsight Compute ----------------------------------------------------------------------------

std::vector<std::string> validate_sections(const std::vector<std::string>& sections) {
  std::vector<std::string> out;
  for (const auto& s : sections) {
    bool known = false;
    for (const auto& p : kProfileSections) known = known || p.name == s;
    if (!known) {
      std::string list;
      for (const auto& p : kProfileSections) list += (list.empty() ? "" : ", ") + std::string(p.name);
      throw std::invalid_argument("unknown profile section '" + s.substr(0, 64) + "'; the sections are " + list);
    }
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

std::vector<std::string> ncu_arguments(const std::vector<std::string>& sections, const std::string& log_file,
                                       int launch_count) {
  std::vector<std::string> a = {"--target-processes", "application-only",
                                "--clock-control",    "none",  // the card as it is (GPU-MACHINE.md)
                                "--cache-control",    "all",
                                "--replay-mode",      "kernel",
                                "--kernel-name-base", "demangled",
                                "--launch-count",     std::to_string(launch_count),
                                // only the agent's kernels: the runner brackets its calls (tool_host.hpp)
                                "--nvtx",             "--nvtx-include", std::string(runner::kAgentNvtxRange) + "/",
                                "--print-units",      "base",
                                "--csv",              "--page", "raw",
                                "--log-file",         log_file};
  for (const auto& p : kProfileSections)
    if (sections.empty() || std::find(sections.begin(), sections.end(), p.name) != sections.end()) {
      a.push_back("--section");
      a.push_back(std::string(p.ncu));
    }
  a.push_back("--metrics");
  a.push_back("gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum");
  return a;
}

std::vector<std::string> split_csv_line(std::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur.push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur.push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(std::move(cur));
  return out;
}

std::optional<double> parse_ncu_number(std::string_view s) {
  s = trim(s);
  std::string digits;
  for (char c : s)
    if (c != ',') digits.push_back(c);
  if (digits.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(digits.c_str(), &end);
  if (end == digits.c_str() || *end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

NcuTable parse_ncu_csv(std::string_view text) {
  NcuTable t;
  for_each_line(text, [&](std::string_view line) {
    const std::string_view s = trim(line);
    if (s.empty()) return;
    if (s.rfind("==", 0) == 0) {
      if (t.messages.size() < 50) t.messages.emplace_back(s.substr(0, 500));
      return;
    }
    if (s.front() != '"') return;
    auto fields = split_csv_line(s);
    if (t.columns.empty()) {
      if (fields.empty() || fields[0] != "ID") return;
      t.columns = std::move(fields);
      return;
    }
    if (t.units.empty() && !fields.empty() && fields[0].empty()) {
      t.units = std::move(fields);
      return;
    }
    if (fields.size() == t.columns.size()) t.rows.push_back(std::move(fields));
  });
  return t;
}

namespace {

struct Row {
  const NcuTable& t;
  const std::vector<std::string>& r;
  std::optional<double> num(std::string_view col) const {
    for (std::size_t i = 0; i < t.columns.size(); ++i)
      if (t.columns[i] == col) {
        auto v = parse_ncu_number(r[i]);
        if (!v) return v;
        if (auto scale = unit_scale(i < t.units.size() ? t.units[i] : std::string_view())) {
          *v *= *scale;
        } else if (col.rfind("gpu__time_duration", 0) == 0) {
          // No unit row, or a unit name not listed: under --print-units base a duration is in its
          // base unit, nanoseconds (the H200, 2026-12-02: 5,090 for a 5 µs kernel came back as seconds).
          *v *= 1e-9;
        }
        return v;
      }
    return std::nullopt;
  }
  std::optional<double> first(std::initializer_list<std::string_view> cols) const {
    for (auto c : cols)
      if (auto v = num(c)) return v;
    return std::nullopt;
  }
  std::string text(std::string_view col) const {
    for (std::size_t i = 0; i < t.columns.size(); ++i)
      if (t.columns[i] == col) return r[i];
    return {};
  }
  // Every column whose name matches `re`, by its first capture group.
  std::vector<std::pair<std::string, double>> matching(const std::regex& re) const {
    std::vector<std::pair<std::string, double>> out;
    std::smatch m;
    for (std::size_t i = 0; i < t.columns.size(); ++i)
      if (std::regex_match(t.columns[i], m, re))
        if (auto v = parse_ncu_number(r[i])) out.emplace_back(m[1].str(), *v);
    return out;
  }
};

void put(json& j, const char* key, std::optional<double> v) {
  if (v) j[key] = *v;
}

bool wanted(const std::vector<std::string>& sections, std::string_view s) {
  return sections.empty() || std::find(sections.begin(), sections.end(), s) != sections.end();
}

std::vector<std::pair<std::string, double>> top(std::vector<std::pair<std::string, double>> v, std::size_t n) {
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (v.size() > n) v.resize(n);
  return v;
}

}  // namespace

json curate_profile(const NcuTable& table, const ProfileContext& ctx) {
  static const std::regex pipe_re(R"(^sm__(?:inst_executed_)?pipe_([a-z0-9_]+?)(?:_cycles_active)?\.avg\.pct_of_peak_sustained_active$)");
  static const std::regex stall_re(R"(^smsp__average_warps?_(?:issue_stalled|latency_issue_stalled)_([a-z0-9_]+?)(?:_per_issue_active)?\.ratio$)");
  json launches = json::array();
  std::size_t total = 0;
  double call_s = 0, call_bytes = 0;
  bool have_bytes = false;
  for (const auto& r : table.rows) {
    const Row row{table, r};
    const std::string kernel = row.text("Kernel Name");
    if (kernel.find("d2k::runner::") != std::string::npos) continue;  // the runner's input generation
    ++total;
    const auto dur = row.num("gpu__time_duration.sum");
    const auto rd = row.num("dram__bytes_read.sum");
    const auto wr = row.num("dram__bytes_write.sum");
    if (dur) call_s += *dur;
    if (rd || wr) {
      have_bytes = true;
      call_bytes += rd.value_or(0) + wr.value_or(0);
    }
    if (launches.size() >= ctx.max_launches) continue;
    json l = {{"kernel", kernel.substr(0, 512)}, {"grid", row.text("Grid Size")}, {"block", row.text("Block Size")}};
    put(l, "duration_s", dur);
    if (wanted(ctx.sections, "speed_of_light")) {
      json s = json::object();
      put(s, "sm_pct", row.num("sm__throughput.avg.pct_of_peak_sustained_elapsed"));
      put(s, "memory_pct", row.num("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"));
      put(s, "dram_pct", row.first({"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                                    "dram__throughput.avg.pct_of_peak_sustained_elapsed"}));
      put(s, "l2_pct", row.num("lts__throughput.avg.pct_of_peak_sustained_elapsed"));
      put(s, "l1_pct", row.num("l1tex__throughput.avg.pct_of_peak_sustained_active"));
      l["speed_of_light"] = s;
    }
    if (wanted(ctx.sections, "memory")) {
      json m = json::object();
      put(m, "l1_hit_pct", row.num("l1tex__t_sector_hit_rate.pct"));
      put(m, "l2_hit_pct", row.num("lts__t_sector_hit_rate.pct"));
      put(m, "dram_read_bytes", rd);
      put(m, "dram_write_bytes", wr);
      l["memory"] = m;
    }
    if (wanted(ctx.sections, "compute")) {
      json c = json::object();
      const auto pipes = row.matching(pipe_re);
      double tensor = -1;
      for (const auto& [name, v] : pipes)
        if (name.find("tensor") != std::string::npos) tensor = std::max(tensor, v);
      if (tensor >= 0) c["tensor_pipe_pct"] = tensor;
      json tp = json::object();
      for (const auto& [name, v] : top(pipes, 5)) tp[name] = v;
      c["top_pipes_pct"] = tp;
      l["compute"] = c;
    }
    if (wanted(ctx.sections, "occupancy")) {
      json o = json::object();
      put(o, "achieved_pct", row.num("sm__warps_active.avg.pct_of_peak_sustained_active"));
      put(o, "theoretical_pct", row.num("sm__maximum_warps_per_active_cycle_pct"));
      // Blocks per SM each resource allows; the smallest is the limiter.
      const std::pair<const char*, const char*> limits[] = {{"registers", "launch__occupancy_limit_registers"},
                                                            {"shared_memory", "launch__occupancy_limit_shared_mem"},
                                                            {"blocks", "launch__occupancy_limit_blocks"},
                                                            {"warps", "launch__occupancy_limit_warps"}};
      json blocks = json::object();
      std::optional<double> least;
      for (const auto& [name, col] : limits)
        if (auto v = row.num(col)) {
          blocks[name] = *v;
          least = least ? std::min(*least, *v) : *v;
        }
      if (least) {
        json limiter = json::array();
        for (const auto& [name, v] : blocks.items())
          if (v.get<double>() == *least) limiter.push_back(name);
        o["blocks_per_sm_limit"] = blocks;
        o["limiter"] = limiter;
      }
      l["occupancy"] = o;
    }
    if (wanted(ctx.sections, "launch")) {
      json la = json::object();
      put(la, "registers_per_thread", row.num("launch__registers_per_thread"));
      put(la, "static_shared_bytes", row.num("launch__shared_mem_per_block_static"));
      put(la, "dynamic_shared_bytes", row.num("launch__shared_mem_per_block_dynamic"));
      put(la, "waves_per_sm", row.num("launch__waves_per_multiprocessor"));
      put(la, "grid_size", row.num("launch__grid_size"));
      put(la, "block_size", row.num("launch__block_size"));
      l["launch"] = la;
    }
    if (wanted(ctx.sections, "warp_stalls")) {
      json st = json::array();
      for (const auto& [name, v] : top(row.matching(stall_re), 5))
        st.push_back({{"reason", name}, {"cycles_per_issue", v}});
      l["warp_stalls"] = st;
    }
    launches.push_back(std::move(l));
  }
  json call = json::object();
  if (call_s > 0) call["duration_s"] = call_s;
  if (ctx.task_bytes > 0) call["task_bytes"] = ctx.task_bytes;
  if (have_bytes) {
    call["dram_bytes"] = call_bytes;
    if (ctx.task_bytes > 0) call["bytes_vs_task"] = call_bytes / ctx.task_bytes;
  }
  if (call_s > 0 && ctx.task_bytes > 0) call["task_bytes_per_s"] = ctx.task_bytes / call_s;
  if (call_s > 0 && ctx.task_flops > 0) call["task_flops_per_s"] = ctx.task_flops / call_s;
  return {{"launches", launches},
          {"launches_total", total},
          {"truncated", total > launches.size()},
          {"call", call},
          {"note", "durations are under the profiler (caches flushed per replay, clocks as the card runs them); "
                   "compare them with each other, not with evaluate's times"}};
}

// ---- compute-sanitizer -------------------------------------------------------------------------

bool is_sanitizer_tool(std::string_view tool) {
  for (auto t : kSanitizerTools)
    if (t == tool) return true;
  return false;
}

std::vector<std::string> sanitizer_arguments(const std::string& tool, const std::string& log_file, int print_limit) {
  return {"--tool",        tool,
          "--target-processes", "application-only",
          "--print-limit", std::to_string(print_limit),
          "--show-backtrace", "no",
          "--log-file",    log_file};
}

namespace {

// "kernels.cu:57" → workspace-relative file (the part after "/job/" when the path shows the
// compile jail's folder, else the base name: no server path reaches the agent) and line.
void set_place(Finding& f, std::string path, const std::string& line) {
  if (const auto j = path.rfind("/job/"); j != std::string::npos) path = path.substr(j + 5);
  else if (const auto slash = path.rfind('/'); slash != std::string::npos) path = path.substr(slash + 1);
  f.file = path.substr(0, 256);
  f.line = std::atoi(line.c_str());
}

// One "at ..." location, in any of the formats compute-sanitizer versions print.
void parse_location(Finding& f, const std::string& at) {
  static const std::regex pc_file_line_fn(R"(^0x[0-9a-fA-F]+ in (.+?):(\d+):(.+)$)");
  static const std::regex fn_pc_file_line(R"(^(.+)\+0x[0-9a-fA-F]+ in (.+?):(\d+)$)");
  static const std::regex fn_pc(R"(^(.+)\+0x[0-9a-fA-F]+$)");
  static const std::regex pc_fn(R"(^0x[0-9a-fA-F]+ in (.+)$)");
  std::smatch m;
  if (std::regex_match(at, m, pc_file_line_fn)) {
    set_place(f, m[1].str(), m[2].str());
    f.kernel = m[3].str();
  } else if (std::regex_match(at, m, fn_pc_file_line)) {
    f.kernel = m[1].str();
    set_place(f, m[2].str(), m[3].str());
  } else if (std::regex_match(at, m, fn_pc)) {
    f.kernel = m[1].str();
  } else if (std::regex_match(at, m, pc_fn)) {
    f.kernel = m[1].str();
  } else {
    f.kernel = at;
  }
  if (f.kernel.size() > 512) f.kernel.resize(512);
}

std::string space_name(const std::string& s) {  // "__global__" → "global"
  std::string out = s;
  while (!out.empty() && out.front() == '_') out.erase(out.begin());
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

Finding parse_record(const std::vector<std::string>& lines) {
  static const std::regex invalid(R"(^Invalid (__\w+__) (read|write|atomic) of size (\d+))");
  static const std::regex uninit(R"(^Uninitialized (__\w+__) memory (read|write) of size (\d+))");
  static const std::regex race(R"(^(?:Error|ERROR|Warning|WARN|WARNING): Race reported between (\w+) access at (.+?)(?: \[.*\])?$)");
  static const std::regex race_and(R"(^and (\w+) access at (.+?)(?: \[.*\])?$)");
  static const std::regex api(R"(^Program hit (.+) on CUDA API call to (\S+))");
  static const std::regex thread(R"(^by thread \(([0-9, ]+)\) in block \(([0-9, ]+)\))");
  static const std::regex addr(R"(^(?:Address|Access to) (0x[0-9a-fA-F]+) is (.+)$)");
  Finding f;
  f.message = lines.front().substr(0, 300);
  std::smatch m;
  const std::string& head = lines.front();
  if (std::regex_search(head, m, invalid)) {
    f.kind = "invalid_access";
    f.address_space = space_name(m[1].str());
    f.access = m[2].str();
    f.size = std::atoi(m[3].str().c_str());
  } else if (std::regex_search(head, m, uninit)) {
    f.kind = "uninitialized_access";
    f.address_space = space_name(m[1].str());
    f.access = m[2].str();
    f.size = std::atoi(m[3].str().c_str());
  } else if (std::regex_search(head, m, race)) {
    f.kind = "race";
    f.address_space = "shared";
    f.access = m[1].str();
    parse_location(f, m[2].str());
  } else if (head.find("Barrier error") != std::string::npos || head.find("barrier") != std::string::npos) {
    f.kind = "barrier_error";
  } else if (std::regex_search(head, m, api)) {
    f.kind = "api_error";
    f.detail = m[1].str().substr(0, 200) + " on " + m[2].str();
  } else if (head.find("Leaked") != std::string::npos || head.find("leaked") != std::string::npos) {
    f.kind = "leak";
  } else if (head.find("Illegal") != std::string::npos || head.find("Out-of-range") != std::string::npos ||
             head.find("Misaligned") != std::string::npos || head.find("exception") != std::string::npos) {
    f.kind = "hardware_exception";
  } else {
    f.kind = "other";
  }
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.rfind("at ", 0) == 0 && f.kernel.empty()) {
      parse_location(f, l.substr(3));
    } else if (std::regex_search(l, m, race_and)) {
      f.access += "/" + m[1].str();
    } else if (std::regex_search(l, m, thread)) {
      f.thread = "(" + m[1].str() + ")";
      f.block = "(" + m[2].str() + ")";
    } else if (std::regex_search(l, m, addr)) {
      f.address = m[1].str() + " (" + m[2].str().substr(0, 100) + ")";
    } else if (l.rfind("and is ", 0) == 0) {
      f.detail = l.substr(7, 200);
    } else if (l.rfind("at 0x", 0) == 0 && !f.detail.empty() && f.detail.find(" of size") == std::string::npos) {
      f.detail += " " + l.substr(0, 100);  // the allocation's address on its own line
    } else if (l.rfind("of size ", 0) == 0 && !f.detail.empty()) {
      f.detail += " " + l.substr(0, 60);
    }
  }
  return f;
}

}  // namespace

SanitizerReport parse_sanitizer(std::string_view text) {
  static const std::regex summary(R"(ERROR SUMMARY: ([0-9,]+) errors?)");
  SanitizerReport rep;
  std::vector<std::vector<std::string>> records;
  bool in_backtrace = false;
  for_each_line(text, [&](std::string_view raw) {
    if (raw.rfind("=========", 0) != 0) return;  // the runner's own output, not the tool's
    std::string_view body = raw.substr(9);
    const bool indented = body.size() >= 2 && body[0] == ' ' && body[1] == ' ';
    const std::string line(trim(body));
    if (line.empty()) {
      in_backtrace = false;
      return;
    }
    std::smatch m;
    if (std::regex_search(line, m, summary)) {
      std::string digits;
      for (char c : m[1].str())
        if (c != ',') digits.push_back(c);
      rep.summary_errors = std::strtoull(digits.c_str(), nullptr, 10);
      return;
    }
    if (line == "COMPUTE-SANITIZER" || line.find("SUMMARY:") != std::string::npos) return;
    if (!indented) {
      in_backtrace = false;
      const bool race = line.find("Race reported") != std::string::npos;
      if (!race && (line.rfind("Target application", 0) == 0 || line.rfind("Error: ", 0) == 0 ||
                    line.rfind("Warning: ", 0) == 0 || line.rfind("WARNING", 0) == 0)) {
        if (rep.notes.size() < 10) rep.notes.push_back(line.substr(0, 300));
        return;
      }
      records.push_back({line});
      return;
    }
    if (records.empty()) return;
    if (line.rfind("Saved host backtrace", 0) == 0 || line.rfind("Host Frame", 0) == 0 || line.rfind("Device Frame", 0) == 0) {
      in_backtrace = true;
      return;
    }
    if (in_backtrace || line.rfind("#", 0) == 0) return;
    if (records.back().size() < 16) records.back().push_back(line);
  });
  rep.reported = records.size();
  std::map<std::string, std::size_t> index;
  for (const auto& r : records) {
    Finding f = parse_record(r);
    const std::string key = f.kind + "|" + f.kernel + "|" + f.file + ":" + std::to_string(f.line) + "|" + f.access +
                            "|" + f.address_space + "|" + (f.kind == "other" ? f.message : std::string());
    auto it = index.find(key);
    if (it != index.end()) {
      ++rep.findings[it->second].count;
      continue;
    }
    index.emplace(key, rep.findings.size());
    rep.findings.push_back(std::move(f));
  }
  return rep;
}

json sanitizer_to_json(const SanitizerReport& report, const std::string& tool, std::size_t max_findings) {
  json findings = json::array();
  for (const auto& f : report.findings) {
    if (findings.size() >= max_findings) break;
    json j = {{"kind", f.kind}, {"message", f.message}, {"count", f.count}};
    if (!f.kernel.empty()) j["kernel"] = f.kernel;
    if (!f.file.empty()) j["file"] = f.file;
    if (f.line > 0) j["line"] = f.line;
    if (!f.access.empty()) j["access"] = f.access;
    if (!f.address_space.empty()) j["address_space"] = f.address_space;
    if (f.size > 0) j["size"] = f.size;
    if (!f.address.empty()) j["address"] = f.address;
    if (!f.detail.empty()) j["detail"] = f.detail;
    if (!f.thread.empty()) j["thread"] = f.thread;
    if (!f.block.empty()) j["block"] = f.block;
    findings.push_back(std::move(j));
  }
  json out = {{"tool", tool},
              {"findings", findings},
              {"distinct", report.findings.size()},
              {"reported", report.reported},
              {"truncated", report.findings.size() > findings.size()},
              {"clean", report.findings.empty() && report.summary_errors.value_or(0) == 0}};
  if (report.summary_errors) out["error_summary"] = *report.summary_errors;
  if (!report.notes.empty()) out["notes"] = report.notes;
  return out;
}

// ---- running one -------------------------------------------------------------------------------

const tasks::Workload& pick_workload(const tasks::Task& task, const std::string& name, GpuToolKind kind) {
  const auto visible = task.visible_workloads();
  if (visible.empty()) throw std::invalid_argument("the task has no visible workload");
  if (!name.empty()) {
    for (const tasks::Workload* w : visible)
      if (w->name == name) return *w;
    std::string list;
    for (const tasks::Workload* w : visible) list += (list.empty() ? "" : ", ") + w->name;
    throw std::invalid_argument("no visible workload '" + name.substr(0, 64) + "'; the visible workloads are " + list);
  }
  // profile: the largest (the one whose counters say most); sanitize: the smallest (instrumented
  // runs are 10-100x slower).
  const tasks::Workload* pick = visible.front();
  for (const tasks::Workload* w : visible) {
    const double b = task.bytes_of(*w), p = task.bytes_of(*pick);
    if (kind == GpuToolKind::profile ? b > p : b < p) pick = w;
  }
  return *pick;
}

std::optional<bool> counters_open_to_all(const std::filesystem::path& params) {
  std::ifstream in(params);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("RmProfilingAdminOnly:", 0) == 0) return std::atoi(line.c_str() + 21) == 0;
  return std::nullopt;
}

std::optional<std::filesystem::path> find_gpu_tool(const std::string& name, const std::filesystem::path& nvcc) {
  std::error_code ec;
  auto usable = [&](const std::filesystem::path& p) {
    return std::filesystem::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  if (!nvcc.empty()) {
    const auto bin = nvcc.parent_path();
    for (const auto& cand : {bin / name, bin.parent_path() / "nsight-compute" / name,
                             bin.parent_path() / "compute-sanitizer" / name})
      if (usable(cand)) return std::filesystem::canonical(cand, ec);
  }
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':'))
      if (!dir.empty() && usable(std::filesystem::path(dir) / name)) return std::filesystem::path(dir) / name;
  }
  for (const char* dir : {"/usr/local/cuda/bin", "/opt/nvidia/nsight-compute"})
    if (usable(std::filesystem::path(dir) / name)) return std::filesystem::path(dir) / name;
  // A standalone Nsight Compute: /opt/nvidia/nsight-compute/<version>/ncu (the newest name last).
  std::optional<std::filesystem::path> newest;
  for (const auto& e : std::filesystem::directory_iterator("/opt/nvidia/nsight-compute", ec))
    if (usable(e.path() / name) && (!newest || e.path() / name > *newest)) newest = e.path() / name;
  return newest;
}

namespace {

GpuToolResult unavailable(std::string message) {
  GpuToolResult r;
  r.status = sandbox::Outcome::internal_error;
  r.unavailable = true;
  r.message = std::move(message);
  return r;
}

}  // namespace

std::vector<std::string> tool_messages(const std::string& text, const std::string& scratch) {
  std::vector<std::string> out;
  // First what the agent runner's seccomp filter refused under the tool (runner_seccomp.hpp).
  std::set<int> refused;
  for_each_line(text, [&](std::string_view l) {
    constexpr std::string_view kRefused = "d2k-runner: refused system call ";
    const std::string_view t = trim(l);
    if (t.rfind(kRefused, 0) != 0 || refused.size() >= 8) return;
    int nr = 0;
    bool digits = t.size() > kRefused.size();
    for (char c : t.substr(kRefused.size())) {
      if (c < '0' || c > '9' || nr > 100000) {
        digits = false;
        break;
      }
      nr = nr * 10 + (c - '0');
    }
    if (digits && refused.insert(nr).second)
      out.push_back("the sandbox refused " + sandbox::syscall_name(nr) +
                    " in the profiled process (the tool's library or the kernel's code); it failed with EPERM");
  });
  for_each_line(text, [&](std::string_view l) {
    const std::string_view t = trim(l);
    if (out.size() < refused.size() + 5 && (t.rfind("==ERROR==", 0) == 0 || t.rfind("==WARNING==", 0) == 0)) {
      std::string s(t.substr(0, 300));
      for (auto p = s.find(scratch); !scratch.empty() && p != std::string::npos; p = s.find(scratch)) s.replace(p, scratch.size(), "…");
      out.push_back(std::move(s));
    }
  });
  return out;
}

GpuToolResult run_gpu_tool(const GpuToolConfig& config, const GpuToolRequest& request) {
  const bool profile = request.kind == GpuToolKind::profile;
  const std::filesystem::path& tool = profile ? config.ncu : config.compute_sanitizer;
  const char* tool_name = profile ? "ncu (Nsight Compute)" : "compute-sanitizer";
  if (tool.empty()) return unavailable(std::string(tool_name) + " is not installed on this server");
  if (profile && counters_open_to_all() == false)
    return unavailable(
        "this host lets only administrators read GPU performance counters (RmProfilingAdminOnly: 1), and d2k never "
        "runs agent code with CAP_SYS_ADMIN; the host's operator can open them to all users "
        "(options nvidia NVreg_RestrictProfilingToAdminUsers=0, docs/agent-tools.md)");
  if (request.task == nullptr) {
    GpuToolResult r;
    r.message = "no task";
    return r;
  }
  GpuToolResult r;
  const tasks::Workload* w = nullptr;
  try {
    w = &pick_workload(*request.task, request.workload, request.kind);
  } catch (const std::invalid_argument& e) {
    r.status = sandbox::Outcome::bad_request;
    r.message = e.what();
    return r;
  }
  std::vector<std::string> sections;
  if (profile) {
    try {
      sections = validate_sections(request.sections);
    } catch (const std::invalid_argument& e) {
      r.status = sandbox::Outcome::bad_request;
      r.message = e.what();
      return r;
    }
  } else if (!is_sanitizer_tool(request.sanitizer_tool)) {
    r.status = sandbox::Outcome::bad_request;
    r.message = "unknown sanitizer tool '" + request.sanitizer_tool.substr(0, 32) +
                "'; the tools are memcheck, racecheck, initcheck, synccheck";
    return r;
  }

  // The tool's private folder: its log (the CSV or the report) and TMPDIR; outside every path the
  // runner masks, since the tool's front end sees the runner's masks (tool_host.hpp).
  std::error_code ec;
  const auto inside = [](const std::filesystem::path& p, const std::filesystem::path& root) {
    const auto rel = p.lexically_normal().lexically_relative(root.lexically_normal());
    return !rel.empty() && *rel.begin() != "..";
  };
  for (const auto& hidden : config.hidden_paths)
    if (inside(std::filesystem::absolute(config.scratch_dir, ec), std::filesystem::absolute(hidden, ec))) {
      r.message = "the tools' scratch folder " + config.scratch_dir.string() + " lies under the hidden path " +
                  hidden.string() + ", which the runner masks from the tool too";
      return r;
    }
  std::filesystem::create_directories(config.scratch_dir, ec);
  std::string dir_template = (config.scratch_dir / "tool-XXXXXX").string();
  if (::mkdtemp(dir_template.data()) == nullptr) {
    r.message = "cannot create the tool's folder under " + config.scratch_dir.string();
    return r;
  }
  const std::filesystem::path dir = dir_template;
  struct Cleanup {
    std::filesystem::path p;
    ~Cleanup() {
      std::error_code e;
      std::filesystem::remove_all(p, e);
    }
  } cleanup{dir};
  const std::string log = (dir / (profile ? "profile.csv" : "sanitizer.log")).string();
  // ncu's lock folder (<TMPDIR>/nvidia): the tool host mounts a small tmpfs on it, the only place
  // the profiled runner may create files (runner/tool_host.hpp kToolScratchEnv).
  std::string scratch;
  if (profile) {
    scratch = (dir / "nvidia").string();
    if (!std::filesystem::create_directory(scratch, ec) || ec) {
      r.message = "cannot create the profiler's lock folder in " + dir.string() + ": " + ec.message();
      return r;
    }
  }

  runner::Job job;
  try {
    std::random_device rd;
    runner::TimingSpec timing;
    timing.enabled = false;
    job = runner::make_job(*request.task, {w}, {(static_cast<std::uint64_t>(rd()) << 32) ^ rd()},
                           request.so_path.string(), timing);
    job.measure_overhead = false;
    for (const auto& p : config.hidden_paths) job.hide_paths.push_back(p.string());
  } catch (const std::exception& e) {
    r.status = sandbox::Outcome::bad_request;
    r.message = std::string("the workload cannot be run: ") + e.what();
    return r;
  }

  runner::SpawnSpec spec;
  spec.runner = config.runner;
  spec.mode = runner::Mode::agent;
  spec.gpu = request.gpu;
  spec.isolate = config.isolate;
  spec.keep_net = true;
  spec.max_output_bytes = 256u << 10;
  spec.extra_env = {{"TMPDIR", dir.string()}, {"HOME", dir.string()}};  // the tools' caches and locks
  if (!scratch.empty()) spec.extra_env[runner::kToolScratchEnv] = scratch;
  spec.wrapper = {config.runner.string(), "--mode", "tool-host", "--", tool.string()};
  const auto args = profile ? ncu_arguments(sections, log, 64) : sanitizer_arguments(request.sanitizer_tool, log, 1000);
  spec.wrapper.insert(spec.wrapper.end(), args.begin(), args.end());

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<long long>(config.deadline_s * 1000));
  std::unique_ptr<runner::RunnerProcess> p;
  try {
    p = runner::RunnerProcess::start(spec);
  } catch (const std::exception& e) {
    r.message = std::string("cannot start the tool: ") + e.what();
    return r;
  }
  // The tool host's network namespace (it unshares at once; until then /proc shows ours): what is
  // left in it after the run is killed, the runner under the tool included, whatever group it is in.
  std::optional<NamespaceId> tool_ns;
  const auto own_ns = net_namespace_of(::getpid());
  for (int i = 0; i < 400 && own_ns && !tool_ns; ++i) {
    const auto ns = net_namespace_of(p->pid());
    if (!ns) break;  // gone already
    if (!(ns == own_ns)) tool_ns = ns;
    else ::usleep(5000);
  }
  std::string kernel_status, kernel_message, start_error;
  bool timed_out = false;
  const auto ready = p->wait_ready(std::chrono::milliseconds(static_cast<long long>(
      std::min(config.ready_timeout_s, config.deadline_s) * 1000)));
  if (ready) {
    p->send_job(job);
    runner::Event ev;
    for (;;) {
      const auto got = p->next(ev, deadline);
      if (got == runner::RunnerProcess::Read::timeout) {
        timed_out = true;
        break;
      }
      if (got != runner::RunnerProcess::Read::event) break;
      if (ev.body.value("event", std::string()) == "result") {
        kernel_status = ev.body.value("status", std::string());
        kernel_message = ev.body.value("message", std::string()).substr(0, 500);
        break;
      }
    }
  } else {
    timed_out = Clock::now() >= deadline;
    start_error = p->error().substr(0, 500);  // the runner's own reason (confinement, CUDA start-up) when it gave one
  }
  if (timed_out) p->kill();
  // The tool writes its log as it ends: let the host end (draining its pipes meanwhile), then kill
  // what is left in its network namespace (whatever holds its pipes open too), then reap it.
  const auto host_ended = [&] {
    std::ifstream in("/proc/" + std::to_string(p->pid()) + "/stat");
    std::string stat;
    std::getline(in, stat);
    const auto paren = stat.rfind(')');
    return stat.empty() || (paren != std::string::npos && paren + 2 < stat.size() &&
                            (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X'));
  };
  const auto grace = std::max(deadline, Clock::now()) + std::chrono::seconds(10);
  runner::Event drained;
  while (!host_ended() && Clock::now() < grace) {
    const auto got = p->next(drained, std::min(grace, Clock::now() + std::chrono::milliseconds(20)));
    if (got != runner::RunnerProcess::Read::event && got != runner::RunnerProcess::Read::timeout)
      ::usleep(10000);  // the result pipe is closed: only the host's exit is awaited
  }
  if (tool_ns) kill_namespace_members(*tool_ns);
  if (!host_ended()) p->kill();
  const runner::Exit exit = p->wait();
  const std::string output = p->output();
  const std::string text = read_capped(log, 32u << 20);

  if (output.find("ERR_NVGPUCTRPERM") != std::string::npos || text.find("ERR_NVGPUCTRPERM") != std::string::npos)
    return unavailable("the GPU refused performance counters to the profiled runner (ERR_NVGPUCTRPERM): this host "
                       "lets only administrators read them, and d2k never runs agent code with CAP_SYS_ADMIN");
  if (timed_out) {
    r.status = sandbox::Outcome::timeout;
    r.message = std::string(tool_name) + " and the kernel ran past the tool's deadline (" +
                std::to_string(static_cast<int>(config.deadline_s)) + " s); a kernel that hangs under the tool ends here";
    return r;
  }
  json result;
  const auto messages = tool_messages(output + "\n" + text, dir.string());
  if (profile) {
    NcuTable table = parse_ncu_csv(text);
    if (table.rows.empty()) table = parse_ncu_csv(output);  // a version that printed the CSV to stdout
    ProfileContext ctx;
    ctx.sections = sections;
    ctx.max_launches = request.max_items;
    try {
      ctx.task_bytes = request.task->bytes_of(*w);
      ctx.task_flops = request.task->flops_of(*w);
    } catch (const std::exception&) {
    }
    result = curate_profile(table, ctx);
    if (result["launches_total"] == 0 && kernel_status == "ok") {
      r.message = "ncu recorded no launch of the kernel" + (messages.empty() ? std::string() : ": " + messages.front());
      r.result = {{"messages", messages}};
      return r;
    }
  } else {
    result = sanitizer_to_json(parse_sanitizer(text.empty() ? output : text), request.sanitizer_tool, request.max_items);
  }
  result["workload"] = w->name;
  result["kernel_status"] = kernel_status.empty() ? std::string("none") : kernel_status;
  if (!kernel_message.empty()) result["kernel_message"] = kernel_message;
  if (!messages.empty()) result["messages"] = messages;
  r.result = std::move(result);
  const auto runner_outcome = sandbox::outcome_from_string(kernel_status);
  if (runner_outcome && *runner_outcome == sandbox::Outcome::sandbox_violation) {
    r.status = sandbox::Outcome::sandbox_violation;
    r.message = kernel_message;
  } else if (kernel_status.empty()) {
    // The runner under the tool never reported (the H200, 2026-12-01: ncu said "The application
    // returned an error code (2)" and exited 0): nothing was measured, so never `ok`.
    r.status = sandbox::Outcome::runtime_error;
    r.message = std::string(tool_name) + " ended (" + exit.describe() + ") before the runner reported a result" +
                (start_error.empty() ? std::string() : " (runner: " + start_error + ")") +
                (messages.empty() ? std::string() : ": " + messages.back());
    if (!start_error.empty()) r.result["runner_error"] = start_error;
  } else {
    r.status = sandbox::Outcome::ok;  // the tool ran; the kernel's own failure is in kernel_status
  }
  return r;
}

std::optional<NamespaceId> net_namespace_of(pid_t pid) {
  struct stat st{};
  if (::stat(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), &st) != 0) return std::nullopt;
  return NamespaceId{st.st_dev, st.st_ino};
}

int kill_namespace_members(const NamespaceId& ns, int rounds) {
  int kills = 0;
  for (int round = 0; round < rounds; ++round) {
    int found = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      const pid_t pid = static_cast<pid_t>(std::atol(name.c_str()));
      if (pid == ::getpid()) continue;
      const auto id = net_namespace_of(pid);
      if (!id || !(*id == ns)) continue;
      ++found;
      if (::kill(pid, SIGKILL) == 0) ++kills;
    }
    if (found == 0) break;
    ::usleep(20000);  // the killed exit (their zombies have no namespaces), then look again
  }
  return kills;
}

std::filesystem::path tool_scratch_root(const std::filesystem::path& temp_dir) {
  const std::filesystem::path root = temp_dir / ("d2k-tools-" + std::to_string(::getuid()));
  if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("cannot create " + root.string() + ": " + std::strerror(errno));
  struct stat st{};
  if (::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 077) != 0)
    throw std::runtime_error(root.string() + " exists but is not a private folder of this user (mode 0700)");
  return root;
}

GpuToolResult run_gpu_tool_for(runner::Evaluator& evaluator, const std::filesystem::path& nvcc, bool profile,
                               const ToolArgs& args) {
  GpuToolConfig c;
  const runner::EvalConfig& ec = evaluator.config();
  c.runner = ec.runner_path;
  c.isolate = ec.isolate;
  c.hidden_paths = ec.hidden_paths;  // and, as evaluate hides them (evaluator.cpp), the task's and the state
  if (args.task != nullptr) c.hidden_paths.push_back(args.task->dir);
  c.hidden_paths.push_back(ec.state_dir);
  c.deadline_s = args.deadline_s;
  c.ready_timeout_s = std::max(ec.ready_timeout_s, 60.0);
  if (auto p = find_gpu_tool("ncu", nvcc)) c.ncu = *p;
  if (auto p = find_gpu_tool("compute-sanitizer", nvcc)) c.compute_sanitizer = *p;
  GpuToolRequest r;
  r.kind = profile ? GpuToolKind::profile : GpuToolKind::sanitize;
  r.task = args.task;
  r.so_path = args.so;
  r.gpu = args.gpu;
  r.workload = args.workload;
  r.sections = args.sections;
  r.sanitizer_tool = args.sanitizer_tool.empty() ? "memcheck" : args.sanitizer_tool;
  r.max_items = args.max_items;
  std::unique_lock<std::mutex> lock;
  try {
    c.scratch_dir = tool_scratch_root();
    lock = evaluator.lock_gpu(args.gpu);
  } catch (const std::exception& e) {
    GpuToolResult bad;
    bad.message = e.what();
    return bad;
  }
  return run_gpu_tool(c, r);
}

}  // namespace d2k::tools
