// Many tenants on one server (issue 22): what one client can do to another, and the limits that
// hold per session and per server. Real servers on real ZeroMQ ipc sockets; no nvcc needed.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "env/episode_log.hpp"
#include "env/workspace.hpp"
#include "skip.hpp"
#include "server_fixture.hpp"

using d2k::protocol::Value;

namespace {

// A DEALER socket with a chosen routing id: one "client connection" that can be dropped and made
// again, as a client does after a timeout.
struct Dealer {
  Dealer(zmq::context_t& ctx, const std::string& endpoint, const std::string& routing_id)
      : socket(ctx, zmq::socket_type::dealer) {
    socket.set(zmq::sockopt::linger, 0);
    if (!routing_id.empty()) socket.set(zmq::sockopt::routing_id, routing_id);
    socket.set(zmq::sockopt::rcvtimeo, 60000);
    socket.connect(endpoint);
  }
  void send(const Value& request) { socket.send(zmq::buffer(d2k::protocol::encode(request)), zmq::send_flags::none); }
  Value recv() {
    zmq::message_t m;
    REQUIRE(socket.recv(m));
    d2k::protocol::Limits l;
    l.max_message_bytes = 256u << 20;
    return d2k::protocol::decode(std::string_view(static_cast<const char*>(m.data()), m.size()), l);
  }
  Value call(const Value& request) {
    send(request);
    return recv();
  }
  zmq::socket_t socket;
};

Value req(std::uint64_t id, const std::string& op, Value fields = Value::object()) {
  Value r = {{"v", 1}, {"id", id}, {"op", op}};
  for (auto& [k, v] : fields.items()) r[k] = v;
  return r;
}

// Runs `body` in a child process that has its own mount namespace with a tmpfs of `size` (e.g.
// "48m") mounted on a fresh folder: a real small filesystem that can be filled. Returns what the
// child reports: "" when `body` found nothing wrong, "skip: ..." when it cannot be set up, else
// what went wrong. Needs CAP_SYS_ADMIN (root, as in the CI container): inside an unprivileged user
// namespace the server's compile jail cannot drop its groups (setgroups is denied there), and from
// outside, the child's mount is only reachable through /proc/<pid>/root, which the compiler's
// canonical paths resolve away.
std::string on_small_filesystem(const std::string& size, const std::function<std::string(const std::filesystem::path&)>& body) {
  if (::geteuid() != 0) return "skip: mounting a small tmpfs for the server needs root";
  const std::filesystem::path dir = d2k::test::temp_dir("d2k-tenants-fs");
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string report;
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      report = std::string("skip: a mount namespace: ") + std::strerror(errno);
    } else if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      report = std::string("skip: mount tmpfs: ") + std::strerror(errno);
    } else {
      try {
        report = body(dir);
      } catch (const std::exception& e) {
        report = std::string("exception: ") + e.what();
      }
    }
    [[maybe_unused]] auto n = ::write(fds[1], report.data(), report.size());
    ::close(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string report;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::filesystem::remove_all(dir);
  if (!WIFEXITED(status)) report += " (the child ended by signal " + std::to_string(WTERMSIG(status)) + ")";
  return report;
}

// Fills the filesystem of `dir` with one file until the kernel says ENOSPC.
void fill(const std::filesystem::path& file) {
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create the filler");
  std::string block(1 << 16, 'f');
  for (;;) {
    ssize_t n = ::write(fd, block.data(), block.size());
    if (n <= 0) break;
  }
  for (std::size_t chunk = 4096; chunk > 0; chunk /= 2)  // the last partial pages too
    while (::write(fd, block.data(), chunk) > 0) {
    }
  ::close(fd);
}

}  // namespace

