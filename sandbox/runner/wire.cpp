#include "sandbox/runner/wire.hpp"

#include <algorithm>
#include <cmath>

namespace d2k::runner {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& code, const std::string& what) { throw WireError(code, what); }

template <class T>
T get(const json& j, const char* key, const char* code) {
  if (!j.is_object() || !j.contains(key)) bad(code, std::string("missing field '") + key + "'");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    bad(code, std::string("field '") + key + "' has the wrong type");
  }
}

template <class T>
T get_or(const json& j, const char* key, T fallback, const char* code) {
  if (!j.is_object() || !j.contains(key)) return fallback;
  return get<T>(j, key, code);
}

}  // namespace

Generator parse_generator(const json& init) { return parse_generator(init, {}, json::object()); }

Generator parse_generator(const json& init, const std::map<std::string, std::int64_t>& sizes, const json& params) {
  try {
    Generator g = tasks::parse_generator(init);
    if (tasks::is_custom(g.dist) && sizes.empty())
      bad("generator_unsupported", "custom generator '" + init.value("generator", std::string()) + "' needs a workload");
    tasks::fit_to_workload(g, sizes, params);
    return g;
  } catch (const tasks::GeneratorError& e) {
    bad(e.unsupported ? "generator_unsupported" : "bad_job", e.what());
  }
}

json to_json(const Job& job) {
  json wls = json::array();
  for (const auto& w : job.workloads) {
    json args = json::array();
    for (const auto& a : w.args)
      args.push_back({{"role", tasks::to_string(a.role)}, {"dtype", dtype_name(a.dtype)}, {"count", a.count},
                      {"dist", tasks::to_string(a.gen.dist)}, {"a", a.gen.a}, {"b", a.gen.b},
                      {"rows", a.gen.rows}, {"cols", a.gen.cols}, {"nnz", a.gen.nnz},
                      {"max_row", a.gen.max_row}, {"pattern", static_cast<int>(a.gen.pattern)},
                      {"scalar", a.scalar}});
    json wj = {{"name", w.name}, {"args", args}, {"time", w.time}};
    if (w.train > 0) wj["train"] = w.train;
    if (w.trains != 1) wj["trains"] = w.trains;
    if (w.split > 0) wj["split"] = w.split;
    if (w.replay_samples > 0) {
      wj["replay_key"] = w.replay_key;
      wj["replay_samples"] = w.replay_samples;
      wj["replay_batch"] = w.replay_batch;
    }
    wls.push_back(wj);
  }
  json tols = json::object();
  for (const auto& [dt, t] : job.tolerances) tols[dt] = {{"atol", t.atol}, {"rtol", t.rtol}};
  return {{"so_path", job.so_path},
          {"entry", job.entry},
          {"returns_int", job.returns_int},
          {"workloads", wls},
          {"seeds", job.seeds},
          {"timing",
           {{"enabled", job.timing.enabled}, {"max_warmup", warmup_range(job.timing).second},
            {"min_samples", job.timing.min_samples}, {"max_samples", job.timing.max_samples},
            {"rse_target", job.timing.rse_target}, {"time_cap_s", job.timing.time_cap_s},
            {"verify_bytes", job.timing.verify_bytes}, {"batch_bytes", job.timing.batch_bytes}}},
          {"measure_overhead", job.measure_overhead},
          {"hide_paths", job.hide_paths},
          {"host_memory_bytes", job.host_memory_bytes},
          {"record_launches", job.record_launches},
          {"gpu_slots", to_string(job.gpu_slots)},
          {"gpu_slots_bytes", job.gpu_slots_bytes},
          {"input_arena_bytes", job.input_arena_bytes},
          {"stay", job.stay},
          {"oracle_so_path", job.oracle_so_path},
          {"tolerances", tols}};
}

std::string_view to_string(SlotsRole r) {
  switch (r) {
    case SlotsRole::none: return "none";
    case SlotsRole::user: return "user";
    case SlotsRole::owner: return "owner";
  }
  return "none";
}

