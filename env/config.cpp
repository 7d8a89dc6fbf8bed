#include "env/config.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <set>
#include <stdexcept>
#include <thread>
#include <type_traits>

namespace d2k::env {

using nlohmann::json;

void Config::finalize() {
  if (state_dir.empty()) {
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
      state_dir = std::filesystem::path(x) / "d2k";
    else if (const char* h = std::getenv("HOME"); h && *h)
      state_dir = std::filesystem::path(h) / ".cache" / "d2k";
    else
      state_dir = "/tmp/d2k-" + std::to_string(::getuid());
  }
  if (log_dir.empty()) log_dir = state_dir / "episodes";
  if (catalogue.empty()) catalogue = state_dir / "catalogue.sqlite";
  if (compile_workers == 0) compile_workers = std::max(1u, std::thread::hardware_concurrency());
}

bool Config::finalized() const {
  return !state_dir.empty() && !log_dir.empty() && !catalogue.empty() && compile_workers > 0;
}

void Config::validate() const {
  if (std::find(kLogLevels.begin(), kLogLevels.end(), log_level) == kLogLevels.end())
    throw std::invalid_argument("config: 'log_level' is '" + log_level +
                                "'; expected one of trace, debug, info, warn, error, off");
  // nvcc alone needs a few hundred MiB and a handful of processes (nvcc, sh, cicc, ptxas, gcc).
  if (compile_jail_memory_bytes < (256ull << 20))
    throw std::invalid_argument("config: 'compile_jail_memory_bytes' is " + std::to_string(compile_jail_memory_bytes) +
                                "; a compile needs at least 268435456 (256 MiB)");
  // Class 11 of the threat model: on the host path the phase's input key enters the process that
  // runs agent code. A server evaluates agent code on the GPU-resident path only; the host path is
  // for trusted kernels (`d2k verify-tasks --host-path`), the evaluator's tests and benches.
  if (!gpu_resident)
    throw std::invalid_argument(
        "config: 'gpu_resident' is false, which a server no longer allows: on the host path the timed inputs' key "
        "enters the process that runs agent code (docs/threat-model.md, class 11); agent code is evaluated on the "
        "GPU-resident path only (the host path remains for trusted kernels: d2k verify-tasks --host-path)");
  if (compile_jail_pids < 8)
    throw std::invalid_argument("config: 'compile_jail_pids' is " + std::to_string(compile_jail_pids) +
                                "; a compile runs up to 8 processes at once (nvcc, sh, cicc, ptxas, gcc, ...)");
}

std::vector<std::filesystem::path> Config::hidden_paths() const {
  if (!finalized()) throw std::logic_error("Config::hidden_paths needs a finalized Config");
  // The catalogue runs in WAL mode: its -wal and -shm files sit beside it.
  std::vector<std::filesystem::path> hidden = {tasks_dir, state_dir, log_dir, catalogue,
                                               catalogue.string() + "-wal", catalogue.string() + "-shm"};
  for (const auto& key_file : {server_key, allowed_keys})  // the server's secret key above all
    if (!key_file.empty()) hidden.push_back(key_file);
  return hidden;
}

namespace {

// "default_budget.max_steps" → {"default_budget", "max_steps"}.
std::pair<std::string, std::string> split_key(std::string_view key) {
  auto dot = key.find('.');
  if (dot == std::string_view::npos) return {std::string(key), {}};
  return {std::string(key.substr(0, dot)), std::string(key.substr(dot + 1))};
}

template <typename T>
json value_json(const T& v) {
  if constexpr (std::is_same_v<T, std::filesystem::path>) return v.string();
  else if constexpr (std::is_same_v<T, RewardConfig>) return v.to_json();
  else return v;
}

[[noreturn]] void wrong(std::string_view key, const std::string& expected) {
  throw std::invalid_argument("config: '" + std::string(key) + "' must be " + expected);
}

template <typename T>
void read_value(const json& j, std::string_view key, T& out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) wrong(key, "true or false");
    out = j.get<bool>();
  } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::filesystem::path>) {
    if (!j.is_string()) wrong(key, "a string");
    out = j.get<std::string>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (!j.is_number()) wrong(key, "a number");
    out = j.get<double>();
  } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
    // JSON parsers type 3 as unsigned, -3 as signed and 3.0 as float: only the first fits.
    if (!j.is_number_unsigned() || j.get<std::uint64_t>() > std::numeric_limits<T>::max())
      wrong(key, "a whole number from 0 to " + std::to_string(std::numeric_limits<T>::max()));
    out = j.get<T>();
  } else if constexpr (std::is_same_v<T, RewardConfig>) {
    try {
      out = RewardConfig::from_json(j);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("config: 'reward': " + std::string(e.what()));
    }
  } else {
    static_assert(sizeof(T) == 0, "a config key of a type read_value does not know");
  }
}

}  // namespace

json Config::to_json() const {
  json j = json::object();
  for_each_key([&](const ConfigKey& k, auto member_of) {
    auto [outer, inner] = split_key(k.key);
    json value = value_json(member_of(*this));
    if (inner.empty()) j[outer] = std::move(value);
    else j[outer][inner] = std::move(value);
  });
  return j;
}

Config Config::from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("config: the config must be a JSON object");
  // Every key the file may hold: the keys, and the objects that group some of them.
  std::set<std::string, std::less<>> keys, objects;
  for_each_key([&](const ConfigKey& k, auto) {
    keys.emplace(k.key);
    if (auto [outer, inner] = split_key(k.key); !inner.empty()) objects.insert(outer);
  });
  for (const auto& [outer, value] : j.items()) {
    if (objects.count(outer)) {
      if (!value.is_object()) wrong(outer, "an object");
      for (const auto& [inner, ignored] : value.items())
        if (!keys.count(outer + "." + inner)) throw std::invalid_argument("config: unknown key '" + outer + "." + inner + "'");
    } else if (!keys.count(outer)) {
      throw std::invalid_argument("config: unknown key '" + outer + "'");
    }
  }
  Config c;
  for_each_key([&](const ConfigKey& k, auto member_of) {
    auto [outer, inner] = split_key(k.key);
    auto it = j.find(outer);
    if (it == j.end()) return;
    if (inner.empty()) return read_value(*it, k.key, member_of(c));
    auto in = it->find(inner);
    if (in != it->end()) read_value(*in, k.key, member_of(c));
  });
  c.validate();
  return c;
}

}  // namespace d2k::env
