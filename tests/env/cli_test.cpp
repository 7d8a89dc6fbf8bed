// The `d2k` binary as a user runs it: help, tasks, serve with signals, play scripts, demo.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>

#include "catch.hpp"
#include "server_fixture.hpp"

extern char** environ;

namespace {

const std::string& kBin = d2k::test::d2k_binary();

using Run = d2k::test::CommandResult;

Run run(const std::string& args) { return d2k::test::run_command(kBin + " " + args); }

pid_t spawn_server(const std::string& endpoint, const std::string& state) {
  std::vector<std::string> args = {kBin, "serve", "--endpoint", endpoint, "--tasks", D2K_TASKS_DIR, "--state-dir", state};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  REQUIRE(posix_spawn(&pid, kBin.c_str(), nullptr, nullptr, argv.data(), environ) == 0);
  return pid;
}

d2k::protocol::Value wait_hello(const std::string& endpoint) {
  d2k::Client::Options o;
  o.timeout = std::chrono::milliseconds(200);
  o.retries = 0;
  for (int i = 0; i < 100; ++i) {
    try {
      d2k::Client c(endpoint, o);
      return c.hello();
    } catch (const d2k::ClientError&) {
    }
  }
  FAIL("server did not answer");
  return {};
}

}  // namespace

TEST_CASE("d2k --help and per-command help answer", "[cli]") {
  Run r = run("--help");
  CHECK(r.status == 0);
  for (const char* sub : {"serve", "tasks", "play", "demo"}) CHECK(r.out.find(sub) != std::string::npos);
  r = run("serve --help");
  CHECK(r.status == 0);
  CHECK(r.out.find("--endpoint") != std::string::npos);
  CHECK(r.out.find("tcp://127.0.0.1:5555") != std::string::npos);
  r = run("play --help");
  CHECK(r.out.find("compile") != std::string::npos);
  r = run("no-such-command");
  CHECK(r.status != 0);
}

TEST_CASE("d2k tasks --check passes on the built-in tasks and fails on a broken folder", "[cli]") {
  Run r = run(std::string("tasks --check --tasks ") + D2K_TASKS_DIR);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("vector_add") != std::string::npos);
  auto dir = d2k::test::temp_dir("d2k-badtasks");
  std::filesystem::copy(std::filesystem::path(D2K_TASKS_DIR) / "vector_add", dir / "broken",
                        std::filesystem::copy_options::recursive);
  std::ofstream(dir / "broken" / "task.json", std::ios::trunc) << "{ not json";
  r = run("tasks --check --tasks " + dir.string());
  CHECK(r.status == 1);
  CHECK(r.out.find("task.json") != std::string::npos);
}

TEST_CASE("serve stops cleanly on SIGTERM with a compile in flight, which still answers", "[cli][slow]") {
  auto state = d2k::test::temp_dir("d2k-cli-state");
  std::string ep = "ipc://" + (state / "s.sock").string();
  pid_t pid = spawn_server(ep, state.string());
  wait_hello(ep);
  zmq::context_t ctx;
  zmq::socket_t d(ctx, zmq::socket_type::dealer);
  d.set(zmq::sockopt::linger, 0);
  d.set(zmq::sockopt::rcvtimeo, 60000);
  d.connect(ep);
  d2k::Client c(ep);
  std::string s = c.reset("vector_add", 1)["session"].get<std::string>();
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", d2k::test::kGoodKernel}});
  std::string req = d2k::protocol::encode(
      {{"v", 1}, {"id", 77}, {"op", "step"}, {"session", s}, {"action", {{"type", "compile"}}}});
  d.send(zmq::buffer(req), zmq::send_flags::none);
  // Once stats shows the compile running, signal the server.
  for (int i = 0; i < 200; ++i)
    if (c.stats()["in_flight"].get<int>() > 0) break;
  REQUIRE(::kill(pid, SIGTERM) == 0);
  zmq::message_t m;
  REQUIRE(d.recv(m));
  auto reply = d2k::protocol::decode(std::string_view(static_cast<const char*>(m.data()), m.size()), {});
  CHECK(reply["id"] == 77);
  CHECK(reply["ok"] == true);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // nothing half-written in the cache: no temporary files left behind
  for (auto& e : std::filesystem::recursive_directory_iterator(state / "compile-cache"))
    CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
}

TEST_CASE("d2k play runs a script against a server", "[cli][slow]") {
  d2k::test::TestServer srv;
  auto dir = d2k::test::temp_dir("d2k-play");
  std::ofstream(dir / "kernel.cu") << d2k::test::kGoodKernel;
  std::ofstream(dir / "script") << "tasks\nreset vector_add 2 5\nguidance\nwrite kernel.cu " << (dir / "kernel.cu").string()
                                << "\ncompile\nstatus\nevaluate\nclose\n";
  Run r = run("play --endpoint " + srv.endpoint + " --script " + (dir / "script").string());
  INFO(r.out);
  CHECK(r.out.find("vector_add") != std::string::npos);
  CHECK(r.out.find("== L2") != std::string::npos);
  CHECK(r.out.find("compile ok") != std::string::npos);
  CHECK(r.out.find("no_gpu") != std::string::npos);
  CHECK(r.out.find("closed") != std::string::npos);
}

TEST_CASE("d2k demo plays the scripted episode and says what needs a GPU", "[cli][slow]") {
  Run r = run("demo");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find(": error: ") != std::string::npos);  // the diagnostic of the broken kernel
  CHECK(r.out.find("compile ok") != std::string::npos);
  CHECK(r.out.find("cached") != std::string::npos);
  CHECK(r.out.find("demo finished") != std::string::npos);
}

TEST_CASE("the C++ example client runs against a server", "[cli][slow]") {
  d2k::test::TestServer srv;
  auto [status, out] =
      d2k::test::run_command(std::string(D2K_BINARY_DIR) + "/bin/example_minimal_client " + srv.endpoint);
  INFO(out);
  CHECK(status == 0);
  CHECK(out.find("compile ok: true") != std::string::npos);
  CHECK(out.find("no GPU on this server") != std::string::npos);
}
