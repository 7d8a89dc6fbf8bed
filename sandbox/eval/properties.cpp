#include "sandbox/eval/properties.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <list>
#include <mutex>
#include <random>
#include <regex>
#include <sstream>
#include <unordered_map>

#include <xxhash.h>

#include "sandbox/jail.hpp"
#include "sandbox/process.hpp"

namespace d2k::runner {
namespace {

using nlohmann::json;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "KEY:123" fields of a res-usage line.
int field(std::string_view line, std::string_view key) {
  std::size_t pos = 0;
  while ((pos = line.find(key, pos)) != std::string_view::npos) {
    const bool starts = pos == 0 || line[pos - 1] == ' ';
    const std::size_t colon = pos + key.size();
    if (starts && colon < line.size() && line[colon] == ':') return std::atoi(std::string(line.substr(colon + 1, 12)).c_str());
    pos = colon;
  }
  return 0;
}

std::vector<std::string> workload_filter(const json& check) {
  std::vector<std::string> out;
  if (check.contains("workloads") && check["workloads"].is_array())
    for (const auto& w : check["workloads"])
      if (w.is_string()) out.push_back(w.get<std::string>());
  return out;
}

bool selected(const std::vector<std::string>& filter, const std::string& name) {
  if (filter.empty()) return true;
  for (const auto& f : filter)
    if (f == name) return true;
  return false;
}

std::string num(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt("%.0f", v);
  return fmt("%.4g", v);
}

PropertyResult check_sass(const tasks::Property& p, const PropertyInputs& in, PropertyResult r) {
  if (!in.sass) {
    r.state = PropertyState::unchecked;
    r.detail = "no disassembly: " + in.sass_missing;
    return r;
  }
  const std::string pattern = p.check.value("pattern", std::string());
  const std::string expect = p.check.value("expect", std::string("present"));
  const long long min_count = p.check.value("min_count", 1LL);
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    r.state = PropertyState::unchecked;
    r.detail = "pattern does not compile: " + std::string(e.what());
    return r;
  }
  long long count = 0;
  std::map<std::string, long long> by_opcode;
  for (const auto& f : *in.sass)
    for (const auto& op : f.opcodes)
      if (std::regex_search(op, re)) {
        ++count;
        ++by_opcode[op];
      }
  std::string seen;
  for (const auto& [op, n] : by_opcode) {
    if (seen.size() > 120) {
      seen += ", …";
      break;
    }
    seen += (seen.empty() ? "" : ", ") + op + " ×" + std::to_string(n);
  }
  const bool holds = expect == "absent" ? count == 0 : count >= min_count;
  r.state = holds ? PropertyState::holds : PropertyState::fails;
  r.detail = std::to_string(count) + " matching opcode(s)" + (seen.empty() ? "" : " (" + seen + ")") + "; want " +
             (expect == "absent" ? std::string("none") : "≥ " + std::to_string(min_count));
  return r;
}

// The value of a per-launch metric; nullopt for `launches` (a per-workload metric).
std::optional<double> launch_metric(const std::string& metric, const LaunchRecord& l, int sm_count) {
  if (metric == "registers_per_thread") return l.registers_per_thread;
  if (metric == "local_bytes_per_thread") return l.local_bytes_per_thread;
  if (metric == "static_shared_bytes") return l.static_shared_bytes;
  if (metric == "dynamic_shared_bytes") return l.dynamic_shared_bytes;
  if (metric == "block_threads") return static_cast<double>(l.block_threads());
  if (metric == "grid_blocks") return static_cast<double>(l.grid_blocks());
  if (metric == "grid_blocks_per_sm")
    return sm_count > 0 ? std::optional<double>(static_cast<double>(l.grid_blocks()) / sm_count) : std::nullopt;
  return std::nullopt;
}

PropertyResult check_resource(const tasks::Property& p, const PropertyInputs& in, PropertyResult r) {
  const std::string metric = p.check.value("metric", std::string());
  const std::string op = p.check.value("op", std::string("=="));
  const double value = p.check.value("value", 0.0);
  const auto filter = workload_filter(p.check);
  const std::string want = metric + " " + op + " " + num(value);

  std::vector<const MeasuredWorkload*> ws;
  for (const auto& w : in.workloads)
    if (selected(filter, w.name)) ws.push_back(&w);
  bool all_recorded = !ws.empty();
  for (const auto* w : ws) all_recorded = all_recorded && w->launches.has_value();

  if (all_recorded) {
    if (metric == "grid_blocks_per_sm" && in.sm_count <= 0) {
      r.state = PropertyState::unchecked;
      r.detail = "the device's SM count is unknown";
      return r;
    }
    bool holds = true;
    std::string worst;
    std::size_t launches = 0;
    for (const auto* w : ws) {
      if (metric == "launches") {
        const double n = static_cast<double>(w->launches->size());
        if (!compare_op(n, op, value) && worst.empty()) worst = w->name + ": " + num(n) + " launches";
        holds = holds && compare_op(n, op, value);
        continue;
      }
      for (const auto& l : *w->launches) {
        ++launches;
        const auto v = launch_metric(metric, l, in.sm_count);
        if (!v) {
          r.state = PropertyState::unchecked;
          r.detail = "unknown metric " + metric;
          return r;
        }
        if (!compare_op(*v, op, value)) {
          if (worst.empty()) worst = w->name + ": " + num(*v) + " in " + l.kernel;
          holds = false;
        }
      }
    }
    if (metric != "launches" && launches == 0) {
      r.state = PropertyState::unknown;
      r.detail = "no kernel launch recorded on the selected workloads";
      return r;
    }
    r.state = holds ? PropertyState::holds : PropertyState::fails;
    r.detail = (holds ? "every launch" : "violated at " + worst) + "; want " + want + " (launch records, " +
               std::to_string(ws.size()) + " workload(s))";
    return r;
  }
  if (ws.empty()) {
    r.state = PropertyState::unknown;
    r.detail = "none of its workloads was evaluated";
    return r;
  }
  // Without launch records, the static per-kernel metrics come from cuobjdump -res-usage, over
  // every kernel in the object (stricter than "every launched kernel").
  const bool static_metric = metric == "registers_per_thread" || metric == "local_bytes_per_thread" ||
                             metric == "static_shared_bytes";
  const std::string why = "no launch records (" + (in.launches_missing.empty() ? std::string("not collected") : in.launches_missing) + ")";
  if (!static_metric || !in.resources) {
    r.state = PropertyState::unchecked;
    r.detail = why + (static_metric ? "; no resource usage either: " + in.resources_missing
                                     : "; " + metric + " needs them");
    return r;
  }
  bool holds = true;
  std::string worst;
  for (const auto& k : *in.resources) {
    const double v = metric == "registers_per_thread" ? k.registers
                     : metric == "static_shared_bytes" ? k.shared_bytes
                                                       : k.local_bytes + k.stack_bytes;
    if (!compare_op(v, op, value)) {
      if (worst.empty()) worst = num(v) + " in " + k.name;
      holds = false;
    }
  }
  r.state = in.resources->empty() ? PropertyState::unknown : holds ? PropertyState::holds : PropertyState::fails;
  r.detail = (holds ? "every kernel" : "violated: " + worst) + "; want " + want + " (cuobjdump -res-usage, " +
             std::to_string(in.resources->size()) + " kernel(s); " + why + ")";
  return r;
}

PropertyResult check_measured(const tasks::Task& task, const tasks::Property& p, const PropertyInputs& in,
                              PropertyResult r) {
  const std::string metric = p.check.value("metric", std::string());
  const std::string op = p.check.value("op", std::string(">="));
  const double value = p.check.value("value", 0.0);
  const auto filter = workload_filter(p.check);
  if (metric == "bandwidth_fraction" && !(in.peak_dram_bytes_per_s > 0)) {
    r.state = PropertyState::unchecked;
    r.detail = "the device's peak DRAM bandwidth is unknown";
    return r;
  }
  if (metric == "flops_fraction" && !(in.peak_flops > 0)) {
    r.state = PropertyState::unchecked;
    r.detail = "no peak FLOP/s is known for the device and dtype (the runner does not report one)";
    return r;
  }
  if (metric != "bandwidth_fraction" && metric != "flops_fraction" && metric != "speedup_over_baseline") {
    r.state = PropertyState::unchecked;
    r.detail = "unknown metric " + metric;
    return r;
  }
  bool holds = true, any = false, flagged = false;
  std::string values;
  for (const auto& w : in.workloads) {
    if (!selected(filter, w.name)) continue;
    if (w.flagged) flagged = true;
    if (!w.median_s || !(*w.median_s > 0)) continue;
    const tasks::Workload* tw = task.find_workload(w.name);
    if (tw == nullptr) continue;
    double v = 0;
    if (metric == "bandwidth_fraction") {
      v = task.bytes_of(*tw) / *w.median_s / in.peak_dram_bytes_per_s;
    } else if (metric == "flops_fraction") {
      v = task.flops_of(*tw) / *w.median_s / in.peak_flops;
    } else {
      auto b = in.baseline_s.find(w.name);
      if (b == in.baseline_s.end()) continue;
      v = b->second / *w.median_s;
    }
    any = true;
    holds = holds && compare_op(v, op, value);
    values += (values.empty() ? "" : ", ") + w.name + " " + fmt("%.3f", v);
  }
  if (!any || flagged) {
    r.state = PropertyState::unknown;
    r.detail = flagged ? "a timing was flagged" : "none of its workloads was timed";
    return r;
  }
  r.state = holds ? PropertyState::holds : PropertyState::fails;
  r.detail = metric + ": " + values + "; want " + op + " " + num(value);
  if (metric == "bandwidth_fraction") r.detail += " (peak " + fmt("%.0f", in.peak_dram_bytes_per_s / 1e9) + " GB/s, " + in.peak_dram_source + ")";
  return r;
}

}  // namespace

