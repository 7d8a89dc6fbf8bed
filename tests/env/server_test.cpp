// The server over its real socket: ops, actions, errors, malformed input, retries, busy, budgets.
#include <random>
#include <set>

#include "catch.hpp"
#include "server_fixture.hpp"

using d2k::Client;
using d2k::ClientError;
using d2k::protocol::ErrorCode;
using d2k::protocol::Value;
using d2k::test::TestServer;

namespace {

std::string open_episode(Client& c, int layer = 1, Value options = Value::object()) {
  return c.reset("vector_add", layer, 7, std::move(options))["session"].get<std::string>();
}

ErrorCode error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ClientError& e) {
    return e.code;
  }
  FAIL("expected an error reply");
  return ErrorCode::internal;
}

Value raw_request(zmq::socket_t& s, const Value& request) {
  std::string bytes = d2k::protocol::encode(request);
  s.send(zmq::buffer(bytes), zmq::send_flags::none);
  zmq::message_t m;
  REQUIRE(s.recv(m));
  d2k::protocol::Limits l;
  l.max_message_bytes = 64u << 20;
  l.max_depth = 64;
  return d2k::protocol::decode(std::string_view(static_cast<const char*>(m.data()), m.size()), l);
}

}  // namespace

TEST_CASE("hello and list_tasks describe the server", "[server]") {
  TestServer srv;
  Client c(srv.endpoint);
  Value hello = c.hello();
  CHECK(hello["server"] == "d2k-gym");
  CHECK(hello["protocol"] == Value::array({1}));
  CHECK(hello["gpus"].is_array());
  CHECK(hello["limits"]["max_message_bytes"].get<std::uint64_t>() > 0);
  CHECK(hello["config"]["default_budget"]["max_steps"].get<int>() == 50);
  Value tasks = c.list_tasks()["tasks"];
  bool found = false;
  for (const auto& t : tasks) found = found || t["id"] == "vector_add";
  CHECK(found);
}

TEST_CASE("reset gives an observation with task, guidance, files, budget", "[server]") {
  TestServer srv;
  Client c(srv.endpoint);
  Value r = c.reset("vector_add", 2, 99);
  const Value& o = r["observation"];
  CHECK(r["session"].get<std::string>().size() == 32);
  CHECK(o["task"]["id"] == "vector_add");
  CHECK(o["task"]["signature"].get<std::string>().find("d2k_vector_add") != std::string::npos);
  CHECK(o["guidance"].size() == 2);  // L1 and L2 at layer 2
  CHECK(o["guidance"][0]["layer"] == 1);
  CHECK(o["guidance"][1]["layer"] == 2);
  CHECK(o["files"].contains("kernel.cu"));
  CHECK(o["last"].is_null());
  CHECK(o["step"] == 0);
  CHECK(o["budget"]["max_steps"] == 50);
  CHECK(o["done"] == false);
  for (const auto& w : o["task"]["workloads"]) CHECK(w.contains("sizes"));
  // hidden workloads are never shown
  d2k::tasks::Task t = d2k::tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / "vector_add");
  CHECK(o["task"]["workloads"].size() == t.visible_workloads().size());
  CHECK(c.reset("vector_add", 0)["observation"]["guidance"].empty());
}

TEST_CASE("reset rejects unknown tasks and bad layers with named fields", "[server]") {
  TestServer srv;
  Client c(srv.endpoint);
  CHECK(error_of([&] { c.reset("no_such_task", 1); }) == ErrorCode::unknown_task);
  try {
    c.reset("vector_add", 4);
    FAIL("layer 4 accepted");
  } catch (const ClientError& e) {
    CHECK(e.code == ErrorCode::bad_request);
    CHECK(e.field == "layer");
  }
}

