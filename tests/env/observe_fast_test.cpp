// Issue 15 item 5: `observe` answers from the session's cached observation (rebuilt after every
// change the server makes to the session, its clock field refreshed on every call), with or without
// a recorder (recorded_observe_test.cpp covers the log). These tests, run without one, fail if a
// change is not seen, or if the reply differs from the full path's.
#include <chrono>
#include <thread>

#include "catch.hpp"
#include "server_fixture.hpp"

using d2k::Client;
using d2k::protocol::Value;
using d2k::test::TestServer;

namespace {

d2k::env::Config unrecorded_config() {
  d2k::env::Config c = d2k::test::test_config();
  c.record = false;
  c.events_endpoint = "none";
  return c;
}

}  // namespace

TEST_CASE("observe from the cache sees every change and the clock", "[server][observe]") {
  TestServer srv(unrecorded_config());
  Client c(srv.endpoint);
  const std::string s = c.reset("vector_add", 1, 7)["session"].get<std::string>();
  Value first = c.observe(s);
  CHECK(first["observation"]["step"] == 0);
  CHECK(first["info"]["task"] == "vector_add");
  CHECK(first["ok"] == true);
  CHECK(first["v"] == 1);
  CHECK(first["id"] == c.last_id());

  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  Value second = c.observe(s);
  CHECK(second["observation"]["budget"]["seconds_used"].get<double>() >
        first["observation"]["budget"]["seconds_used"].get<double>());
  CHECK(second["id"] == c.last_id());

  // A step that changes the files: the next observe shows it.
  c.step(s, {{"type", "write_file"}, {"path", "extra.cuh"}, {"content", "// hello\n"}});
  Value third = c.observe(s);
  CHECK(third["observation"]["files"]["extra.cuh"] == "// hello\n");
  CHECK(third["observation"]["step"] == 1);
  CHECK(third["observation"]["last"]["action"] == "write_file");

  // A deferred action (compile) that lands later: seen after it lands.
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", d2k::test::kGoodKernel}});
  c.observe(s);  // cached again before the compile
  Value compiled = c.step(s, {{"type", "compile"}});
  Value after = c.observe(s);
  CHECK(after["observation"]["last"]["action"] == "compile");
  CHECK(after["observation"]["step"] == compiled["observation"]["step"]);
  CHECK(after["observation"]["budget"]["compiles_used"] == 1);

  // The cached reply has the same content as the step reply's observation (bar the clock).
  Value a = after["observation"], b = compiled["observation"];
  a["budget"].erase("seconds_used");
  b["budget"].erase("seconds_used");
  CHECK(a == b);

  c.close(s);
  CHECK_THROWS(c.observe(s));
}

TEST_CASE("observe from the cache: info and the end of the episode follow every change", "[server][observe]") {
  TestServer srv(unrecorded_config());
  Client c(srv.endpoint);
  const std::string s = c.reset("vector_add", 1, 11, {{"max_steps", 2}})["session"].get<std::string>();
  Value first = c.observe(s);  // cached here, info included
  CHECK(first["info"]["total_reward"] == 0.0);
  CHECK(first["info"]["end_reason"].is_null());
  CHECK(first["info"]["seed"] == 11);
  CHECK(first["observation"]["budget"]["seconds_used"].is_number_float());
  // A compile that fails changes the reward: the next observe's info says so.
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", "this is not CUDA\n"}});
  c.observe(s);
  Value failed = c.step(s, {{"type", "compile"}});
  Value after = c.observe(s);
  CHECK(after["info"]["total_reward"] == failed["info"]["total_reward"]);
  CHECK(after["info"]["total_reward"].get<double>() != 0.0);
  // The second step used the budget: the episode ended, and observe shows it in both places.
  CHECK(after["observation"]["done"] == true);
  CHECK(after["observation"]["end_reason"] == "step_budget");
  CHECK(after["info"]["end_reason"] == "step_budget");
  CHECK(after["info"] == failed["info"]);
  // Served again from the cache, only the clock and the id move.
  Value again = c.observe(s);
  CHECK(again["id"] == c.last_id());
  CHECK(again["observation"]["budget"]["seconds_used"].get<double>() >=
        after["observation"]["budget"]["seconds_used"].get<double>());
  again["observation"]["budget"].erase("seconds_used");
  after["observation"]["budget"].erase("seconds_used");
  CHECK(again["observation"] == after["observation"]);
  CHECK(again["info"] == after["info"]);
}