std::vector<SassFunction> parse_sass(std::string_view text) {
  std::vector<SassFunction> out;
  for (std::string_view line : lines_of(text)) {
    const std::string_view t = trim(line);
    if (t.rfind("Function : ", 0) == 0) {
      out.push_back({std::string(trim(t.substr(11))), {}});
      continue;
    }
    if (t.size() < 4 || t[0] != '/' || t[1] != '*') continue;
    const auto close = t.find("*/");
    if (close == std::string_view::npos || close < 3) continue;
    bool hex = true;
    for (char c : t.substr(2, close - 2)) hex = hex && std::isxdigit(static_cast<unsigned char>(c));
    if (!hex) continue;  // the encoding column: "/* 0x000fe2... */"
    std::istringstream ss{std::string(t.substr(close + 2))};
    std::string tok;
    ss >> tok;
    if (tok == "{") ss >> tok;
    if (!tok.empty() && tok[0] == '@') ss >> tok;
    while (!tok.empty() && (tok.back() == ';' || tok.back() == ',')) tok.pop_back();
    if (tok.empty() || tok == "}") continue;
    if (out.empty()) out.push_back({"", {}});
    out.back().opcodes.push_back(tok);
  }
  return out;
}

std::vector<KernelResources> parse_res_usage(std::string_view text) {
  std::vector<KernelResources> out;
  bool pending = false;
  KernelResources k;
  for (std::string_view line : lines_of(text)) {
    const std::string_view t = trim(line);
    if (t.rfind("Function ", 0) == 0 && !t.empty() && t.back() == ':') {
      k = KernelResources{};
      k.name = std::string(trim(t.substr(9, t.size() - 10)));
      pending = true;
      continue;
    }
    if (pending && t.rfind("REG:", 0) == 0) {
      k.registers = field(t, "REG");
      k.stack_bytes = field(t, "STACK");
      k.shared_bytes = field(t, "SHARED");
      k.local_bytes = field(t, "LOCAL");
      // cuobjdump prints each fatbin twice when it holds ELF and PTX; keep one entry per kernel.
      bool dup = false;
      for (const auto& e : out) dup = dup || e.name == k.name;
      if (!dup) out.push_back(k);
      pending = false;
    }
  }
  return out;
}