TEST_CASE("write_file, edit and patch change the workspace; failures are typed outcomes", "[server]") {
  TestServer srv;
  Client c(srv.endpoint);
  std::string s = open_episode(c);
  Value r = c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", "int x = 1;\nint y = 2;\n"}});
  CHECK(r["observation"]["files"]["kernel.cu"] == "int x = 1;\nint y = 2;\n");
  CHECK(r["observation"]["last"]["ok"] == true);
  CHECK(r["observation"]["step"] == 1);

  r = c.step(s, {{"type", "edit"}, {"path", "kernel.cu"}, {"old", "x = 1"}, {"new", "x = 3"}});
  CHECK(r["observation"]["files"]["kernel.cu"] == "int x = 3;\nint y = 2;\n");

  r = c.step(s, {{"type", "edit"}, {"path", "kernel.cu"}, {"old", "absent"}, {"new", "z"}});
  CHECK(r["observation"]["last"]["ok"] == false);
  CHECK(r["observation"]["last"]["error"]["code"] == "invalid_action");
  CHECK(r["reward"].get<double>() < 0);

  r = c.step(s, {{"type", "edit"}, {"path", "kernel.cu"}, {"old", "int"}, {"new", "long"}});
  CHECK(r["observation"]["last"]["error"]["code"] == "invalid_action");
  CHECK(r["observation"]["last"]["error"]["message"].get<std::string>().find("2 times") != std::string::npos);

  std::string diff =
      "--- a/kernel.cu\n+++ b/kernel.cu\n@@ -1,2 +1,2 @@\n int x = 3;\n-int y = 2;\n+int y = 5;\n";
  r = c.step(s, {{"type", "patch"}, {"diff", diff}});
  CHECK(r["observation"]["last"]["ok"] == true);
  CHECK(r["observation"]["files"]["kernel.cu"] == "int x = 3;\nint y = 5;\n");
  r = c.step(s, {{"type", "patch"}, {"diff", diff}});  // context no longer matches
  CHECK(r["observation"]["last"]["error"]["code"] == "invalid_action");
  CHECK(r["observation"]["files"]["kernel.cu"] == "int x = 3;\nint y = 5;\n");  // all or nothing
  CHECK(r["observation"]["step"] == 6);
}

TEST_CASE("paths stay inside the workspace", "[server]") {
  TestServer srv;
  Client c(srv.endpoint);
  std::string s = open_episode(c);
  for (const char* bad : {"../x.cu", "/etc/passwd.cu", "a/../../b.cu", "a//b.cu", ".hidden.cu", "x.so", "a b.cu",
                          "a/b/c/d/e.cu", "", "./x.cu", "x.cu\n"}) {
    Value r = c.step(s, {{"type", "write_file"}, {"path", bad}, {"content", "x"}});
    INFO(bad);
    CHECK(r["observation"]["last"]["ok"] == false);
    CHECK(r["observation"]["last"]["error"]["code"] == "path_violation");
  }
  Value r = c.step(s, {{"type", "write_file"}, {"path", "inc/helpers.cuh"}, {"content", "#pragma once\n"}});
  CHECK(r["observation"]["files"].contains("inc/helpers.cuh"));
  // a patch that creates a file outside the workspace
  r = c.step(s, {{"type", "patch"}, {"diff", "--- /dev/null\n+++ b/../evil.cu\n@@ -0,0 +1 @@\n+x\n"}});
  CHECK(r["observation"]["last"]["ok"] == false);
}

TEST_CASE("oversized files and workspaces are refused", "[server]") {
  TestServer srv;
  Client c(srv.endpoint);
  std::string s = open_episode(c);
  std::string big(300 * 1024, 'x');  // over the 256 KiB file limit
  CHECK(error_of([&] { c.step(s, {{"type", "write_file"}, {"path", "big.cu"}, {"content", big}}); }) ==
        ErrorCode::too_large);
  std::string half(200 * 1024, 'y');
  Value r;
  for (int i = 0; i < 12; ++i)
    r = c.step(s, {{"type", "write_file"}, {"path", "f" + std::to_string(i) + ".cuh"}, {"content", half}});
  CHECK(r["observation"]["last"]["error"]["code"] == "too_large");  // 2 MiB workspace limit
}