TEST_CASE("a reset retried with the same id from a reconnected socket gets the same session", "[tenants]") {
  // Issue 22.1: ids now come from the kernel's CSPRNG; retries must keep working across reconnects.
  d2k::test::TestServer srv;
  zmq::context_t ctx;
  const std::string rid = "tenant-retry-routing-id";
  std::string session;
  {
    Dealer a(ctx, srv.endpoint, rid);
    Value r = a.call(req(41, "reset", {{"task", "vector_add"}, {"layer", 1}}));
    REQUIRE(r["ok"] == true);
    session = r["session"].get<std::string>();
    CHECK(session.size() == 32);
  }  // the connection goes away, as after a client-side timeout
  Dealer b(ctx, srv.endpoint, rid);
  Value again = b.call(req(41, "reset", {{"task", "vector_add"}, {"layer", 1}}));
  REQUIRE(again["ok"] == true);
  CHECK(again["session"] == session);  // the cached reply, not a second session
  // A step retried across a reconnect is answered once too.
  Value w = req(42, "step", {{"session", session},
                             {"action", {{"type", "write_file"}, {"path", "notes.h"}, {"content", "x"}}}});
  Value s1 = b.call(w);
  REQUIRE(s1["ok"] == true);
  Dealer c(ctx, srv.endpoint, rid);
  Value s2 = c.call(w);
  CHECK(s2 == s1);
  CHECK(s2["observation"]["step"] == 1);
  // Another client's reset with the same id is a new request, so a new session with its own id.
  Dealer other(ctx, srv.endpoint, "another-client");
  Value o = other.call(req(41, "reset", {{"task", "vector_add"}, {"layer", 1}}));
  REQUIRE(o["ok"] == true);
  CHECK(o["session"] != session);
}

TEST_CASE("on a full disk nothing is replied as done that is not logged, and the episode goes on after", "[tenants][storage]") {
  // Issue 22.7, on a real 48 MiB tmpfs: replies whose records the disk refuses do not go out as done
  // (storage_unavailable, retryable); the step is held and answered, logged, once space returns; a
  // compile the full disk breaks is not the agent's compile_error and shows no host path.
  const std::string report = on_small_filesystem("48m", [](const std::filesystem::path& dir) -> std::string {
    std::ostringstream bad;
    auto expect = [&](bool ok, const std::string& what) {
      if (!ok) bad << what << "\n";
    };
    d2k::env::Config c = d2k::test::test_config();
    c.state_dir = dir / "state";
    c.log_dir.clear();
    c.catalogue.clear();
    c.record = true;
    c.events_endpoint = "none";
    c.finalize();
    d2k::test::TestServer srv(c);
    zmq::context_t ctx;
    Dealer a(ctx, srv.endpoint, "storage-client");
    auto write_step = [](std::uint64_t id, const std::string& session, const std::string& content) {
      return req(id, "step", {{"session", session},
                              {"action", {{"type", "write_file"}, {"path", "notes.h"}, {"content", content}}}});
    };
    Value r = a.call(req(1, "reset", {{"task", "vector_add"}, {"layer", 1}}));
    if (r["ok"] != true) return "reset failed: " + r.dump();
    const std::string s1 = r["session"];
    Value r2 = a.call(req(2, "reset", {{"task", "vector_add"}, {"layer", 1}}));
    const std::string s2 = r2["session"];
    expect(a.call(write_step(3, s1, "one"))["ok"] == true, "first step");
    a.call(req(4, "step", {{"session", s2}, {"action", {{"type", "write_file"}, {"path", "kernel.cu"},
                                                        {"content", d2k::test::kGoodKernel}}}}));

    fill(dir / "filler");
    // Bigger than the slack of the log file's last page, which a tmpfs does not count as used.
    const std::string two(16384, '2');
    Value held = a.call(write_step(5, s1, two));
    expect(held["ok"] == false && held["error"]["code"] == "storage_unavailable" && held["error"]["retryable"] == true,
           "a step on a full disk: " + held.dump());
    Value fresh = a.call(write_step(6, s1, "three"));
    expect(fresh["error"]["code"] == "storage_unavailable", "a new step while one is held: " + fresh.dump());
    Value obs = a.call(req(7, "observe", {{"session", s1}}));
    expect(obs["error"]["code"] == "storage_unavailable", "observe while a step is held: " + obs.dump());
    Value nr = a.call(req(8, "reset", {{"task", "vector_add"}, {"layer", 1}}));
    expect(nr["error"]["code"] == "storage_unavailable", "a reset on a full disk: " + nr.dump());
    Value comp = a.call(req(9, "step", {{"session", s2}, {"action", {{"type", "compile"}}}}));
    expect(comp["ok"] == false && comp["error"]["code"] == "storage_unavailable",
           "a compile on a full disk: " + comp.dump().substr(0, 2000));
    expect(comp.dump().find(dir.string()) == std::string::npos, "a host path in the reply: " + comp.dump().substr(0, 2000));

    std::filesystem::remove(dir / "filler");  // space returns
    Value done = a.call(write_step(5, s1, two));  // the same id: the held step's reply, now logged
    expect(done["ok"] == true && done["observation"]["step"] == 2, "the held step after space returned: " + done.dump());
    Value again = a.call(write_step(6, s1, "three"));  // refused before: it never ran, so it runs now
    expect(again["ok"] == true && again["observation"]["step"] == 3, "the next step: " + again.dump());
    Value comp2 = a.call(req(10, "step", {{"session", s2}, {"action", {{"type", "compile"}}}}));
    expect(comp2["ok"] == true && comp2["observation"]["last"]["action"] == "compile", "compile after: " + comp2.dump().substr(0, 2000));
    expect(comp2["observation"]["budget"]["compiles_used"] == 1,
           "the refused compile was charged: " + comp2["info"].dump() + comp2["observation"].dump().substr(0, 600));
    const std::filesystem::path log = c.log_dir / (s1 + ".d2klog");
    expect(a.call(req(11, "close", {{"session", s1}}))["ok"] == true, "close");
    d2k::env::EpisodeLog l = d2k::env::read_episode_log(log);
    expect(!l.torn_tail.has_value(), "the log has a torn tail");
    std::vector<std::uint64_t> ids;
    for (std::size_t i = 0; i < l.exchanges.size(); ++i) {
      expect(l.exchanges[i].n == i, "exchange numbers are not consecutive");
      expect(l.exchanges[i].reply.value("ok", false), "a logged error reply: " + l.exchanges[i].reply.dump());
      ids.push_back(l.exchanges[i].request.value("id", std::uint64_t{0}));
    }
    expect(ids == std::vector<std::uint64_t>{1, 3, 5, 6, 11}, "logged request ids: " + d2k::protocol::Value(ids).dump());
    if (l.exchanges.size() == 5) expect(l.exchanges[2].reply == done, "the logged reply differs from the one sent");
    return bad.str();
  });
  if (report.rfind("skip:", 0) == 0) return d2k::test::skip(report);
  CHECK(report == "");
}