Job job_from_json(const json& j) {
  constexpr const char* c = "bad_job";
  Job job;
  job.so_path = get<std::string>(j, "so_path", c);
  job.entry = get<std::string>(j, "entry", c);
  job.returns_int = get_or<bool>(j, "returns_int", true, c);
  job.seeds = get<std::vector<std::uint64_t>>(j, "seeds", c);
  if (job.seeds.empty()) bad(c, "a job needs at least one seed");
  const json wls = get<json>(j, "workloads", c);
  if (!wls.is_array() || wls.empty()) bad(c, "a job needs at least one workload");
  for (const auto& wj : wls) {
    WireWorkload w;
    w.name = get<std::string>(wj, "name", c);
    w.time = get_or<bool>(wj, "time", true, c);
    w.replay_key = get_or<std::uint64_t>(wj, "replay_key", 0, c);
    w.train = get_or<int>(wj, "train", 0, c);
    if (w.train < 0 || w.train > 100000) bad(c, "bad train call count");
    w.trains = get_or<int>(wj, "trains", 1, c);
    if (w.trains < 1 || w.trains > 16) bad(c, "bad train count (1..16)");
    w.split = get_or<int>(wj, "split", 0, c);
    if (w.split < 0 || (w.split > 0 && w.split >= w.train)) bad(c, "bad split: the first half must leave calls for the second");
    w.replay_samples = get_or<int>(wj, "replay_samples", 0, c);
    if (w.replay_samples < 0 || w.replay_samples > 100000) bad(c, "bad replay sample count");
    w.replay_batch = get_or<int>(wj, "replay_batch", 0, c);
    if (w.replay_batch < 0 || w.replay_batch > 100000) bad(c, "bad replay batch");
    const json args = get<json>(wj, "args", c);
    if (!args.is_array()) bad(c, "workload args must be an array");
    for (const auto& aj : args) {
      WireArg a;
      const auto role_name = get<std::string>(aj, "role", c);
      const auto role = tasks::parse_role(role_name);
      if (!role) bad(c, "unknown arg role '" + role_name + "'");
      a.role = *role;
      const auto dt = parse_dtype(get<std::string>(aj, "dtype", c));
      if (!dt) bad(c, "unknown dtype");
      a.dtype = *dt;
      a.count = get_or<std::uint64_t>(aj, "count", 0, c);
      const auto dist = tasks::parse_dist(get_or<std::string>(aj, "dist", "uniform", c));
      if (!dist) bad(c, "unknown dist");
      a.gen.dist = *dist;
      a.gen.a = get_or<double>(aj, "a", -1, c);
      a.gen.b = get_or<double>(aj, "b", 1, c);
      a.gen.rows = get_or<std::int64_t>(aj, "rows", 0, c);
      a.gen.cols = get_or<std::int64_t>(aj, "cols", 0, c);
      a.gen.nnz = get_or<std::int64_t>(aj, "nnz", 0, c);
      a.gen.max_row = get_or<std::int64_t>(aj, "max_row", 0, c);
      const int pattern = get_or<int>(aj, "pattern", 0, c);
      if (pattern < 0 || pattern > 2) bad(c, "unknown csr pattern");
      a.gen.pattern = static_cast<CsrPattern>(pattern);
      if (auto why = tasks::dtype_mismatch(a.gen.dist, a.dtype)) bad(c, *why);
      if (a.gen.dist == Dist::csr_row_ptr || a.gen.dist == Dist::csr_col_idx) {
        if (a.gen.rows < 1 || a.gen.cols < 1 || a.gen.nnz < 1 || a.gen.nnz > 0x7fffffffLL ||
            a.gen.rows >= 0x7fffffffLL || a.gen.cols > 0x7fffffffLL || a.gen.max_row < 0)
          bad(c, "csr sizes out of range");
        const auto want = static_cast<std::uint64_t>(*tasks::required_elements(a.gen));
        if (a.count != want) bad(c, "csr part has " + std::to_string(a.count) + " elements, the structure needs " +
                                        std::to_string(want));
      }
      a.scalar = get_or<double>(aj, "scalar", 0, c);
      if (a.role != ArgRole::scalar && a.count == 0) bad(c, "tensor argument with 0 elements");
      w.args.push_back(a);
    }
    job.workloads.push_back(std::move(w));
  }
  if (j.contains("timing")) {
    const json& t = j.at("timing");
    job.timing.enabled = get_or<bool>(t, "enabled", true, c);
    job.timing.warmup = 0;  // not in the job: each phase's count comes with its key
    job.timing.max_warmup = get_or<int>(t, "max_warmup", 5, c);
    if (job.timing.max_warmup < 0 || job.timing.max_warmup > 1000) bad(c, "bad warm-up bound");
    job.timing.min_samples = get_or<int>(t, "min_samples", 10, c);
    job.timing.max_samples = get_or<int>(t, "max_samples", 300, c);
    job.timing.rse_target = get_or<double>(t, "rse_target", 0.005, c);
    job.timing.time_cap_s = get_or<double>(t, "time_cap_s", 2.0, c);
    job.timing.verify_bytes = get_or<std::uint64_t>(t, "verify_bytes", TimingSpec{}.verify_bytes, c);
    job.timing.batch_bytes = get_or<std::uint64_t>(t, "batch_bytes", TimingSpec{}.batch_bytes, c);
    if (job.timing.min_samples < 1 || job.timing.max_samples < job.timing.min_samples ||
        job.timing.warmup < 0)
      bad(c, "bad timing sample counts");
  }
  job.measure_overhead = get_or<bool>(j, "measure_overhead", true, c);
  job.hide_paths = get_or<std::vector<std::string>>(j, "hide_paths", {}, c);
  job.host_memory_bytes = get_or<std::uint64_t>(j, "host_memory_bytes", 8ull << 30, c);
  job.record_launches = get_or<bool>(j, "record_launches", false, c);
  const auto slots = get_or<std::string>(j, "gpu_slots", "none", c);
  if (slots == "none") job.gpu_slots = SlotsRole::none;
  else if (slots == "user") job.gpu_slots = SlotsRole::user;
  else if (slots == "owner") job.gpu_slots = SlotsRole::owner;
  else bad(c, "unknown gpu_slots role");
  job.gpu_slots_bytes = get_or<std::uint64_t>(j, "gpu_slots_bytes", 0, c);
  if (job.gpu_slots == SlotsRole::user && job.gpu_slots_bytes == 0) bad(c, "gpu_slots user without a size");
  job.input_arena_bytes = get_or<std::uint64_t>(j, "input_arena_bytes", 0, c);
  job.stay = get_or<bool>(j, "stay", false, c);
  if (job.stay && job.gpu_slots != SlotsRole::owner) bad(c, "only a GPU-resident owner stays for another job");
  if (job.input_arena_bytes > 0 && job.gpu_slots != SlotsRole::user) bad(c, "an input arena is for gpu_slots users");
  job.oracle_so_path = get_or<std::string>(j, "oracle_so_path", "", c);
  if (!job.oracle_so_path.empty() && job.gpu_slots != SlotsRole::owner) bad(c, "a replay oracle is for GPU-resident owners");
  const json tols = get_or<json>(j, "tolerances", json::object(), c);
  if (!tols.is_object()) bad(c, "tolerances must be an object");
  for (const auto& [dt, t] : tols.items()) {
    Tolerance tol{get<double>(t, "atol", c), get<double>(t, "rtol", c)};
    if (!std::isfinite(tol.atol) || !std::isfinite(tol.rtol) || tol.atol < 0 || tol.rtol < 0) bad(c, "bad tolerance");
    job.tolerances[dt] = tol;
  }
  return job;
}