TEST_CASE("compile reports diagnostics, succeeds, and hits the cache", "[server][slow]") {
  TestServer srv;
  Client c(srv.endpoint);
  std::string s = open_episode(c);
  std::string broken = std::string(d2k::test::kGoodKernel);
  broken.replace(broken.find("a[i] + b[i];"), 12, "a[i] + b[i]");
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", broken}});
  Value r = c.step(s, {{"type", "compile"}});
  const Value& last = r["observation"]["last"];
  CHECK(last["ok"] == false);
  CHECK(last["error"]["code"] == "compile_error");
  REQUIRE(!last["compile"]["diagnostics"].empty());
  CHECK(last["compile"]["diagnostics"][0]["file"] == "kernel.cu");
  CHECK(last["compile"]["diagnostics"][0]["line"].get<int>() >= 4);
  CHECK(last["compile"]["diagnostics"][0]["severity"] == "error");
  CHECK(r["reward"].get<double>() < 0);

  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", d2k::test::kGoodKernel}});
  r = c.step(s, {{"type", "compile"}});
  CHECK(r["observation"]["last"]["ok"] == true);
  r = c.step(s, {{"type", "compile"}});
  CHECK(r["observation"]["last"]["compile"]["cached"] == true);
  CHECK(r["observation"]["budget"]["compiles_used"] == 3);
  // another episode with the same source: also a cache hit
  std::string s2 = open_episode(c);
  c.step(s2, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", d2k::test::kGoodKernel}});
  CHECK(c.step(s2, {{"type", "compile"}})["observation"]["last"]["compile"]["cached"] == true);
}

TEST_CASE("evaluate and submit without a GPU answer no_gpu and consume nothing", "[server]") {
  TestServer srv;
  Client c(srv.endpoint);
  std::string s = open_episode(c);
  try {
    c.step(s, {{"type", "evaluate"}});
    FAIL("evaluate without a GPU succeeded");
  } catch (const ClientError& e) {
    CHECK(e.code == ErrorCode::no_gpu);
    CHECK(std::string(e.what()).find("GPU") != std::string::npos);
    CHECK_FALSE(e.retryable);
  }
  CHECK(error_of([&] { c.step(s, {{"type", "submit"}}); }) == ErrorCode::no_gpu);
  CHECK(c.observe(s)["observation"]["step"] == 0);
}

TEST_CASE("budgets end episodes with a reason", "[server]") {
  TestServer srv;
  Client c(srv.endpoint);
  std::string s = open_episode(c, 1, {{"max_steps", 2}});
  Value w = {{"type", "write_file"}, {"path", "a.cuh"}, {"content", "x"}};
  Value r = c.step(s, w);
  CHECK(r["truncated"] == false);
  r = c.step(s, w);
  CHECK(r["truncated"] == true);
  CHECK(r["terminated"] == false);
  CHECK(r["info"]["end_reason"] == "step_budget");
  CHECK(r["observation"]["done"] == true);
  CHECK(error_of([&] { c.step(s, w); }) == ErrorCode::episode_ended);
  CHECK(c.observe(s)["observation"]["end_reason"] == "step_budget");

  std::string s2 = open_episode(c, 1, {{"max_compiles", 0}});
  r = c.step(s2, {{"type", "compile"}});
  CHECK(r["observation"]["last"]["error"]["code"] == "budget_exhausted");

  std::string s3 = open_episode(c, 1, {{"wall_seconds", 1e-6}});
  r = c.step(s3, w);
  CHECK(r["truncated"] == true);
  CHECK(r["info"]["end_reason"] == "wall_time");
}

TEST_CASE("malformed input gets an error reply and the server keeps answering", "[server][protocol]") {
  TestServer srv;
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 10000);
  s.connect(srv.endpoint);
  auto send_raw = [&](const std::string& bytes) {
    s.send(zmq::buffer(bytes), zmq::send_flags::none);
    zmq::message_t m;
    REQUIRE(s.recv(m));
    d2k::protocol::Limits l;
    Value v = d2k::protocol::decode(std::string_view(static_cast<const char*>(m.data()), m.size()), l);
    CHECK(v["ok"] == false);
    return v;
  };
  std::mt19937 rng(42);
  for (int i = 0; i < 50; ++i) {
    std::string junk(1 + rng() % 200, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    Value v = send_raw(junk);
    CHECK(v["error"]["code"].is_string());
  }
  std::string valid = d2k::protocol::encode({{"v", 1}, {"id", 5}, {"op", "hello"}});
  for (std::size_t n = 0; n < valid.size(); ++n) send_raw(valid.substr(0, n));
  CHECK(send_raw(d2k::protocol::encode({{"v", 1}, {"id", 6}, {"op", "fly"}}))["error"]["code"] == "unknown_op");
  CHECK(send_raw(d2k::protocol::encode({{"v", 2}, {"id", 7}, {"op", "hello"}}))["error"]["code"] ==
        "version_mismatch");
  CHECK(send_raw(d2k::protocol::encode({{"v", 1}, {"id", "x"}, {"op", "hello"}}))["error"]["code"] == "bad_request");
  Value wrong = send_raw(d2k::protocol::encode({{"v", 1}, {"id", 8}, {"op", "reset"}, {"task", 5}, {"layer", 1}}));
  CHECK(wrong["error"]["code"] == "bad_request");
  CHECK(wrong["error"]["field"] == "task");
  CHECK(wrong["id"] == 8);
  std::string nested;
  for (int i = 0; i < 1000; ++i) nested += '\x91';  // fixarray of one element, 1000 deep
  nested += '\xc0';
  send_raw(nested);
  std::string huge = d2k::protocol::encode({{"v", 1}, {"id", 9}, {"op", "hello"}, {"pad", std::string(9u << 20, 'p')}});
  CHECK(send_raw(huge)["error"]["code"] == "too_large");
  // a step with an action of the wrong shape
  Client c(srv.endpoint);
  std::string session = open_episode(c);
  Value bad = raw_request(s, {{"v", 1}, {"id", 10}, {"op", "step"}, {"session", session}, {"action", {{"type", "dance"}}}});
  CHECK(bad["error"]["code"] == "invalid_action");
  bad = raw_request(s, {{"v", 1}, {"id", 11}, {"op", "step"}, {"session", session},
                        {"action", {{"type", "write_file"}, {"path", 3}, {"content", "x"}}}});
  CHECK(bad["error"]["field"] == "action.path");
  CHECK(error_of([&] { c.observe("nope"); }) == ErrorCode::unknown_session);
  CHECK(c.hello()["server"] == "d2k-gym");  // still answering
}

TEST_CASE("a retried request id gets the cached reply and never runs twice", "[server]") {
  TestServer srv;
  Client c(srv.endpoint);
  std::string s = open_episode(c);
  Value action = {{"type", "write_file"}, {"path", "a.cuh"}, {"content", "1"}};
  Value first = c.call_with_id(1000, "step", {{"session", s}, {"action", action}});
  Value again = c.call_with_id(1000, "step", {{"session", s}, {"action", action}});
  CHECK(first == again);
  CHECK(c.observe(s)["observation"]["step"] == 1);
  // reset retried: the same session, not a second one
  Value r1 = c.call_with_id(2000, "reset", {{"task", "vector_add"}, {"layer", 1}});
  Value r2 = c.call_with_id(2000, "reset", {{"task", "vector_add"}, {"layer", 1}});
  CHECK(r1["session"] == r2["session"]);
  CHECK(c.stats()["sessions"]["total_opened"] == 2);
}

TEST_CASE("one action in flight per session: busy, and a retry of the in-flight id waits", "[server][slow]") {
  TestServer srv;
  Client c(srv.endpoint);
  std::string s = open_episode(c);
  std::string unique = std::string(d2k::test::kGoodKernel) + "\n// busy test " + std::to_string(::getpid()) + "\n";
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", unique}});
  zmq::context_t ctx;
  zmq::socket_t d(ctx, zmq::socket_type::dealer);
  d.set(zmq::sockopt::linger, 0);
  d.set(zmq::sockopt::rcvtimeo, 60000);
  d.connect(srv.endpoint);
  auto send = [&](std::uint64_t id, Value action) {
    std::string b = d2k::protocol::encode({{"v", 1}, {"id", id}, {"op", "step"}, {"session", s}, {"action", action}});
    d.send(zmq::buffer(b), zmq::send_flags::none);
  };
  // ids are per session: pick ones the other client of this session has not used
  send(7001, {{"type", "compile"}});
  send(7001, {{"type", "compile"}});  // a retry while in flight
  send(7002, {{"type", "write_file"}, {"path", "b.cuh"}, {"content", "x"}});
  std::map<std::uint64_t, std::vector<Value>> replies;
  for (int i = 0; i < 3; ++i) {
    zmq::message_t m;
    REQUIRE(d.recv(m));
    Value v = d2k::protocol::decode(std::string_view(static_cast<const char*>(m.data()), m.size()), d2k::protocol::Limits{});
    replies[v["id"].get<std::uint64_t>()].push_back(v);
  }
  REQUIRE(replies[7002].size() == 1);
  INFO(replies[7002][0].dump());
  CHECK(replies[7002][0]["error"]["code"] == "busy");
  CHECK(replies[7002][0]["error"]["retryable"] == true);
  REQUIRE(replies[7001].size() == 2);
  CHECK(replies[7001][0] == replies[7001][1]);
  CHECK(replies[7001][0]["observation"]["last"]["compile"]["ok"] == true);
  CHECK(c.observe(s)["observation"]["budget"]["compiles_used"] == 1);  // ran once
}

TEST_CASE("200 concurrent sessions from several clients", "[server]") {
  TestServer srv;
  const int clients = 4, per_client = 50;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  std::mutex m;
  std::set<std::string> ids;
  for (int t = 0; t < clients; ++t)
    threads.emplace_back([&, t] {
      Client c(srv.endpoint);
      std::vector<std::string> mine;
      for (int i = 0; i < per_client; ++i) mine.push_back(open_episode(c, i % 4));
      for (std::size_t i = 0; i < mine.size(); ++i) {
        std::string content = "// client " + std::to_string(t) + " episode " + std::to_string(i) + "\n";
        Value r = c.step(mine[i], {{"type", "write_file"}, {"path", "note.cuh"}, {"content", content}});
        if (r["observation"]["files"]["note.cuh"] == content) ++ok;
      }
      for (const auto& id : mine)  // each episode kept its own file
        if (c.observe(id)["observation"]["files"]["note.cuh"].get<std::string>().find(
                "client " + std::to_string(t) + " ") != std::string::npos)
          ++ok;
      std::lock_guard lock(m);
      ids.insert(mine.begin(), mine.end());
    });
  for (auto& th : threads) th.join();
  CHECK(ok == 2 * clients * per_client);
  CHECK(ids.size() == static_cast<std::size_t>(clients * per_client));
  Client c(srv.endpoint);
  CHECK(c.stats()["sessions"]["active"] == clients * per_client);
}

TEST_CASE("capacity, close and idle reaping", "[server]") {
  auto cfg = d2k::test::test_config();
  cfg.max_sessions = 2;
  cfg.idle_timeout_s = 0.3;
  TestServer srv(cfg);
  Client c(srv.endpoint);
  std::string a = open_episode(c);
  std::string b = open_episode(c);
  CHECK(error_of([&] { open_episode(c); }) == ErrorCode::capacity);
  Value closed = c.close(a);
  CHECK(closed["end_reason"] == "closed");
  CHECK(error_of([&] { c.observe(a); }) == ErrorCode::unknown_session);
  // b idles past the timeout and is reaped by the loop (checked about once a second)
  std::string reaped_reason;
  for (int i = 0; i < 100; ++i) {
    Value st = c.stats();
    if (st["sessions"]["end_reasons"].contains("idle_timeout")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(error_of([&] { c.observe(b); }) == ErrorCode::unknown_session);
  CHECK(c.stats()["sessions"]["end_reasons"]["idle_timeout"] == 1);
}

// Every built-in task opens at every layer with its guidance, and the kernel of that layer (the
// baseline at L0, the Lk expert at Lk) compiles through the server's sandboxed compiler with the
// task's flags. The GPU half (evaluate/submit) is d2k verify-tasks and gpu_server_test.
TEST_CASE("every task opens at every layer and that layer's kernel compiles in the sandbox", "[server][tasks]") {
  TestServer srv;
  Client c(srv.endpoint);
  const d2k::tasks::TaskSet set = d2k::tasks::load_tasks(D2K_TASKS_DIR);
  REQUIRE(set.errors.empty());
  Value listed = c.list_tasks()["tasks"];
  CHECK(listed.size() == set.tasks.size());
  for (const auto& task : set.tasks) {
    for (int layer = 0; layer <= 3; ++layer) {
      INFO(task.id << " L" << layer);
      Value r = c.reset(task.id, layer, 5, Value::object({{"max_steps", 4}}));
      const std::string s = r["session"].get<std::string>();
      const Value& o = r["observation"];
      CHECK(o["task"]["id"] == task.id);
      CHECK(o["guidance"].size() == static_cast<std::size_t>(layer));
      CHECK(o["files"][task.main_file] == task.starter);
      for (const auto& w : o["task"]["workloads"]) {
        const auto* model = task.find_workload(w["name"].get<std::string>());
        REQUIRE(model != nullptr);
        CHECK(model->visible);
        CHECK(w.contains("dtypes") == !model->dtypes.empty());
      }
      const std::string kernel = d2k::tasks::read_task_file(
          task.dir, layer == 0 ? std::filesystem::path("baseline.cu")
                               : std::filesystem::path("experts") / ("L" + std::to_string(layer) + ".cu"));
      Value w = c.step(s, {{"type", "write_file"}, {"path", task.main_file}, {"content", kernel}});
      CHECK(w["observation"]["last"]["ok"] == true);
      Value k = c.step(s, {{"type", "compile"}});
      INFO(k["observation"]["last"]["compile"]["log"].get<std::string>());
      CHECK(k["observation"]["last"]["compile"]["ok"] == true);
      c.close(s);
    }
  }
}