TEST_CASE("replies carry the server instance; hello.config shows no host paths", "[tenants]") {
  // Issue 22.10: after a restart, unknown_session gave no hint that the server had restarted, and
  // hello.config showed the server's state, log, catalogue and tasks paths.
  std::string first_instance, session;
  d2k::env::Config config = d2k::test::test_config();
  {
    d2k::test::TestServer srv(config);
    zmq::context_t ctx;
    Dealer a(ctx, srv.endpoint, "");
    Value hello = a.call(req(1, "hello"));
    REQUIRE(hello["ok"] == true);
    first_instance = hello["instance"].get<std::string>();
    CHECK(first_instance.size() == 16);
    const std::string cfg = hello["config"].dump();
    for (const auto& p : {config.state_dir, config.log_dir, config.catalogue, config.tasks_dir})
      CHECK(cfg.find(p.string()) == std::string::npos);
    Value r = a.call(req(2, "reset", {{"task", "vector_add"}, {"layer", 1}}));
    REQUIRE(r["ok"] == true);
    CHECK(r["instance"] == first_instance);
    session = r["session"].get<std::string>();
    Value e = a.call(req(3, "observe", {{"session", "nope"}}));
    CHECK(e["error"]["code"] == "unknown_session");
    CHECK(e["error"]["instance"] == first_instance);
  }
  d2k::test::TestServer again(config);  // the same endpoint, a new run
  zmq::context_t ctx;
  Dealer b(ctx, again.endpoint, "");
  Value e = b.call(req(4, "observe", {{"session", session}}));
  CHECK(e["error"]["code"] == "unknown_session");
  REQUIRE(e["error"]["instance"].is_string());
  CHECK(e["error"]["instance"] != first_instance);  // the client can tell the server restarted
}