const Slot* Layout::find(std::size_t workload, int seed_index, std::size_t arg) const {
  for (const auto& s : slots)
    if (s.workload == workload && s.seed_index == seed_index && s.arg == arg) return &s;
  return nullptr;
}

std::uint64_t timed_seed(std::uint64_t key, std::uint64_t index) {
  auto mix = [](std::uint64_t x) {  // splitmix64
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  return mix(key ^ mix(0x7173ED0000000000ull + index));
}

std::uint64_t output_bytes(const WireWorkload& w) {
  std::uint64_t bytes = 0;
  for (const auto& a : w.args)
    if (a.role == ArgRole::output) bytes += a.count * dtype_size(a.dtype);
  return bytes;
}

std::uint64_t call_bytes(const WireWorkload& w) {
  std::uint64_t bytes = 0;
  for (const auto& a : w.args)
    if (a.role != ArgRole::scalar) bytes += a.count * dtype_size(a.dtype);
  return bytes;
}

int timed_slots(const Job& job, std::size_t w) {
  const WireWorkload& wl = job.workloads[w];
  if (wl.replay_samples > 0) return wl.replay_samples;
  if (!job.timing.enabled || !wl.time) return 0;
  const std::uint64_t bytes = std::max<std::uint64_t>(output_bytes(wl), 1);
  const std::uint64_t batch_calls = job.timing.batch_bytes / std::max<std::uint64_t>(call_bytes(wl), 1);
  const auto warm = static_cast<std::uint64_t>(warmup_range(job.timing).second);
  const std::uint64_t fit = std::min(job.timing.verify_bytes / bytes, batch_calls > warm ? batch_calls - warm : 0);
  const std::uint64_t floor = static_cast<std::uint64_t>(std::min(job.timing.min_samples, 3));
  return static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(job.timing.max_samples),
                                                  std::max(floor, fit)));
}

bool same_launch(const LaunchRecord& a, const LaunchRecord& b) {
  return a.kernel == b.kernel && a.grid_x == b.grid_x && a.grid_y == b.grid_y && a.grid_z == b.grid_z &&
         a.block_x == b.block_x && a.block_y == b.block_y && a.block_z == b.block_z &&
         a.registers_per_thread == b.registers_per_thread && a.static_shared_bytes == b.static_shared_bytes &&
         a.dynamic_shared_bytes == b.dynamic_shared_bytes && a.local_bytes_per_thread == b.local_bytes_per_thread;
}

