// Issue 15 target 5 with recording on: an observe is logged from the session's cached reply, as a
// patch made once per (generation, base) with the reply's id and clock set in it, with no live event
// while nobody watches and no fdatasync of its own. These tests fail if the patch is made per
// observe, if a logged reply differs from the one sent, if an event is lost for a watcher, or if an
// observe asks for (or never gets) its fdatasync.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <tuple>

#include "catch.hpp"
#include "env/episode_log.hpp"
#include "env/recorder.hpp"
#include "server_fixture.hpp"

using d2k::Client;
using d2k::protocol::Value;
using nlohmann::json;
namespace fs = std::filesystem;
using namespace d2k::env;

namespace {

using d2k::test::temp_dir;

struct Fixture {
  d2k::tasks::TaskSet set = d2k::tasks::load_tasks(D2K_TASKS_DIR);
  const d2k::tasks::Task& task() {
    const d2k::tasks::Task* t = set.find("vector_add");
    REQUIRE(t);
    return *t;
  }
};

const json kResetRequest = {{"v", 1}, {"id", 1}, {"op", "reset"}, {"task", "vector_add"}, {"layer", 1}};

json reset_reply(const Episode& ep) {
  return {{"v", 1},           {"id", 1},
          {"ok", true},       {"session", ep.id()},
          {"instance", "i"},  {"observation", ep.observation()},
          {"info", ep.info()}};
}

// The records of a log file as written (the reader rebuilds compact ones; this shows them).
std::vector<json> raw_records(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<json> out;
  for (std::size_t at = kLogPreambleBytes; at + kLogRecordOverhead <= bytes.size();) {
    std::uint32_t len = 0;
    std::memcpy(&len, bytes.data() + at, 4);
    out.push_back(json::from_msgpack(bytes.substr(at + kLogRecordOverhead, len)));
    at += kLogRecordOverhead + len;
  }
  return out;
}

}  // namespace

TEST_CASE("record_observe: one patch per generation and base, every reply read back exactly", "[recorder]") {
  Fixture fx;
  const fs::path dir = temp_dir("d2k-recobs");
  std::vector<std::string> event_kinds;
  bool watched = false;
  RecorderConfig rc;
  rc.log_dir = dir / "episodes";
  rc.sync = false;
  rc.on_event = [&](const std::string&, const json& event) { event_kinds.push_back(event.value("kind", "")); };
  rc.watched = [&] { return watched; };
  Recorder rec(rc);
  Episode ep("s1", fx.task(), 1, 7, Budget{}, "", Workspace::Limits{});
  const json reset = reset_reply(ep);
  REQUIRE(rec.begin(ep, kResetRequest, reset, 10.0, 10.5));
  std::vector<json> sent{reset};
  std::uint64_t id = 2;
  int built = 0;  // how often the recorder asked for a whole reply
  auto observe = [&](std::uint64_t generation) {
    const json request = {{"v", 1}, {"id", id}, {"op", "observe"}, {"session", "s1"}};
    const double clock = 0.001 * static_cast<double>(id);
    json reply = {{"v", 1}, {"id", id}, {"ok", true}, {"observation", ep.observation()}, {"info", ep.info()}};
    reply["observation"]["budget"]["seconds_used"] = clock;
    auto whole = [&] {
      ++built;
      return reply;
    };
    CHECK(rec.record_observe(ep, request, generation, id, clock, whole, 11.0, 11.1));
    sent.push_back(reply);
    ++id;
  };
  for (int i = 0; i < 20; ++i) observe(1);
  CHECK(built == 1);  // the patch of generation 1 from the reset's reply, made once
  // A step changes the base: the same generation is patched again from the new base.
  ep.workspace().write("kernel.cu", "// changed\n");
  ep.record_step({{"action", "write_file"}, {"ok", true}}, 0.0);
  json step = {{"v", 1},
               {"id", id},
               {"ok", true},
               {"observation", ep.observation()},
               {"reward", 0.0},
               {"terminated", false},
               {"truncated", false},
               {"info", ep.info()}};
  REQUIRE(rec.record(ep, {{"v", 1}, {"id", id}, {"op", "step"}, {"session", "s1"}, {"action", {{"type", "compile"}}}},
                     step, 12.0, 12.1));
  sent.push_back(step);
  ++id;
  for (int i = 0; i < 5; ++i) observe(1);
  CHECK(built == 2);
  for (int i = 0; i < 5; ++i) observe(2);
  CHECK(built == 3);
  rec.prime_observe(ep, 3, sent.back());  // (made before the first observe of generation 3)
  for (int i = 0; i < 3; ++i) observe(3);
  CHECK(built == 3);
  CHECK(event_kinds == std::vector<std::string>{"begin", "exchange"});  // the step's: no observe's unwatched
  for (int i = 0; i < 3; ++i) observe(0);  // generation 0: logged (and published) by record(), whole
  CHECK(built == 6);
  CHECK(event_kinds.size() == 5);
  watched = true;  // a watcher: every observe is published whole
  observe(3);
  CHECK(event_kinds.size() == 6);
  CHECK(event_kinds.back() == "exchange");

  const fs::path path = rec.log_path("s1");
  ep.end("closed");
  rec.end(ep, "closed");
  EpisodeLog log = read_episode_log(path);
  CHECK_FALSE(log.torn_tail);
  REQUIRE(log.exchanges.size() == sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    INFO("exchange " << i);
    CHECK(log.exchanges[i].n == i);
    CHECK(log.exchanges[i].reply == sent[i]);
  }
  // On disk: observes are small patches of the latest reply with an observation (the reset's, then the step's).
  const std::vector<json> raw = raw_records(path);
  REQUIRE(raw.size() == sent.size() + 2);  // header, exchanges, end
  CHECK(raw[2].value("reply_base", 99) == 0);
  CHECK(raw[2]["reply_patch"].size() <= 4);      // instance and session go, id and clock change
  CHECK(raw[23].value("reply_base", 99) == 21);  // after the step, of the step
  for (std::size_t i = 2; i < raw.size() - 1; ++i) CHECK_FALSE(raw[i].contains("reply"));
  fs::remove_all(dir);
}