TEST_CASE("find_occurrences counts overlapping matches in linear time", "[tenants]") {
  using d2k::env::find_occurrences;
  CHECK(find_occurrences("abcabc", "bc") == std::pair<std::size_t, std::size_t>{1, 2});
  CHECK(find_occurrences("aaaa", "aa") == std::pair<std::size_t, std::size_t>{0, 3});
  CHECK(find_occurrences("abc", "x").second == 0);
  CHECK(find_occurrences("ab", "abc").second == 0);
  CHECK(find_occurrences("abababx", "ababx") == std::pair<std::size_t, std::size_t>{2, 1});
  // Issue 22.6: the pathological edit (a 256 KiB run of one letter, and half of it as `old`) took
  // O(n * m) (~0.5 s on the server loop, for every client). Linear now: a generous bound, 100x the
  // linear cost on a loaded machine, that the quadratic search misses by far.
  const std::string hay(256 * 1024, 'a'), needle(128 * 1024, 'a');
  const auto start = std::chrono::steady_clock::now();
  const auto [first, count] = find_occurrences(hay, needle);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(first == 0);
  CHECK(count == 128 * 1024 + 1);
  CHECK(seconds < 1.0);
}

namespace {

// Holds the workspace actions of the sessions it is told to hold, on the step worker that runs
// them, until released: while one is held, the server loop must still answer everyone else.
struct StepGate {
  std::mutex mutex;
  std::condition_variable changed;
  std::set<std::string> held;  // sessions whose actions wait here
  int entered = 0;             // held actions that reached the gate
  std::vector<std::string> order;  // every session that reached the gate, held or not, in order
  void hook(const std::string& session) {
    std::unique_lock lock(mutex);
    order.push_back(session);
    changed.notify_all();
    if (!held.count(session)) return;
    ++entered;
    changed.notify_all();
    changed.wait(lock, [&] { return !held.count(session); });
  }
  // Liveness, not timing: a generous bound so that a broken server fails instead of hanging.
  bool wait_entered(int n) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(60), [&] { return entered >= n; });
  }
  void release(const std::string& session) {
    std::lock_guard lock(mutex);
    held.erase(session);
    changed.notify_all();
  }
  void release_all() {
    std::lock_guard lock(mutex);
    held.clear();
    changed.notify_all();
  }
  bool wait_order(std::size_t n) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(60), [&] { return order.size() >= n; });
  }
  // Declared after the server: whatever a failed check left held goes on, so the server can stop.
  struct Opener {
    StepGate& gate;
    ~Opener() {
      std::lock_guard lock(gate.mutex);
      gate.held.clear();
      gate.changed.notify_all();
    }
  };
};

}  // namespace

