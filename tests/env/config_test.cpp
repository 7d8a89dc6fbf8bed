// The server config: every key round-trips file → Config → to_json; every flag overrides the file
// even when given at its default value; unknown keys and bad values are refused naming the key.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <type_traits>

#include "catch.hpp"
#include "env/cli/config_flags.hpp"
#include "env/config.hpp"
#include "env/server.hpp"

using d2k::env::Config;
using d2k::env::ConfigKey;
using nlohmann::json;

namespace {

struct TempDir {
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "d2k-config-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
};

// A value of the member's type that differs from `v` (and stays valid).
template <typename T>
T other_than(const T& v, std::string_view key) {
  if constexpr (std::is_same_v<T, bool>) return !v;
  else if constexpr (std::is_same_v<T, double>) return v + 1.5;
  else if constexpr (std::is_integral_v<T>) return v + 7;
  else if constexpr (std::is_same_v<T, std::filesystem::path>) return "/from/the/file/" + std::string(key);
  else if constexpr (std::is_same_v<T, d2k::env::RewardConfig>) return d2k::env::RewardConfig::from_json({{"preset", "kevin"}});
  else if (key == "log_level") return v == "debug" ? std::string("warn") : std::string("debug");
  else return v + "-from-file";
}

template <typename T>
bool same(const T& a, const T& b) {
  if constexpr (std::is_same_v<T, d2k::env::RewardConfig>) return a.to_json() == b.to_json();
  else return a == b;
}

// The value as a command-line argument.
template <typename T>
std::string arg_of(const T& v) {
  if constexpr (std::is_same_v<T, std::filesystem::path>) return v.string();
  else if constexpr (std::is_same_v<T, std::string>) return v;
  else if constexpr (std::is_same_v<T, d2k::env::RewardConfig>) return v.to_json().dump();  // no flag
  else return json(v).dump();
}

// {"a.b": v} → {"a": {"b": v}}
json nest(std::string_view key, json value) {
  json j = json::object();
  auto dot = key.find('.');
  if (dot == std::string_view::npos) j[std::string(key)] = std::move(value);
  else j[std::string(key.substr(0, dot))][std::string(key.substr(dot + 1))] = std::move(value);
  return j;
}

json at_key(const json& j, std::string_view key) {
  auto dot = key.find('.');
  if (dot == std::string_view::npos) return j.at(std::string(key));
  return j.at(std::string(key.substr(0, dot))).at(std::string(key.substr(dot + 1)));
}

// `d2k serve`'s config flags, parsed from args.
struct Flags {
  Flags() : app("d2k serve"), flags(app) {}
  CLI::App app;
  d2k::cli::ConfigFlags flags;
  Config read(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
    return flags.read();
  }
};

std::string write_file(const TempDir& dir, const json& j) {
  const auto file = dir.path / "config.json";
  std::ofstream(file) << j.dump();
  return file.string();
}

std::set<std::string> flattened_keys(const json& j) {
  std::set<std::string> keys;
  for (const auto& [k, v] : j.items()) {
    if (v.is_object() && k != "reward")
      for (const auto& [k2, v2] : v.items()) keys.insert(k + "." + k2);
    else
      keys.insert(k);
  }
  return keys;
}

}  // namespace

TEST_CASE("every config key round-trips file → Config → to_json", "[config]") {
  const Config defaults;
  std::set<std::string> listed;
  Config::for_each_key([&](const ConfigKey& k, auto member_of) {
    listed.emplace(k.key);
    DYNAMIC_SECTION(k.key) {
      // gpu_resident has one legal value: false is refused (threat model class 11; its own test below).
      if (k.key == std::string_view("gpu_resident")) {
        CHECK(Config::from_json(defaults.to_json()).gpu_resident);
        return;
      }
      auto value = other_than(member_of(defaults), k.key);
      Config written;
      member_of(written) = value;
      const json file_value = at_key(written.to_json(), k.key);
      Config read = Config::from_json(nest(k.key, file_value));
      CHECK(same(member_of(read), value));
      CHECK(at_key(read.to_json(), k.key) == file_value);
      // Every other key kept its default.
      json expected = defaults.to_json();
      json got = read.to_json();
      CHECK(got.size() == expected.size());
      for (const auto& key : flattened_keys(expected))
        if (key != k.key) CHECK(at_key(got, key) == at_key(expected, key));
    }
  });
  // to_json writes exactly the listed keys, and the whole config round-trips.
  CHECK(flattened_keys(defaults.to_json()) == listed);
  CHECK(Config::from_json(defaults.to_json()).to_json() == defaults.to_json());
}

TEST_CASE("gpu_resident false is refused: agent code never takes the host path (threat model class 11)", "[config]") {
  // On the host path the timed inputs' key is written into the agent's runner; a server must not be
  // configurable into it. The error names the key and the reason.
  CHECK_THROWS_WITH(Config::from_json({{"gpu_resident", false}}),
                    Catch::Contains("'gpu_resident' is false") && Catch::Contains("class 11"));
  Config c;
  c.gpu_resident = false;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("verify-tasks --host-path"));
  CHECK(Config::from_json({{"gpu_resident", true}}).gpu_resident);
}