void merge_call_launches(std::vector<LaunchRecord>& merged, const std::vector<LaunchRecord>& first,
                         const std::vector<LaunchRecord>& call) {
  const bool same = call.size() == first.size() && std::equal(call.begin(), call.end(), first.begin(), same_launch);
  if (same) return;
  for (const auto& l : call) {
    if (merged.size() >= kMaxLaunchRecords) return;
    if (std::none_of(merged.begin(), merged.end(), [&](const LaunchRecord& m) { return same_launch(m, l); }))
      merged.push_back(l);
  }
}

std::pair<int, int> warmup_range(const TimingSpec& t) {
  if (t.max_warmup >= 0) return {std::min(1, t.max_warmup), t.max_warmup};
  const int base = std::max(t.warmup, 0);
  return {std::max(1, base - 1), base + 2};
}

int draw_warmup(const TimingSpec& t, std::uint64_t r) {
  const auto [lo, hi] = warmup_range(t);
  return lo + static_cast<int>(r % static_cast<std::uint64_t>(hi - lo + 1));
}

int timed_call_slots(const Job& job, std::size_t w) {
  const WireWorkload& wl = job.workloads[w];
  if (wl.replay_samples > 0) return wl.replay_samples;
  const int samples = timed_slots(job, w);
  return samples > 0 ? wl.train + samples + warmup_range(job.timing).second : 0;
}

ArenaPhase input_arena_phase(const Job& job, std::size_t w) {
  const WireWorkload& wl = job.workloads[w];
  ArenaPhase p;
  p.arg_offset.assign(wl.args.size(), -1);
  p.shared.assign(wl.args.size(), false);
  if (!job.timing.enabled || !wl.time) return p;
  p.calls = timed_call_slots(job, w);
  if (p.calls <= 0) return p;
  auto round = [](std::uint64_t b) { return (b + kArenaAlign - 1) / kArenaAlign * kArenaAlign; };
  for (std::size_t a = 0; a < wl.args.size(); ++a) {  // CSR parts: one host-built structure per phase
    const WireArg& arg = wl.args[a];
    if (arg.role != ArgRole::input || (arg.gen.dist != Dist::csr_row_ptr && arg.gen.dist != Dist::csr_col_idx)) continue;
    p.shared[a] = true;
    p.arg_offset[a] = static_cast<std::int64_t>(p.shared_bytes);
    p.shared_bytes += round(arg.count * dtype_size(arg.dtype));
  }
  for (std::size_t a = 0; a < wl.args.size(); ++a) {
    const WireArg& arg = wl.args[a];
    if (arg.role != ArgRole::input || p.shared[a]) continue;
    p.arg_offset[a] = static_cast<std::int64_t>(p.call_stride);
    p.call_stride += round(arg.count * dtype_size(arg.dtype));
  }
  p.bytes = p.shared_bytes + static_cast<std::uint64_t>(p.calls) * p.call_stride;
  return p;
}

std::uint64_t input_arena_bytes(const Job& job) {
  std::uint64_t most = 0;
  for (std::size_t w = 0; w < job.workloads.size(); ++w) most = std::max(most, input_arena_phase(job, w).bytes);
  return most;
}

std::string phase_line(std::size_t w, std::optional<std::uint64_t> key, int warmup, int record) {
  json j = key ? json{{"key", *key}, {"warmup", warmup}} : json{{"go", w}, {"warmup", warmup}};
  if (record >= 0) j["record"] = record;
  return j.dump();
}

PhaseStart parse_phase_line(const std::string& line, std::size_t w, bool keyless, int max_warmup) {
  constexpr const char* c = "bad_job";
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    bad(c, std::string("bad timing line: ") + e.what());
  }
  if (!j.is_object()) bad(c, "bad timing line: not an object");
  PhaseStart s;
  s.warmup = get<int>(j, "warmup", c);
  if (s.warmup < 0 || s.warmup > max_warmup) bad(c, "warm-up count out of the layout");
  s.record = get_or<int>(j, "record", -1, c);
  if (s.record < -1 || s.record >= s.warmup) bad(c, "recorded warm-up out of the phase");
  if (keyless) {
    // The inputs are in the arena already: a key here would be one the agent's process may read.
    if (j.contains("key")) bad(c, "a timing key sent to a runner that maps an input arena");
    if (get<std::uint64_t>(j, "go", c) != w) bad(c, "a go line for another workload");
  } else {
    s.key = get<std::uint64_t>(j, "key", c);
  }
  return s;
}

std::string arena_fill_line(std::size_t w, std::uint64_t key, int calls, int from) {
  return json{{"fill", w}, {"key", key}, {"from", from}, {"calls", calls}}.dump();
}

std::string snap_line(std::size_t w, int from, int calls, int train) {
  json j{{"snap", w}, {"from", from}, {"calls", calls}};
  if (train >= 0) j["train"] = train;
  return j.dump();
}