TEST_CASE("a workspace action runs off the server loop: other sessions are answered while it is held",
          "[tenants][fair]") {
  // Issue 22.6: a step on a 256 KiB workspace held the loop for milliseconds, so four clients
  // sending them delayed everyone's observe by 14-20 ms. The action now runs on a worker: with one
  // held there indefinitely, another session's observe and its own workspace step are answered.
  StepGate gate;
  d2k::test::TestServer srv(d2k::test::test_config(), nullptr,
                            [&](d2k::env::Server& s) { s.set_step_hook([&](const std::string& id) { gate.hook(id); }); });
  StepGate::Opener opener{gate};
  zmq::context_t ctx;
  Dealer attacker(ctx, srv.endpoint, "");
  Value r = attacker.call(req(1, "reset", {{"task", "vector_add"}, {"layer", 1}}));
  REQUIRE(r["ok"] == true);
  const std::string a = r["session"].get<std::string>();
  d2k::Client victim(srv.endpoint);
  const std::string b = victim.reset("vector_add", 1, 7)["session"].get<std::string>();

  const std::string big(256u << 10, 'x');
  {
    std::lock_guard lock(gate.mutex);
    gate.held.insert(a);
  }
  attacker.send(req(10, "step", {{"session", a}, {"action", {{"type", "write_file"}, {"path", "big.h"}, {"content", big}}}}));
  REQUIRE(gate.wait_entered(1));
  // Pipelined behind the held action: answered after it, in order, and seeing its effect.
  attacker.send(req(11, "observe", {{"session", a}}));
  attacker.send(req(12, "step", {{"session", a}, {"action", {{"type", "write_file"}, {"path", "b.h"}, {"content", "y"}}}}));
  attacker.send(req(13, "close", {{"session", a}}));

  // The other client is served meanwhile: observe, and a workspace step of its own (the second worker).
  Value o = victim.observe(b);
  CHECK(o["observation"]["step"] == 0);
  Value st = victim.step(b, {{"type", "write_file"}, {"path", "small.h"}, {"content", "z"}});
  CHECK(st["observation"]["step"] == 1);
  CHECK(st["observation"]["files"]["small.h"] == "z");
  zmq::pollitem_t item{attacker.socket.handle(), 0, ZMQ_POLLIN, 0};
  CHECK(zmq::poll(&item, 1, std::chrono::milliseconds(0)) == 0);  // nothing of the held session yet

  gate.release(a);
  Value s10 = attacker.recv(), s11 = attacker.recv(), s12 = attacker.recv(), s13 = attacker.recv();
  CHECK(s10["id"] == 10);
  CHECK(s10["observation"]["step"] == 1);
  CHECK(s10["observation"]["files"]["big.h"].get<std::string>().size() == big.size());
  CHECK(s11["id"] == 11);
  CHECK(s11["observation"]["step"] == 1);
  CHECK(s11["observation"]["files"].contains("big.h"));
  CHECK(s12["id"] == 12);
  CHECK(s12["observation"]["step"] == 2);
  CHECK(s12["observation"]["files"]["b.h"] == "y");
  CHECK(s13["id"] == 13);
  CHECK(s13["steps"] == 2);
  // The close was answered last: the session is gone.
  Value again = attacker.call(req(14, "observe", {{"session", a}}));
  CHECK(again["error"]["code"] == "unknown_session");
  victim.close(b);
}

TEST_CASE("requests pipelined behind a workspace action beyond the hold limit are handled at once", "[tenants][fair]") {
  StepGate gate;
  d2k::test::TestServer srv(d2k::test::test_config(), nullptr,
                            [&](d2k::env::Server& s) { s.set_step_hook([&](const std::string& id) { gate.hook(id); }); });
  StepGate::Opener opener{gate};
  zmq::context_t ctx;
  Dealer c(ctx, srv.endpoint, "");
  Value r = c.call(req(1, "reset", {{"task", "vector_add"}, {"layer", 1}}));
  REQUIRE(r["ok"] == true);
  const std::string a = r["session"].get<std::string>();
  {
    std::lock_guard lock(gate.mutex);
    gate.held.insert(a);
  }
  c.send(req(10, "step", {{"session", a}, {"action", {{"type", "write_file"}, {"path", "x.h"}, {"content", "1"}}}}));
  REQUIRE(gate.wait_entered(1));
  constexpr int kSent = 12;  // more than the server holds (8)
  for (int i = 0; i < kSent; ++i) c.send(req(100 + static_cast<std::uint64_t>(i), "observe", {{"session", a}}));
  c.send(req(200, "step", {{"session", a}, {"action", {{"type", "write_file"}, {"path", "y.h"}, {"content", "2"}}}}));
  // Those over the limit are handled while the action is still held, as during a compile: the
  // observes show the state before it, a second step is busy (retryable, no effect).
  std::vector<std::uint64_t> now;
  for (int i = 0; i < kSent - 8; ++i) {
    Value o = c.recv();
    CHECK(o["ok"] == true);
    CHECK(o["observation"]["step"] == 0);
    now.push_back(o["id"].get<std::uint64_t>());
  }
  CHECK(now == std::vector<std::uint64_t>{108, 109, 110, 111});
  Value busy = c.recv();
  CHECK(busy["id"] == 200);
  CHECK(busy["error"]["code"] == "busy");
  gate.release(a);
  Value s10 = c.recv();
  CHECK(s10["id"] == 10);
  for (int i = 0; i < 8; ++i) {
    Value o = c.recv();
    CHECK(o["id"] == 100 + i);
    CHECK(o["observation"]["step"] == 1);
  }
}

