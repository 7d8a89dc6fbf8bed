// What a new user meets in the first hour (issue 18): `d2k play` listing tasks, refusing a bad
// layer and giving up on a dead endpoint; error messages that keep what follows a NUL byte; the
// C++ client refusing a request over hello.limits; `episodes`/`replay` of a running session; the
// report of a machine without a GPU.
#include <chrono>
#include <fstream>

#include "../env/server_fixture.hpp"
#include "catch.hpp"
#include "env/report.hpp"
#include "protocol/codec.hpp"

namespace {

using d2k::protocol::Value;
using Run = d2k::test::CommandResult;

Run play(const std::string& endpoint, const std::string& script, const std::string& extra = "") {
  auto dir = d2k::test::temp_dir("d2k-first-hour");
  std::ofstream(dir / "script") << script;
  return d2k::test::run_command(d2k::test::d2k_binary() + " play --endpoint " + endpoint + " --script " +
                                (dir / "script").string() + " " + extra);
}

}  // namespace

TEST_CASE("play: `tasks` lists every task of the server", "[first_hour]") {
  d2k::test::TestServer srv;
  Run r = play(srv.endpoint, "tasks\n");
  INFO(r.out);
  CHECK(r.status == 0);
  for (const char* id : {"vector_add", "softmax", "transpose", "prefix_sum"})
    CHECK(r.out.find(std::string("  ") + id + "  ") != std::string::npos);
}

TEST_CASE("play: `reset TASK LAYER` refuses a layer that is not 0-3 instead of opening L0", "[first_hour]") {
  d2k::test::TestServer srv;
  for (const char* bad : {"two", "4", "-1", "2x"}) {
    Run r = play(srv.endpoint, std::string("reset softmax ") + bad + "\nstatus\n");
    INFO(r.out);
    CHECK(r.status != 0);
    CHECK(r.out.find(std::string("the layer is 0, 1, 2 or 3, not '") + bad + "'") != std::string::npos);
    CHECK(r.out.find("session ") == std::string::npos);  // no episode was opened
  }
  Run seed = play(srv.endpoint, "reset softmax 1 seven\n");
  CHECK(seed.out.find("the seed is a non-negative integer, not 'seven'") != std::string::npos);
  Run ok = play(srv.endpoint, "reset softmax 2 7\nclose\n");
  INFO(ok.out);
  CHECK(ok.status == 0);
  CHECK(ok.out.find("softmax at L2") != std::string::npos);
}

TEST_CASE("play: a dead endpoint gives up with a clear message", "[first_hour]") {
  const std::string dead = "ipc:///tmp/d2k-first-hour-nobody-" + std::to_string(::getpid()) + ".sock";
  auto start = std::chrono::steady_clock::now();
  Run r = play(dead, "tasks\n", "--connect-timeout 1");
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(seconds < 20);
  CHECK(r.out.find("no d2k server answered at " + dead + " within 1 s") != std::string::npos);
}

TEST_CASE("error messages keep what follows a NUL byte", "[first_hour]") {
  static const char kRaw[] = "path 'a\0b\x01.cu': bad";
  d2k::protocol::Error e(d2k::protocol::ErrorCode::path_violation, std::string(kRaw, sizeof kRaw - 1));
  CHECK(std::string(e.what()) == "path 'a\\0b\\x01.cu': bad");
  d2k::protocol::Error plain(d2k::protocol::ErrorCode::bad_request, "line one\n\tline two");
  CHECK(std::string(plain.what()) == "line one\n\tline two");  // newlines and tabs stay

  d2k::test::TestServer srv;
  d2k::Client c(srv.endpoint);
  std::string session = c.reset("vector_add", 0)["session"].get<std::string>();
  Value r = c.step(session, {{"type", "write_file"}, {"path", std::string("a\0b.cu", 6)}, {"content", "x"}});
  const Value& error = r["observation"]["last"]["error"];
  INFO(r.dump());
  CHECK(error["code"] == "path_violation");
  CHECK(error["message"].get<std::string>().find("path 'a\\0b.cu'") != std::string::npos);
}