TEST_CASE("a flag given on the command line overrides the config file, even at its default value", "[config]") {
  TempDir dir;
  const Config defaults;
  int flags = 0;
  Config::for_each_key([&](const ConfigKey& k, auto member_of) {
    if (k.flag.empty()) return;
    ++flags;
    DYNAMIC_SECTION(k.flag) {
      auto in_file = other_than(member_of(defaults), k.key);
      Config file_config;
      member_of(file_config) = in_file;
      const std::string file = write_file(dir, nest(k.key, at_key(file_config.to_json(), k.key)));
      SECTION("not given: the file's value") {
        Flags f;
        const Config c = f.read({"--config", file});
        CHECK(same(member_of(c), in_file));
      }
      SECTION("given at its default: the default") {
        Flags f;
        std::vector<std::string> args = {"--config", file};
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(in_file)>, bool>)
          args.push_back(member_of(defaults) ? std::string(k.flag) : "--no-" + std::string(k.flag.substr(2)));
        else
          args.insert(args.end(), {std::string(k.flag), arg_of(member_of(defaults))});
        const Config c = f.read(args);
        CHECK(same(member_of(c), member_of(defaults)));
        CHECK(c.to_json() == defaults.to_json());
      }
    }
  });
  CHECK(flags == 24);  // 16, + --server-key, --allowed-keys, --events-source (curve), + five compile budgets (tenants)
}

TEST_CASE("--no-record and --record", "[config]") {
  TempDir dir;
  const std::string file = write_file(dir, {{"record", true}});
  CHECK_FALSE(Flags{}.read({"--config", file, "--no-record"}).record);
  CHECK_FALSE(Flags{}.read({"--no-record"}).record);
  CHECK(Flags{}.read({}).record);
}

TEST_CASE("the config file refuses unknown keys and bad values, naming the key", "[config]") {
  auto refused = [](const json& j) {
    try {
      Config::from_json(j);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused({{"max_sesions", 3}}) == "config: unknown key 'max_sesions'");
  CHECK(refused({{"default_budget", {{"max_step", 3}}}}) == "config: unknown key 'default_budget.max_step'");
  CHECK(refused({{"limits", json::object()}}) == "config: unknown key 'limits'");
  CHECK(refused({{"default_budget", 3}}) == "config: 'default_budget' must be an object");
  CHECK(refused({{"max_sessions", "many"}}).find("'max_sessions' must be a whole number") != std::string::npos);
  CHECK(refused({{"max_sessions", -1}}).find("'max_sessions' must be a whole number") != std::string::npos);
  CHECK(refused({{"max_sessions", 1.5}}).find("'max_sessions' must be a whole number") != std::string::npos);
  CHECK(refused({{"max_sessions", 5000000000}}).find("'max_sessions' must be a whole number") != std::string::npos);
  CHECK(refused({{"max_budget", {{"wall_seconds", "long"}}}}) == "config: 'max_budget.wall_seconds' must be a number");
  CHECK(refused({{"record", 1}}) == "config: 'record' must be true or false");
  CHECK(refused({{"tasks_dir", 1}}) == "config: 'tasks_dir' must be a string");
  CHECK(refused({{"reward", {{"preset", "nope"}}}}).rfind("config: 'reward': ", 0) == 0);
  CHECK(refused({{"log_level", "verbose"}}).find("'log_level' is 'verbose'") != std::string::npos);
  CHECK(refused(json::array()) == "config: the config must be a JSON object");
  for (auto level : d2k::env::kLogLevels) CHECK(Config::from_json({{"log_level", level}}).log_level == level);
}

TEST_CASE("--log-level is validated like the file's log_level", "[config]") {
  CHECK(Flags{}.read({"--log-level", "debug"}).log_level == "debug");
  CHECK(Flags{}.read({}).log_level == "info");
  CHECK_THROWS_AS(Flags{}.read({"--log-level", "loud"}), std::invalid_argument);
}

TEST_CASE("a bad config file is an error that names the file and the key", "[config]") {
  TempDir dir;
  const std::string file = write_file(dir, {{"endpoint", "ipc:///x"}, {"colour", "blue"}});
  try {
    Flags{}.read({"--config", file});
    FAIL("accepted an unknown key");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "config file " + file + ": config: unknown key 'colour'");
  }
  CHECK_THROWS_AS(Flags{}.read({"--config", (dir.path / "missing.json").string()}), std::runtime_error);
}

TEST_CASE("load finalizes once: paths derived from the state dir, tasks dir absolute", "[config]") {
  TempDir dir;
  const std::string file = write_file(dir, {{"state_dir", "/srv/d2k"}, {"tasks_dir", "tasks-here"}});
  Flags f;
  f.read({"--config", file, "--catalogue", "/db/cat.sqlite"});
  Config c = f.flags.load("/built/in/tasks");
  CHECK(c.finalized());
  CHECK(c.state_dir == "/srv/d2k");
  CHECK(c.log_dir == "/srv/d2k/episodes");
  CHECK(c.catalogue == "/db/cat.sqlite");
  CHECK(c.tasks_dir == std::filesystem::absolute("tasks-here"));
  CHECK(c.compile_workers >= 1);
  Flags g;
  g.read({});
  CHECK(g.flags.load("/built/in/tasks").tasks_dir == "/built/in/tasks");
}

TEST_CASE("hidden paths: tasks, state, episode logs and the catalogue, from one function", "[config]") {
  Config c;
  CHECK_THROWS_AS(c.hidden_paths(), std::logic_error);
  c.tasks_dir = "/t";
  c.state_dir = "/s";
  c.log_dir = "/logs";
  c.catalogue = "/db/cat.sqlite";
  c.finalize();
  std::vector<std::filesystem::path> expected = {"/t", "/s", "/logs", "/db/cat.sqlite", "/db/cat.sqlite-wal",
                                                 "/db/cat.sqlite-shm"};
  CHECK(c.hidden_paths() == expected);
}

TEST_CASE("the server takes a finalized config only", "[config]") {
  Config c;
  c.tasks_dir = D2K_TASKS_DIR;
  CHECK_THROWS_AS(d2k::env::Server(c, d2k::tasks::TaskSet{}), std::logic_error);
}