TEST_CASE("a slow episode-log sync holds only its own session's replies that changed the episode",
          "[tenants][fair][storage]") {
  // Issue 22.6: every exchange was fdatasync'ed on the server loop before its reply went out, so
  // with episode logs on, four clients flooding steps pushed another client's observe to a p99 of
  // 130-400 ms. The fdatasync now runs on log-sync threads: with one session's sync held there
  // indefinitely, another session is answered. In the held session, a reply that changed the
  // episode (a step, a close) waits until its record is durable, and so does everything after it;
  // a reply that changed nothing (an observe, an error) goes out once its record is written.
  StepGate gate;
  d2k::env::Config config = d2k::test::test_config();
  REQUIRE(config.record);
  d2k::test::TestServer srv(config, nullptr,
                            [&](d2k::env::Server& s) { s.set_sync_hook([&](const std::string& id) { gate.hook(id); }); });
  StepGate::Opener opener{gate};
  zmq::context_t ctx;
  Dealer slow(ctx, srv.endpoint, "");
  Value r = slow.call(req(1, "reset", {{"task", "vector_add"}, {"layer", 1}}));
  REQUIRE(r["ok"] == true);
  const std::string a = r["session"].get<std::string>();
  {
    std::lock_guard lock(gate.mutex);
    gate.held.insert(a);
  }
  // An observe changes nothing: answered once its record is written, with no fdatasync of its own
  // (the session's next one makes it durable: docs/episode-log.md).
  Value s10 = slow.call(req(10, "observe", {{"session", a}}));
  CHECK(s10["id"] == 10);
  CHECK(s10["observation"]["step"] == 0);
  CHECK(d2k::env::read_episode_log(config.log_dir / (a + ".d2klog")).exchanges.size() == 2);  // reset, 10
  slow.send(req(11, "step", {{"session", a}, {"action", {{"type", "write_file"}, {"path", "n.h"}, {"content", "1"}}}}));
  REQUIRE(gate.wait_entered(1));  // the step's fdatasync (the observe's record with it), held
  slow.send(req(12, "observe", {{"session", a}}));  // it would show step 11: it waits behind it
  slow.send(req(13, "observe", {{"session", "nope"}}));  // no such session: an error, not logged, not held
  slow.send(req(14, "step", {{"session", a}, {"action", {{"type", "nope"}}}}));  // refused: changes nothing, but behind 11

  // Another client opens a session, observes and steps: each reply after its own record is written.
  d2k::Client victim(srv.endpoint);
  const std::string b = victim.reset("vector_add", 1, 7)["session"].get<std::string>();
  CHECK(victim.observe(b)["observation"]["step"] == 0);
  Value st = victim.step(b, {{"type", "write_file"}, {"path", "small.h"}, {"content", "z"}});
  CHECK(st["observation"]["step"] == 1);
  const d2k::env::EpisodeLog lb = d2k::env::read_episode_log(config.log_dir / (b + ".d2klog"));
  CHECK(lb.exchanges.size() == 3);  // reset, observe, step: all in the log when their replies came

  // The held session's step and what came after it were handled and logged, not answered: only
  // request 13 (no session) is.
  Value e13 = slow.recv();
  CHECK(e13["id"] == 13);
  CHECK(e13["error"]["code"] == "unknown_session");
  zmq::pollitem_t item{slow.socket.handle(), 0, ZMQ_POLLIN, 0};
  CHECK(zmq::poll(&item, 1, std::chrono::milliseconds(200)) == 0);
  const d2k::env::EpisodeLog written = d2k::env::read_episode_log(config.log_dir / (a + ".d2klog"));
  CHECK(written.exchanges.size() == 5);  // reset, 10, 11, 12, 14: written, 11 waiting for its fdatasync

  gate.release(a);
  Value s11 = slow.recv(), s12 = slow.recv(), s14 = slow.recv();
  CHECK(s11["id"] == 11);
  CHECK(s11["observation"]["step"] == 1);
  CHECK(s12["id"] == 12);
  CHECK(s12["observation"]["files"]["n.h"] == "1");
  CHECK(s14["id"] == 14);
  CHECK(s14["ok"] == false);
  const d2k::env::EpisodeLog la = d2k::env::read_episode_log(config.log_dir / (a + ".d2klog"));
  REQUIRE(la.exchanges.size() == 5);
  CHECK(la.exchanges[1].reply == s10);
  CHECK(la.exchanges[3].reply == s12);
  Value closed = slow.call(req(15, "close", {{"session", a}}));
  CHECK(closed["steps"] == 1);
  victim.close(b);
}