TEST_CASE("the C++ client refuses a request over hello.limits at once instead of waiting", "[first_hour]") {
  d2k::test::TestServer srv;
  d2k::Client c(srv.endpoint);
  std::string session = c.reset("vector_add", 0)["session"].get<std::string>();
  auto start = std::chrono::steady_clock::now();
  try {
    c.step(session, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", std::string(50u << 20, 'x')}});
    FAIL("a 50 MB write_file was sent");
  } catch (const d2k::ClientError& e) {
    INFO(e.what());
    CHECK(e.code == d2k::protocol::ErrorCode::too_large);
    CHECK(std::string(e.what()).find("hello.limits.max_message_bytes") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  try {  // under the frame limit, over the string limit
    c.step(session, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", std::string(2u << 20, 'x')}});
    FAIL("a 2 MiB string was sent");
  } catch (const d2k::ClientError& e) {
    CHECK(e.code == d2k::protocol::ErrorCode::too_large);
    CHECK(e.field == "action.content");
  }
  // The session is still usable: nothing reached the server.
  Value r = c.step(session, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", "// small"}});
  CHECK(r["observation"]["last"]["ok"] == true);
}

TEST_CASE("episodes shows the steps of a running session; replay of it does not say the server stopped",
          "[first_hour]") {
  auto state = d2k::test::temp_dir("d2k-first-hour-state");
  d2k::env::Config config = d2k::test::test_config();
  config.state_dir = state;
  config.log_dir.clear();  // test_config() finalized them under the shared state dir: derive them again
  config.catalogue.clear();
  config.finalize();
  d2k::test::TestServer srv(config);
  d2k::Client c(srv.endpoint);
  std::string session = c.reset("vector_add", 1, 3, {{"label", "first-hour"}})["session"].get<std::string>();
  for (const char* f : {"a.h", "b.h"}) c.step(session, {{"type", "write_file"}, {"path", f}, {"content", "// x"}});

  Run listed = d2k::test::run_command(d2k::test::d2k_binary() + " episodes --json --state-dir " + state.string());
  INFO(listed.out);
  REQUIRE(listed.status == 0);
  Value rows = Value::parse(listed.out.substr(listed.out.find('[')));
  Value row;
  for (const auto& r : rows)
    if (r["session"] == session) row = r;
  REQUIRE(row.is_object());
  CHECK(row["outcome"] == "running");
  CHECK(row["steps"] == 2);

  Run shown = d2k::test::run_command(d2k::test::d2k_binary() + " replay " + row["log_path"].get<std::string>());
  INFO(shown.out);
  CHECK(shown.out.find("no end record yet: the session is still open on a running server") != std::string::npos);
  c.close(session);
}

namespace {

d2k::env::EpisodeRow ended(const std::string& label, int layer, const std::string& outcome) {
  d2k::env::EpisodeRow r;
  r.label = label;
  r.layer = layer;
  r.task = "vector_add";
  r.outcome = outcome;
  r.ended_at = 1.0;
  return r;
}

}  // namespace

TEST_CASE("report without a GPU: n/a instead of 0% correct, charts that say why they are empty", "[first_hour]") {
  // What a server without a GPU records: every episode compiled, none submitted and evaluated.
  std::vector<d2k::env::EpisodeRow> rows;
  for (int layer = 0; layer < 4; ++layer) {
    rows.push_back(ended("agents.demo.expert", layer, "unsubmitted"));
    rows.push_back(ended("a-label-much-longer-than-twenty-characters", layer, "unsubmitted"));
  }
  d2k::env::Report r = d2k::env::build_report(rows);
  std::string text = d2k::env::render_report_text(r);
  INFO(text);
  CHECK(text.find(" 0%") == std::string::npos);
  CHECK(text.find("n/a = no kernel of these episodes was submitted and evaluated") != std::string::npos);
  // A label longer than the old 20-character column is followed by a gap, not run into "L0".
  CHECK(text.find("a-label-much-longer-than-twenty-characters  L0") != std::string::npos);
  CHECK(text.find("charactersL0") == std::string::npos);

  std::string html = d2k::env::render_report_html(r, "no GPU");
  CHECK(html.find("n/a (none evaluated)") != std::string::npos);
  std::size_t notes = 0;
  const std::string empty = "class=\"empty\"";
  for (std::size_t at = html.find(empty); at != std::string::npos; at = html.find(empty, at + 1)) ++notes;
  CHECK(notes == 3);  // both bar charts and the scatter say why they are empty
  CHECK(html.find("rotate(-35") != std::string::npos);  // x labels slanted: they do not overlap

  // With a GPU's results the percentages are back and no chart is empty.
  rows.push_back(ended("gpu", 0, "correct"));
  rows.back().submit_speedup = 2.0;
  rows.back().submit_score = 0.9;
  rows.push_back(ended("gpu", 0, "incorrect"));
  d2k::env::Report g = d2k::env::build_report(rows);
  std::string gtext = d2k::env::render_report_text(g);
  CHECK(gtext.find("50%") != std::string::npos);
  std::string ghtml = d2k::env::render_report_html(g, "gpu");
  CHECK(ghtml.find("class=\"empty\"") == std::string::npos);
}