TEST_CASE("record_observe: no fdatasync of its own; a reply that waits, or its age, asks for it", "[recorder]") {
  Fixture fx;
  const fs::path dir = temp_dir("d2k-recobs-sync");
  for (const bool aged : {false, true}) {
    std::mutex mutex;
    std::condition_variable came;
    std::deque<std::tuple<std::string, std::uint64_t, int>> reports;
    std::atomic<int> syncs{0};
    RecorderConfig rc;
    rc.log_dir = dir / (aged ? "aged" : "young");
    rc.sync_threads = 1;
    rc.read_only_sync_after = aged ? std::chrono::milliseconds(0) : std::chrono::hours(1);
    rc.on_synced = [&](const std::string& s, std::uint64_t n, int error) {
      std::lock_guard lock(mutex);
      reports.emplace_back(s, n, error);
      came.notify_all();
    };
    rc.sync_hook = [&](const std::string&) { ++syncs; };
    Recorder rec(rc);
    // Hands the reports to synced() (as the server loop does) until nothing of `s` is pending.
    auto settle = [&](const std::string& s) {
      while (rec.pending(s) != 0) {
        std::unique_lock lock(mutex);
        REQUIRE(came.wait_for(lock, std::chrono::seconds(60), [&] { return !reports.empty(); }));
        auto [session, n, error] = reports.front();
        reports.pop_front();
        lock.unlock();
        CHECK(error == 0);
        rec.synced(session, n, error);
      }
    };
    Episode ep("s1", fx.task(), 1, 7, Budget{}, "", Workspace::Limits{});
    const json reset = reset_reply(ep);
    REQUIRE(rec.begin(ep, kResetRequest, reset, 10.0, 10.5));
    settle("s1");
    const int after_begin = syncs.load();
    CHECK(after_begin >= 1);
    std::uint64_t id = 2;
    auto observe = [&] {
      json reply = {{"v", 1}, {"id", id}, {"ok", true}, {"observation", ep.observation()}, {"info", ep.info()}};
      reply["observation"]["budget"]["seconds_used"] = 0.5;
      CHECK(rec.record_observe(
          ep, {{"v", 1}, {"id", id}, {"op", "observe"}, {"session", "s1"}}, 1, id, 0.5, [&] { return reply; }, 11.0,
          11.1));
      ++id;
    };
    for (int i = 0; i < 10; ++i) observe();
    if (!aged) {
      // Nothing asked for (stop_sync would run none) until a reply waits: pending() asks.
      CHECK(rec.pending("s1") != 0);
      settle("s1");                            // (hangs, then fails, if pending() did not ask)
      CHECK(syncs.load() == after_begin + 1);  // one fdatasync for the ten
      // A failed fdatasync: the records after the last durable one are cut off and written again.
      for (int i = 0; i < 3; ++i) observe();
      const std::uint64_t last = rec.pending("s1");
      CHECK_FALSE(rec.synced("s1", last, EIO));
      CHECK(read_episode_log(rec.log_path("s1")).exchanges.size() == 11);
      CHECK(rec.flush(std::string("s1")));
      settle("s1");
    } else {
      rec.stop_sync();  // runs what was asked: the observes after the first asked, each past its age (0)
      CHECK(syncs.load() > after_begin);
    }
    rec.stop_sync();
    const EpisodeLog log = read_episode_log(rec.log_path("s1"));
    CHECK_FALSE(log.torn_tail);
    REQUIRE(log.exchanges.size() == (aged ? 11u : 14u));
    for (std::size_t i = 1; i < log.exchanges.size(); ++i) {
      CHECK(log.exchanges[i].n == i);
      CHECK(log.exchanges[i].reply["id"] == i + 1);
      CHECK(log.exchanges[i].reply["observation"]["budget"]["seconds_used"] == 0.5);
      CHECK(log.exchanges[i].reply["observation"]["files"] == ep.observation()["files"]);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("recorded observe: the log holds exactly the replies sent, through steps and a compile",
          "[server][observe]") {
  d2k::env::Config config = d2k::test::test_config();
  REQUIRE(config.record);
  d2k::test::TestServer srv(config);
  Client c(srv.endpoint);
  const std::string s = c.reset("vector_add", 1, 5)["session"].get<std::string>();
  std::vector<std::pair<std::uint64_t, Value>> observed;  // (request id, reply) of each observe
  auto observe = [&] {
    Value r = c.observe(s);
    observed.emplace_back(c.last_id(), r);
  };
  for (int i = 0; i < 5; ++i) observe();
  c.step(s, {{"type", "write_file"}, {"path", "extra.cuh"}, {"content", "// hello\n"}});
  for (int i = 0; i < 3; ++i) observe();
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", d2k::test::kGoodKernel}});
  c.step(s, {{"type", "compile"}});
  for (int i = 0; i < 3; ++i) observe();
  c.close(s);
  srv.stop();  // every record written and the log closed

  EpisodeLog log = read_episode_log(config.log_dir / (s + ".d2klog"));
  CHECK_FALSE(log.torn_tail);
  std::size_t found = 0;
  for (const LogExchange& x : log.exchanges) {
    if (x.request.value("op", "") != "observe") continue;
    REQUIRE(found < observed.size());
    INFO("observe " << found);
    CHECK(x.request["id"] == observed[found].first);
    CHECK(x.reply == observed[found].second);
    ++found;
  }
  CHECK(found == observed.size());
  // Each observe shows its clock, later than the one before it.
  for (std::size_t i = 1; i < observed.size(); ++i)
    CHECK(observed[i].second["observation"]["budget"]["seconds_used"].get<double>() >=
          observed[i - 1].second["observation"]["budget"]["seconds_used"].get<double>());
  CHECK(observed.back().second["observation"]["files"]["extra.cuh"] == "// hello\n");
}

TEST_CASE("cached observe replies stay within their bound; past it each observe is built alone", "[server][observe]") {
  // Every open session may keep its observe reply encoded (up to a workspace each): their bytes are
  // bounded, and a session past the bound is answered (and logged) from a reply built per call.
  for (const bool bounded : {false, true}) {
    INFO((bounded ? "bound 0" : "default bound"));
    const d2k::env::Config config = d2k::test::test_config();
    d2k::test::TestServer srv(config, nullptr, [&](d2k::env::Server& server) {
      if (bounded) server.set_observations_max_bytes(0);
    });
    Client c(srv.endpoint);
    const std::string a = c.reset("vector_add", 1, 5)["session"].get<std::string>();
    const std::string b = c.reset("vector_add", 1, 6)["session"].get<std::string>();
    std::vector<std::pair<std::uint64_t, Value>> observed;
    for (int i = 0; i < 3; ++i) {
      Value r = c.observe(a);
      observed.emplace_back(c.last_id(), r);
      c.observe(b);
    }
    c.step(a, {{"type", "write_file"}, {"path", "extra.cuh"}, {"content", "// bounded\n"}});
    Value after = c.observe(a);
    observed.emplace_back(c.last_id(), after);
    CHECK(after["observation"]["files"]["extra.cuh"] == "// bounded\n");
    if (bounded)
      CHECK(srv.server->observations_bytes() == 0);
    else
      CHECK(srv.server->observations_bytes() > 0);
    c.close(b);
    c.close(a);
    CHECK(srv.server->observations_bytes() == 0);  // each closed session's went with it
    srv.stop();
    std::size_t found = 0;
    for (const LogExchange& x : read_episode_log(config.log_dir / (a + ".d2klog")).exchanges) {
      if (x.request.value("op", "") != "observe") continue;
      REQUIRE(found < observed.size());
      CHECK(x.request["id"] == observed[found].first);
      CHECK(x.reply == observed[found].second);
      ++found;
    }
    CHECK(found == observed.size());
  }
}