TrainSnaps train_snaps(const Job& job, const Layout& layout) {
  TrainSnaps t;
  const std::size_t n = job.workloads.size();
  t.room_start.assign(n, 0);
  t.room_bytes.assign(n, 0);
  t.base.assign(n, 0);
  std::vector<bool> seen(n, false);
  std::vector<std::uint64_t> end(n, 0);
  for (const Slot& s : layout.slots) {  // a workload's timed slots: call 0's outputs first, in order
    const WireWorkload& wl = job.workloads[s.workload];
    if (s.seed_index >= 0 || -1 - s.seed_index >= wl.train || wl.trains <= 1) continue;
    if (!seen[s.workload]) t.room_start[s.workload] = s.offset;
    seen[s.workload] = true;
    end[s.workload] = s.offset + (s.bytes + 255) / 256 * 256;
  }
  for (std::size_t w = 0; w < n; ++w) {
    if (!seen[w]) continue;
    t.room_bytes[w] = end[w] - t.room_start[w];
    t.base[w] = t.extra;
    t.extra += static_cast<std::uint64_t>(job.workloads[w].trains - 1) * t.room_bytes[w];
  }
  return t;
}

std::int64_t TrainSnaps::offset(const Job& job, const Slot& s, int t) const {
  if (s.workload >= job.workloads.size() || s.workload >= room_bytes.size()) return -1;
  const WireWorkload& wl = job.workloads[s.workload];
  if (s.seed_index >= 0 || -1 - s.seed_index >= wl.train || t < 0 || t >= wl.trains - 1 || room_bytes[s.workload] == 0)
    return -1;
  return static_cast<std::int64_t>(base[s.workload] +
                                   static_cast<std::uint64_t>(t) * room_bytes[s.workload] +
                                   (s.offset - room_start[s.workload]));
}

std::string train_line(std::size_t w, int least, double cap_s, int queue) {
  json j{{"train", w}, {"least", least}, {"cap_s", cap_s}};
  if (queue > 1) j["queue"] = queue;
  return j.dump();
}

std::string prime_line(std::size_t w) { return json{{"prime", w}}.dump(); }

bool is_prime_line(const std::string& line, std::size_t w) {
  const json j = json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("prime")) return false;
  if (j.size() != 1 || !j.at("prime").is_number_unsigned() || j.at("prime").get<std::uint64_t>() != w)
    bad("bad_job", "a prime line for another workload, or with more than its workload");
  return true;
}

bool is_train_line(const std::string& line) {
  const json j = json::parse(line, nullptr, false);
  return j.is_object() && j.contains("train");
}

TrainStart parse_train_line(const std::string& line, std::size_t w, int room) {
  constexpr const char* c = "bad_job";
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    bad(c, std::string("bad train line: ") + e.what());
  }
  const bool queued = j.is_object() && j.contains("queue");
  if (!j.is_object() || j.size() != (queued ? 4u : 3u))
    bad(c, "bad train line: not {\"train\": workload, \"least\": n, \"cap_s\": s[, \"queue\": n]}");
  if (get<std::uint64_t>(j, "train", c) != w) bad(c, "a train line for another workload");
  TrainStart t;
  t.least = get<int>(j, "least", c);
  t.cap_s = get<double>(j, "cap_s", c);
  if (queued) {
    t.queue = get<int>(j, "queue", c);
    if (t.queue < 2 || t.queue > 64) bad(c, "a train's queue depth out of range (2..64)");
  }
  if (t.least < 1 || t.least > room) bad(c, "a train's least calls outside the layout's room");
  if (!std::isfinite(t.cap_s) || t.cap_s < 0 || t.cap_s > 3600) bad(c, "a train's time cap out of range");
  return t;
}

Layout output_layout(const Job& job) {
  Layout layout;
  auto add = [&](std::size_t w, int seed, std::size_t a) {
    const WireArg& arg = job.workloads[w].args[a];
    Slot s{w, seed, a, arg.dtype, arg.count, layout.total_bytes, arg.count * dtype_size(arg.dtype)};
    layout.total_bytes += (s.bytes + 255) / 256 * 256;  // the train's calls write slots directly: cudaMalloc's alignment
    layout.slots.push_back(s);
  };
  for (std::size_t w = 0; w < job.workloads.size(); ++w)
    for (int seed = 0; seed < static_cast<int>(job.seeds.size()); ++seed)
      for (std::size_t a = 0; a < job.workloads[w].args.size(); ++a)
        if (job.workloads[w].args[a].role == ArgRole::output) add(w, seed, a);
  for (std::size_t w = 0; w < job.workloads.size(); ++w)
    for (int i = 0; i < timed_call_slots(job, w); ++i)
      for (std::size_t a = 0; a < job.workloads[w].args.size(); ++a)
        if (job.workloads[w].args[a].role == ArgRole::output) add(w, -1 - i, a);
  return layout;
}