TEST_CASE("one client's many queued workspace actions do not go before another client's", "[tenants][fair]") {
  // Issue 22.6: workspace actions of every session queued for the two step workers in arrival
  // order, so a client that kept many sessions stepping made another client's step wait behind all
  // of them. The pools now take tenants (routing id, or CURVE key) in turn: counted here by the
  // order in which actions reach the workers, not by time.
  StepGate gate;
  d2k::test::TestServer srv(d2k::test::test_config(), nullptr,
                            [&](d2k::env::Server& s) { s.set_step_hook([&](const std::string& id) { gate.hook(id); }); });
  StepGate::Opener opener{gate};
  zmq::context_t ctx;
  Dealer flood(ctx, srv.endpoint, "flood");
  constexpr int kSessions = 8;
  std::vector<std::string> fs;
  for (int i = 0; i < kSessions; ++i) {
    Value r = flood.call(req(1 + static_cast<std::uint64_t>(i), "reset", {{"task", "vector_add"}, {"layer", 1}}));
    REQUIRE(r["ok"] == true);
    fs.push_back(r["session"].get<std::string>());
  }
  Dealer victim(ctx, srv.endpoint, "victim");
  Value vr = victim.call(req(1, "reset", {{"task", "vector_add"}, {"layer", 1}}));
  REQUIRE(vr["ok"] == true);
  const std::string v = vr["session"].get<std::string>();
  {
    std::lock_guard lock(gate.mutex);
    for (const auto& f : fs) gate.held.insert(f);
  }
  auto write = [](std::uint64_t id, const std::string& session) {
    return req(id, "step", {{"session", session}, {"action", {{"type", "write_file"}, {"path", "x.h"}, {"content", "1"}}}});
  };
  for (int i = 0; i < kSessions; ++i) flood.send(write(100 + static_cast<std::uint64_t>(i), fs[static_cast<std::size_t>(i)]));
  REQUIRE(gate.wait_entered(2));  // both step workers hold one of the flood's actions; six wait in the queue
  // The flood's requests are all handled (queued) before the victim's: a stats round trip on the
  // flood's own connection comes back after them.
  REQUIRE(flood.call(req(500, "stats"))["ok"] == true);
  victim.send(write(10, v));
  REQUIRE(victim.call(req(11, "stats"))["ok"] == true);  // the victim's step is queued too
  gate.release_all();
  REQUIRE(gate.wait_order(kSessions + 1));
  std::vector<std::string> order;
  {
    std::lock_guard lock(gate.mutex);
    order = gate.order;
  }
  const auto at = std::find(order.begin(), order.end(), v) - order.begin();
  // Two of the flood's were on the workers; then the flood and the victim take turns, so the
  // victim's action is the third or fourth to reach a worker (the two workers race for the next two).
  // In arrival order it was the ninth.
  CHECK(at <= 3);
  Value s10 = victim.recv();
  CHECK(s10["id"] == 10);
  CHECK(s10["observation"]["step"] == 1);
  for (int i = 0; i < kSessions; ++i) CHECK(flood.recv()["ok"] == true);
}