std::optional<std::filesystem::path> find_cuobjdump(const std::filesystem::path& nvcc) {
  std::error_code ec;
  const auto beside = nvcc.parent_path() / "cuobjdump";
  if (!nvcc.empty() && std::filesystem::is_regular_file(beside, ec) && ::access(beside.c_str(), X_OK) == 0) return beside;
  if (const char* path = std::getenv("PATH")) {
    std::string_view rest = path;
    while (!rest.empty()) {
      const auto colon = rest.find(':');
      const std::filesystem::path dir{std::string(rest.substr(0, colon))};
      if (!dir.empty()) {
        const auto cand = dir / "cuobjdump";
        if (std::filesystem::is_regular_file(cand, ec) && ::access(cand.c_str(), X_OK) == 0) return cand;
      }
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  return std::nullopt;
}

namespace {
// Run as `sh -c SCRIPT CUOBJDUMP` in the jail (cwd /tmp, the jail's own tmpfs). The extracted files'
// names come from cuobjdump ("kernel.N.sm_XX.cubin"); they are only ever quoted. Any cuobjdump that
// fails fails the whole run, with its output.
constexpr const char* kSplitSassScript = R"sh(set -u
T="$0"
cd /tmp || exit 1
mkdir x && cd x || exit 1
"$T" -xelf all /in/kernel.so > ../xelf.out 2>&1 || { cat ../xelf.out; exit 1; }
n=0
for f in *; do
  [ -f "$f" ] || continue
  ( "$T" -sass "$f" > "../$f.sass" 2>&1; echo $? > "../$f.rc" ) &
  n=$((n + 1))
  if [ "$n" -ge 4 ]; then wait; n=0; fi
done
wait
rc=0
for f in *; do
  [ -f "$f" ] || continue
  printf '\nFatbin elf code:\n================\n'
  cat "../$f.sass"
  [ "$(cat "../$f.rc")" = 0 ] || rc=1
done
exit $rc
)sh";
}  // namespace

// cuobjdump parses an agent-built file: it runs in the compile jail (sandbox/jail.hpp), seeing
// the system, the toolkit and that one file read-only at /in/kernel.so, and nothing else (no task
// folder, no state, no other session's files), with no network and the compiler's seccomp profile.
ToolOutput run_cuobjdump(const std::filesystem::path& cuobjdump, const std::string& flag,
                         const std::filesystem::path& file) {
  ToolOutput r;
  ObjectDumpCache& cache = ObjectDumpCache::instance();
  const std::string key = cache.key_of(cuobjdump, flag, file);
  if (!key.empty())
    if (auto hit = cache.find(key)) {
      r.ok = true;
      r.text = std::move(*hit);
      return r;
    }
  sandbox::JailSpec spec;
  spec.argv = {cuobjdump.string(), flag, "/in/kernel.so"};
  // -sass: cuobjdump starts one nvdisasm per embedded ELF file, one after another, and each costs
  // about half a second of start-up however small its file (development machine, 2026-12-04:
  // 0.55 s for an empty cubin, 1.1 s for vector_add's two). Here the ELF files are extracted into
  // the jail's private /tmp and disassembled side by side (at most 4 at a time), their listings
  // joined in the files' order, each under the header cuobjdump prints for it.
  const bool split_sass = flag == "-sass";
  std::string tool_name = cuobjdump.string();  // in messages: the tool, not the shell that runs it
  spec.env = {{"PATH", "/usr/bin:/bin"}, {"HOME", "/tmp"}, {"LANG", "C"}, {"LC_ALL", "C"}};
  spec.max_output_bytes = 64u << 20;
  spec.deadline = std::chrono::seconds(120);
  spec.cpu_seconds = 120;
  spec.seccomp = sandbox::SeccompProfile::compiler;
  try {
    const auto tool = std::filesystem::canonical(cuobjdump);
    if (tool.string().rfind("/usr/", 0) != 0) {  // a toolkit outside /usr: its root, read-only
      const auto root = tool.parent_path().parent_path();
      spec.mounts.push_back({root, root, false});
    }
    tool_name = tool.string();
    spec.argv[0] = tool_name;
    spec.mounts.push_back({std::filesystem::canonical(file), "/in/kernel.so", false});
    if (split_sass) spec.argv = {"/bin/sh", "-c", kSplitSassScript, tool_name};
  } catch (const std::exception& e) {
    r.error = e.what();
    return r;
  }
  const sandbox::JailOutcome run = sandbox::run_jailed(spec);
  r.text = run.output;
  r.ok = run.started && !run.timed_out && run.signal == 0 && run.exit_status == 0;
  if (!r.ok)
    r.error = tool_name + " " + flag + " failed (" +
              (!run.started      ? "jail: " + run.setup_error
               : run.timed_out   ? std::string("timed out")
               : run.signal != 0 ? "signal " + std::to_string(run.signal)
                                 : "exit " + std::to_string(run.exit_status)) +
              "): " + std::string(trim(std::string_view(run.output).substr(0, 500)));
  else if (!key.empty())
    cache.store(key, r.text);
  return r;
}

struct ObjectDumpCache::Impl {
  mutable std::mutex mu;
  std::uint64_t seed = 0;
  std::uint64_t capacity = 256ull << 20;
  std::uint64_t bytes = 0, hits = 0, misses = 0;
  std::list<std::pair<std::string, std::string>> lru;  // most recent first: key, text
  std::unordered_map<std::string, std::list<std::pair<std::string, std::string>>::iterator> index;
  void evict() {
    while (bytes > capacity && !lru.empty()) {
      bytes -= lru.back().second.size();
      index.erase(lru.back().first);
      lru.pop_back();
    }
  }
};

ObjectDumpCache::ObjectDumpCache() : impl_(std::make_unique<Impl>()) {
  std::random_device rd;
  impl_->seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

ObjectDumpCache& ObjectDumpCache::instance() {
  static ObjectDumpCache cache;
  return cache;
}

void ObjectDumpCache::set_capacity(std::uint64_t bytes) {
  std::lock_guard lock(impl_->mu);
  impl_->capacity = bytes;
  impl_->evict();
}

ObjectDumpCache::Stats ObjectDumpCache::stats() const {
  std::lock_guard lock(impl_->mu);
  return {impl_->hits, impl_->misses, impl_->lru.size(), impl_->bytes, impl_->capacity};
}

void ObjectDumpCache::clear() {
  std::lock_guard lock(impl_->mu);
  impl_->lru.clear();
  impl_->index.clear();
  impl_->bytes = 0;
}

std::string ObjectDumpCache::key_of(const std::filesystem::path& tool, const std::string& flag,
                                    const std::filesystem::path& file) const {
  std::ifstream in(file, std::ios::binary);
  if (!in) return {};
  XXH3_state_t* st = XXH3_createState();
  if (st == nullptr) return {};
  XXH3_128bits_reset_withSeed(st, impl_->seed);
  char buf[1 << 16];
  std::uint64_t size = 0;
  while (in) {
    in.read(buf, sizeof buf);
    const auto n = in.gcount();
    if (n <= 0) break;
    XXH3_128bits_update(st, buf, static_cast<std::size_t>(n));
    size += static_cast<std::uint64_t>(n);
  }
  const bool bad = in.bad();
  const XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  if (bad) return {};
  char hex[80];
  std::snprintf(hex, sizeof hex, "%016llx%016llx:%llu", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64), static_cast<unsigned long long>(size));
  return tool.string() + '\n' + flag + '\n' + hex;
}

std::optional<std::string> ObjectDumpCache::find(const std::string& key) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->index.find(key);
  if (it == impl_->index.end()) {
    ++impl_->misses;
    return std::nullopt;
  }
  ++impl_->hits;
  impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
  return it->second->second;
}