json to_json(const TimingResult& t) {
  return {{"samples", t.samples}, {"median_s", t.median_s}, {"min_s", t.min_s}, {"mean_s", t.mean_s},
          {"cv", t.cv}, {"rse", t.rse}, {"event_median_s", t.event_median_s},
          {"wall_median_s", t.wall_median_s}, {"phase_s", t.phase_s},
          {"sm_clock_start_mhz", t.sm_clock_start_mhz}, {"sm_clock_end_mhz", t.sm_clock_end_mhz},
          {"sm_clock_max_mhz", t.sm_clock_max_mhz}, {"throttled", t.throttled},
          {"stopped_by_cap", t.stopped_by_cap}};
}

json to_json(const RunnerResult& r) {
  json wls = json::array();
  for (const auto& w : r.workloads) {
    json wj = {{"name", w.name}};
    if (w.timing) wj["timing"] = to_json(*w.timing);
    if (w.batch_in_s > 0) wj["batch_in_s"] = w.batch_in_s;
    if (w.train_fill_s > 0) wj["train_fill_s"] = w.train_fill_s;
    if (w.batch_out_s > 0) wj["batch_out_s"] = w.batch_out_s;
    if (!w.replay_parts.empty()) {
      json parts = json::array();
      for (const auto& [part, s] : w.replay_parts) parts.push_back(json::array({part, s}));
      wj["replay_parts"] = parts;
    }
    if (!w.checks.empty()) {
      json cs = json::array();
      for (const auto& ch : w.checks) cs.push_back(ch.to_json());
      wj["checks"] = cs;
    }
    if (w.launches) {
      json ls = json::array();
      for (const auto& l : *w.launches) ls.push_back(to_json(l));
      wj["launches"] = ls;
    }
    wls.push_back(wj);
  }
  json out = {{"event", "result"}, {"status", sandbox::to_string(r.status)}, {"message", r.message}, {"flags", r.flags},
              {"workloads", wls}, {"overhead_s", r.overhead_s},
              {"sample_overhead_s", r.sample_overhead_s}, {"init_s", r.init_s}};
  if (!r.launches_error.empty()) out["launches_error"] = r.launches_error;
  if (!r.input_arena.empty()) out["input_arena"] = r.input_arena;
  return out;
}

RunnerResult result_from_json(const json& j) {
  constexpr const char* c = "bad_result";
  RunnerResult r;
  const auto status_name = get<std::string>(j, "status", c);
  const auto status = sandbox::outcome_from_string(status_name);
  if (!status) bad(c, "unknown status '" + status_name.substr(0, 64) + "'");
  r.status = *status;
  r.message = get_or<std::string>(j, "message", "", c);
  r.flags = get_or<std::vector<std::string>>(j, "flags", {}, c);
  r.overhead_s = get_or<double>(j, "overhead_s", 0, c);
  r.sample_overhead_s = get_or<double>(j, "sample_overhead_s", 0, c);
  r.init_s = get_or<double>(j, "init_s", 0, c);
  r.launches_error = get_or<std::string>(j, "launches_error", "", c);
  r.input_arena = get_or<std::string>(j, "input_arena", "", c);
  const json wls = get_or<json>(j, "workloads", json::array(), c);
  if (!wls.is_array()) bad(c, "workloads must be an array");
  for (const auto& wj : wls) {
    WorkloadResult w;
    w.name = get<std::string>(wj, "name", c);
    w.batch_in_s = get_or<double>(wj, "batch_in_s", 0, c);
    w.train_fill_s = get_or<double>(wj, "train_fill_s", 0, c);
    if (!std::isfinite(w.train_fill_s) || w.train_fill_s < 0) bad(c, "bad train fill time");
    w.batch_out_s = get_or<double>(wj, "batch_out_s", 0, c);
    const json parts = get_or<json>(wj, "replay_parts", json::array(), c);
    if (!parts.is_array() || parts.size() > 16) bad(c, "replay_parts must be an array of at most 16 parts");
    for (const auto& pj : parts) {
      if (!pj.is_array() || pj.size() != 2 || !pj[0].is_string() || !pj[1].is_number()) bad(c, "a replay part is [name, seconds]");
      const double s = pj[1].get<double>();
      if (!std::isfinite(s) || s < 0) bad(c, "a replay part's time out of range");
      w.replay_parts.emplace_back(pj[0].get<std::string>().substr(0, 32), s);
    }
    const json checks = get_or<json>(wj, "checks", json::array(), c);
    if (!checks.is_array()) bad(c, "checks must be an array");
    for (const auto& cj : checks) w.checks.push_back(check_from_json(cj));
    if (!std::isfinite(w.batch_in_s) || w.batch_in_s < 0 || !std::isfinite(w.batch_out_s) || w.batch_out_s < 0)
      bad(c, "batch times out of range");
    if (wj.contains("timing")) {
      const json& t = wj.at("timing");
      TimingResult tr;
      tr.samples = get<int>(t, "samples", c);
      tr.median_s = get<double>(t, "median_s", c);
      tr.min_s = get<double>(t, "min_s", c);
      tr.mean_s = get_or<double>(t, "mean_s", 0, c);
      tr.cv = get_or<double>(t, "cv", 0, c);
      tr.rse = get_or<double>(t, "rse", 0, c);
      tr.event_median_s = get_or<double>(t, "event_median_s", 0, c);
      tr.wall_median_s = get_or<double>(t, "wall_median_s", 0, c);
      tr.phase_s = get_or<double>(t, "phase_s", 0, c);
      tr.sm_clock_start_mhz = get_or<unsigned>(t, "sm_clock_start_mhz", 0, c);
      tr.sm_clock_end_mhz = get_or<unsigned>(t, "sm_clock_end_mhz", 0, c);
      tr.sm_clock_max_mhz = get_or<unsigned>(t, "sm_clock_max_mhz", 0, c);
      tr.throttled = get_or<bool>(t, "throttled", false, c);
      tr.stopped_by_cap = get_or<bool>(t, "stopped_by_cap", false, c);
      if (tr.samples < 0 || !std::isfinite(tr.median_s) || tr.median_s < 0 || !std::isfinite(tr.min_s))
        bad(c, "timing values out of range");
      w.timing = tr;
    }
    if (wj.contains("launches")) {
      const json& ls = wj.at("launches");
      if (!ls.is_array() || ls.size() > kMaxLaunchRecords) bad(c, "launches must be an array of at most 4096 records");
      std::vector<LaunchRecord> recs;
      for (const auto& lj : ls) recs.push_back(launch_from_json(lj));
      w.launches = std::move(recs);
    }
    r.workloads.push_back(std::move(w));
  }
  return r;
}

json TensorCheck::to_json() const {
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(std::to_string(v)); };
  json j = {{"arg", arg},           {"seed_index", seed_index}, {"count", count},
            {"mismatches", mismatches}, {"nonfinite", nonfinite}, {"max_abs", num(max_abs)},
            {"max_rel", num(max_rel)}, {"first_bad", first_bad}};
  if (first_bad >= 0) {
    j["first_bad_got"] = num(first_bad_got);
    j["first_bad_want"] = num(first_bad_want);
  }
  if (arg_index > 0) j["arg_index"] = arg_index;
  if (span > 1) j["span"] = span;
  return j;
}

std::vector<TensorCheck> merge_timed_checks(std::vector<TensorCheck> checks, std::size_t keep_failing) {
  std::vector<TensorCheck> out;
  out.reserve(checks.size());
  std::size_t kept = 0;
  bool last_kept = false;  // the last one out is a failing check kept on its own
  for (TensorCheck& c : checks) {
    if (c.seed_index < 0 && !c.ok() && kept < keep_failing) {
      ++kept;
      out.push_back(std::move(c));
      last_kept = true;
      continue;
    }
    if (!out.empty() && !last_kept) {
      TensorCheck& last = out.back();
      const bool follows = c.seed_index < 0 && last.seed_index < 0 && c.arg_index == last.arg_index &&
                           c.ok() == last.ok() &&
                           static_cast<long long>(c.seed_index) == static_cast<long long>(last.seed_index) - last.span;
      if (follows && last.span < 1000000) {
        last.count += c.count;
        last.mismatches += c.mismatches;
        last.nonfinite += c.nonfinite;
        last.max_abs = std::max(last.max_abs, c.max_abs);
        last.max_rel = std::max(last.max_rel, c.max_rel);
        ++last.span;
        continue;
      }
    }
    out.push_back(std::move(c));
    last_kept = false;
  }
  return out;
}

TensorCheck check_from_json(const json& j) {
  constexpr const char* c = "bad_result";
  // Non-finite values travel as strings ("inf", "nan"); anything else must be a number.
  auto num = [&](const char* key) -> double {
    if (!j.contains(key)) return 0;
    const json& v = j.at(key);
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (s.find("nan") != std::string::npos) return std::nan("");
      if (s.find("inf") != std::string::npos) return s[0] == '-' ? -INFINITY : INFINITY;
    }
    bad(c, std::string("check field '") + key + "' is not a number");
  };
  if (!j.is_object()) bad(c, "a check must be an object");
  TensorCheck t;
  t.arg = get_or<std::string>(j, "arg", "", c);
  t.seed_index = get<int>(j, "seed_index", c);
  t.count = get<std::uint64_t>(j, "count", c);
  t.mismatches = get<std::uint64_t>(j, "mismatches", c);
  t.nonfinite = get_or<std::uint64_t>(j, "nonfinite", 0, c);
  t.max_abs = num("max_abs");
  t.max_rel = num("max_rel");
  t.first_bad = get_or<std::int64_t>(j, "first_bad", -1, c);
  t.first_bad_got = num("first_bad_got");
  t.first_bad_want = num("first_bad_want");
  t.arg_index = get_or<std::size_t>(j, "arg_index", 0, c);
  t.span = get_or<std::uint32_t>(j, "span", 1, c);
  if (t.mismatches > t.count || t.nonfinite > t.mismatches || t.first_bad < -1) bad(c, "check counts out of range");
  if (t.span < 1 || t.span > 1000000 || (t.span > 1 && t.seed_index >= 0)) bad(c, "check span out of range");
  return t;
}