void ObjectDumpCache::store(const std::string& key, std::string text) {
  std::lock_guard lock(impl_->mu);
  if (text.size() > impl_->capacity) return;
  if (auto it = impl_->index.find(key); it != impl_->index.end()) {
    impl_->bytes -= it->second->second.size();
    impl_->lru.erase(it->second);
    impl_->index.erase(it);
  }
  impl_->bytes += text.size();
  impl_->lru.emplace_front(key, std::move(text));
  impl_->index[key] = impl_->lru.begin();
  impl_->evict();
}

std::string_view to_string(PropertyState s) {
  switch (s) {
    case PropertyState::holds: return "holds";
    case PropertyState::fails: return "fails";
    case PropertyState::unknown: return "unknown";
    case PropertyState::unchecked: return "unchecked";
  }
  return "unknown";
}

bool compare_op(double lhs, const std::string& op, double rhs) {
  if (op == "<") return lhs < rhs;
  if (op == "<=") return lhs <= rhs;
  if (op == "==") return lhs == rhs;
  if (op == "!=") return lhs != rhs;
  if (op == ">=") return lhs >= rhs;
  if (op == ">") return lhs > rhs;
  return false;
}

PropertyResult check_property(const tasks::Task& task, const tasks::Property& p, const PropertyInputs& in) {
  PropertyResult r;
  r.id = p.id;
  r.title = p.title;
  r.layer = p.layer;
  r.kind = p.check.is_object() ? p.check.value("kind", std::string()) : std::string();
  try {
    if (r.kind == "sass") return check_sass(p, in, r);
    if (r.kind == "resource") return check_resource(p, in, r);
    if (r.kind == "measured") return check_measured(task, p, in, r);
  } catch (const std::exception& e) {  // a malformed check object (the loader should have refused it)
    r.state = PropertyState::unchecked;
    r.detail = std::string("malformed check: ") + e.what();
    return r;
  }
  r.state = PropertyState::unchecked;
  r.detail = "unknown check kind '" + r.kind + "'";
  return r;
}

std::vector<PropertyResult> check_properties(const tasks::Task& task, const PropertyInputs& in) {
  std::vector<PropertyResult> out;
  for (const auto& p : task.properties) out.push_back(check_property(task, p, in));
  return out;
}

}  // namespace d2k::runner