json to_json(const DeviceInfo& d) {
  return {{"name", d.name}, {"pci_bus_id", d.pci_bus_id}, {"driver", d.driver},
          {"cuda_driver_version", d.cuda_driver_version}, {"runtime_version", d.runtime_version},
          {"sm_count", d.sm_count}, {"cc_major", d.cc_major}, {"cc_minor", d.cc_minor},
          {"memory_bytes", d.memory_bytes}, {"l2_bytes", d.l2_bytes}, {"nvml", d.nvml},
          {"memory_clock_khz", d.memory_clock_khz}, {"memory_bus_bits", d.memory_bus_bits}};
}

DeviceInfo device_from_json(const json& j) {
  constexpr const char* c = "bad_result";
  DeviceInfo d;
  d.name = get<std::string>(j, "name", c);
  d.pci_bus_id = get_or<std::string>(j, "pci_bus_id", "", c);
  d.driver = get_or<std::string>(j, "driver", "", c);
  d.cuda_driver_version = get_or<int>(j, "cuda_driver_version", 0, c);
  d.runtime_version = get_or<int>(j, "runtime_version", 0, c);
  d.sm_count = get_or<int>(j, "sm_count", 0, c);
  d.cc_major = get_or<int>(j, "cc_major", 0, c);
  d.cc_minor = get_or<int>(j, "cc_minor", 0, c);
  d.memory_bytes = get_or<std::uint64_t>(j, "memory_bytes", 0, c);
  d.l2_bytes = get_or<std::uint64_t>(j, "l2_bytes", 0, c);
  d.nvml = get_or<bool>(j, "nvml", false, c);
  d.memory_clock_khz = get_or<int>(j, "memory_clock_khz", 0, c);
  d.memory_bus_bits = get_or<int>(j, "memory_bus_bits", 0, c);
  if (d.memory_clock_khz < 0 || d.memory_bus_bits < 0) bad(c, "memory clock or bus width out of range");
  return d;
}

json to_json(const LaunchRecord& l) {
  return {{"kernel", l.kernel},
          {"grid", {l.grid_x, l.grid_y, l.grid_z}},
          {"block", {l.block_x, l.block_y, l.block_z}},
          {"registers_per_thread", l.registers_per_thread},
          {"static_shared_bytes", l.static_shared_bytes},
          {"dynamic_shared_bytes", l.dynamic_shared_bytes},
          {"local_bytes_per_thread", l.local_bytes_per_thread}};
}

LaunchRecord launch_from_json(const json& j) {
  constexpr const char* c = "bad_result";
  // Every number a non-negative 32-bit integer (nlohmann would wrap a negative one silently).
  auto u32 = [&](const json& v, const char* what) -> std::uint32_t {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 0xFFFFFFFFll)
      bad(c, std::string("launch record field '") + what + "' is not a 32-bit count");
    return static_cast<std::uint32_t>(v.get<std::int64_t>());
  };
  if (!j.is_object()) bad(c, "a launch record must be an object");
  LaunchRecord l;
  l.kernel = get_or<std::string>(j, "kernel", "", c);
  if (l.kernel.size() > 4096) bad(c, "kernel name too long");
  const json grid = get<json>(j, "grid", c);
  const json block = get<json>(j, "block", c);
  if (!grid.is_array() || !block.is_array() || grid.size() != 3 || block.size() != 3)
    bad(c, "grid and block must have 3 dimensions");
  l.grid_x = u32(grid[0], "grid"); l.grid_y = u32(grid[1], "grid"); l.grid_z = u32(grid[2], "grid");
  l.block_x = u32(block[0], "block"); l.block_y = u32(block[1], "block"); l.block_z = u32(block[2], "block");
  l.registers_per_thread = u32(get<json>(j, "registers_per_thread", c), "registers_per_thread");
  l.static_shared_bytes = u32(get<json>(j, "static_shared_bytes", c), "static_shared_bytes");
  l.dynamic_shared_bytes = u32(get<json>(j, "dynamic_shared_bytes", c), "dynamic_shared_bytes");
  l.local_bytes_per_thread = u32(get<json>(j, "local_bytes_per_thread", c), "local_bytes_per_thread");
  return l;
}

}  // namespace d2k::runner
