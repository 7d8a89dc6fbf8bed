// Authenticated remote access with ZeroMQ CURVE (issue 19.1) and what it enables (issue 22.1, 22.2):
// key files and the allowlist, a non-loopback bind refused without keys, unknown keys refused,
// listed keys served, the allowlist re-read while the server runs, sessions bound to the key that
// opened them, and live events that each key sees only for its own sessions (without CURVE: no
// session id and no agent source). Real servers on real ZeroMQ sockets in this process; no nvcc.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "catch.hpp"
#include "../env/server_fixture.hpp"
#include "env/recorder.hpp"
#include "protocol/curve.hpp"

namespace fs = std::filesystem;
using d2k::protocol::Value;
using nlohmann::json;

namespace {

struct Keys {
  fs::path dir = d2k::test::temp_dir("d2k-curve-keys");
  d2k::curve::KeyPair server = d2k::curve::write_key_files(dir, "server");
  d2k::curve::KeyPair alice = d2k::curve::write_key_files(dir, "alice");
  d2k::curve::KeyPair bob = d2k::curve::write_key_files(dir, "bob");
  d2k::curve::KeyPair mallory = d2k::curve::write_key_files(dir, "mallory");  // never listed
  fs::path allowed = dir / "allowed_keys";
  Keys() {
    std::ofstream(allowed) << "# who may connect\n" << alice.public_key << " alice\n" << bob.public_key << " bob\n";
  }
  ~Keys() { fs::remove_all(dir); }
  d2k::curve::ClientKeys as(const d2k::curve::KeyPair& k) const { return {server.public_key, k}; }
};

d2k::env::Config curve_config(const Keys& keys, const std::string& endpoint = "tcp://127.0.0.1:0") {
  d2k::env::Config c = d2k::test::test_config();
  c.endpoint = endpoint;
  c.server_key = keys.dir / "server.key";
  c.allowed_keys = keys.allowed;
  c.events_endpoint = "none";
  return c;
}

d2k::Client::Options with(std::optional<d2k::curve::ClientKeys> keys, int timeout_ms = 20000) {
  d2k::Client::Options o;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  o.retries = 0;
  o.curve = std::move(keys);
  o.curve_from_env = false;
  return o;
}

// True when the server answers hello to this client within `ms` (a refused key gets no answer:
// ZeroMQ drops a connection whose handshake fails, and the request waits unsent).
bool answers(const std::string& endpoint, std::optional<d2k::curve::ClientKeys> keys, int ms = 1500) {
  try {
    d2k::Client c(endpoint, with(std::move(keys), ms));
    return c.hello().value("ok", false);
  } catch (const d2k::ClientError& e) {
    if (e.code != d2k::protocol::ErrorCode::timeout) throw;
    return false;
  }
}

Value write_file(const std::string& content) {
  return {{"type", "write_file"}, {"path", "notes.h"}, {"content", content}};
}

}  // namespace

TEST_CASE("curve: key files, public keys and the allowlist", "[curve]") {
  REQUIRE(d2k::curve::available());
  Keys keys;
  const auto pair = d2k::curve::read_key_pair(keys.dir / "alice.key");
  CHECK(pair.public_key == keys.alice.public_key);
  CHECK(pair.secret_key == keys.alice.secret_key);
  CHECK(d2k::curve::public_of(keys.alice.secret_key) == keys.alice.public_key);
  CHECK(d2k::curve::read_public_key((keys.dir / "alice.pub").string()) == keys.alice.public_key);
  CHECK(d2k::curve::read_public_key((keys.dir / "alice.key").string()) == keys.alice.public_key);
  CHECK(d2k::curve::read_public_key(keys.alice.public_key) == keys.alice.public_key);
  struct stat st {};
  REQUIRE(::stat((keys.dir / "alice.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);  // the secret is the owner's alone
  CHECK_THROWS_AS(d2k::curve::write_key_files(keys.dir, "alice"), std::runtime_error);  // never overwritten
  CHECK(d2k::curve::read_key_pair(keys.dir / "alice.key").secret_key == keys.alice.secret_key);

  const auto list = d2k::curve::read_allowlist(keys.allowed);
  CHECK(list.size() == 2);
  CHECK(list.at(keys.alice.public_key) == "alice");
  CHECK_FALSE(list.count(keys.mallory.public_key));
  // '#' is a Z85 character: a key that starts with it is a key, not a comment.
  std::string hash_key;
  for (int i = 0; i < 2000 && hash_key.empty(); ++i)
    if (auto k = d2k::curve::generate(); k.public_key[0] == '#') hash_key = k.public_key;
  if (!hash_key.empty()) {
    std::ofstream(keys.dir / "hash_list") << hash_key << "\n#\n# " << keys.bob.public_key << "\n";
    const auto hl = d2k::curve::read_allowlist(keys.dir / "hash_list");
    CHECK(hl.size() == 1);
    CHECK(hl.count(hash_key) == 1);
  }
  std::ofstream(keys.dir / "bad_list") << keys.alice.public_key << "\nnot-a-key\n";
  try {
    d2k::curve::read_allowlist(keys.dir / "bad_list");
    FAIL("a bad allowlist line was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("bad_list:2") != std::string::npos);
  }
  // A .key whose public line belongs to another secret is refused.
  std::ofstream(keys.dir / "mixed.key") << "public " << keys.bob.public_key << "\nsecret " << keys.alice.secret_key << "\n";
  CHECK_THROWS_AS(d2k::curve::read_key_pair(keys.dir / "mixed.key"), std::invalid_argument);
}

TEST_CASE("curve: beyond loopback the server refuses to start without keys, and says how", "[curve]") {
  for (const char* endpoint : {"tcp://0.0.0.0:0", "tcp://*:0", "tcp://10.1.2.3:5555"}) {
    d2k::env::Config c = d2k::test::test_config();
    c.endpoint = endpoint;
    d2k::env::Server server(c, d2k::tasks::load_tasks(c.tasks_dir));
    try {
      server.bind();
      FAIL("bound " << endpoint << " without keys");
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      CHECK(what.find("refusing to serve on") != std::string::npos);
      CHECK(what.find("d2k keys server") != std::string::npos);
      CHECK(what.find("--allowed-keys") != std::string::npos);
    }
  }
  Keys keys;
  d2k::env::Config half = curve_config(keys);
  half.allowed_keys.clear();
  d2k::env::Server server(half, d2k::tasks::load_tasks(half.tasks_dir));
  CHECK_THROWS_AS(server.bind(), std::runtime_error);  // a key pair without an allowlist
}

TEST_CASE("curve: listed keys are served, unknown keys and plain clients are not", "[curve]") {
  Keys keys;
  d2k::test::TestServer srv(curve_config(keys));
  CHECK(srv.server->public_key() == keys.server.public_key);
  CHECK(answers(srv.endpoint, keys.as(keys.alice), 20000));
  CHECK(answers(srv.endpoint, keys.as(keys.bob), 20000));
  CHECK_FALSE(answers(srv.endpoint, keys.as(keys.mallory)));
  CHECK_FALSE(answers(srv.endpoint, std::nullopt));  // no CURVE at all
  // A client that has the wrong server key cannot complete the handshake either.
  CHECK_FALSE(answers(srv.endpoint, d2k::curve::ClientKeys{keys.bob.public_key, keys.alice}));

  SECTION("the allowlist is re-read when it changes: a key added is let in, a key removed is not") {
    std::ofstream(keys.allowed) << keys.mallory.public_key << " mallory\n" << keys.bob.public_key << " bob\n";
    bool in = false;
    for (int i = 0; i < 30 && !in; ++i) in = answers(srv.endpoint, keys.as(keys.mallory), 1000);
    CHECK(in);
    CHECK_FALSE(answers(srv.endpoint, keys.as(keys.alice)));  // alice was removed: new connections refused
    // A broken file keeps the list read before.
    std::ofstream(keys.allowed) << "garbage\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past the server's 1 s re-read
    CHECK(answers(srv.endpoint, keys.as(keys.bob), 20000));
  }
}

TEST_CASE("curve: observe's fast path (no recorder) checks the key too", "[curve]") {
  // `observe` is answered from a cached observation (env/server.cpp op_observe, with a recorder
  // too); the merge of that path and the key binding once let another key read it.
  Keys keys;
  d2k::env::Config cfg = curve_config(keys);
  cfg.record = false;
  d2k::test::TestServer srv(cfg);
  d2k::Client alice(srv.endpoint, with(keys.as(keys.alice)));
  const std::string session = alice.reset("vector_add", 1, 5)["session"];
  alice.step(session, write_file("// alice's secret"));
  CHECK(alice.observe(session)["observation"]["files"]["notes.h"] == "// alice's secret");
  d2k::Client bob(srv.endpoint, with(keys.as(keys.bob)));
  try {
    bob.observe(session);
    FAIL("bob could observe alice's session through the fast path");
  } catch (const d2k::ClientError& e) {
    CHECK(e.code == d2k::protocol::ErrorCode::unknown_session);
  }
}

TEST_CASE("curve: a session is bound to the key that opened it; same-key retries work from a new socket", "[curve]") {
  Keys keys;
  d2k::test::TestServer srv(curve_config(keys));
  d2k::Client alice(srv.endpoint, with(keys.as(keys.alice)));
  const Value reset = alice.reset("vector_add", 1, 5);
  const std::uint64_t reset_id = alice.last_id();
  const std::string session = reset["session"];
  const Value stepped = alice.step(session, write_file("// alice's"));
  const std::uint64_t step_id = alice.last_id();

  d2k::Client bob(srv.endpoint, with(keys.as(keys.bob)));
  for (const char* op : {"observe", "close"}) {
    try {
      bob.call(op, {{"session", session}});
      FAIL("bob could " << op << " alice's session");
    } catch (const d2k::ClientError& e) {
      CHECK(e.code == d2k::protocol::ErrorCode::unknown_session);
    }
  }
  try {
    bob.step(session, write_file("// bob's"));
    FAIL("bob could step alice's session");
  } catch (const d2k::ClientError& e) {
    CHECK(e.code == d2k::protocol::ErrorCode::unknown_session);
  }
  // Bob retrying alice's request ids gets nothing of hers either.
  CHECK_THROWS_AS(bob.call_with_id(step_id, "step", {{"session", session}, {"action", write_file("// alice's")}}),
                  d2k::ClientError);
  CHECK(bob.call_with_id(reset_id, "reset", {{"task", "vector_add"}, {"layer", 1}, {"seed", 5}})["session"] != session);

  // Alice, reconnected on a new socket (a new routing id), retries with the same ids: same replies.
  d2k::Client again(srv.endpoint, with(keys.as(keys.alice)));
  CHECK(again.call_with_id(reset_id, "reset", {{"task", "vector_add"}, {"layer", 1}, {"seed", 5}})["session"] == session);
  const Value retried = again.call_with_id(step_id, "step", {{"session", session}, {"action", write_file("// alice's")}});
  CHECK(retried["observation"]["budget"] == stepped["observation"]["budget"]);
  CHECK(again.observe(session)["observation"]["files"]["notes.h"] == "// alice's");
  CHECK(again.close(session)["session"] == session);
}

namespace {

// A SUB socket on the server's events endpoint (CURVE with `keys`, else plain).
struct Watcher {
  Watcher(zmq::context_t& ctx, const std::string& endpoint, std::optional<d2k::curve::ClientKeys> keys,
          const std::string& topic = "")
      : sub(ctx, zmq::socket_type::sub) {
    sub.set(zmq::sockopt::linger, 0);
    sub.set(zmq::sockopt::rcvtimeo, 100);
    if (keys) d2k::curve::make_client(sub.handle(), *keys);
    sub.set(zmq::sockopt::subscribe, topic);
    sub.connect(endpoint);
  }
  // Every event that arrives within `ms`: {topic, raw payload}.
  std::vector<std::pair<std::string, std::string>> drain(int ms) {
    std::vector<std::pair<std::string, std::string>> out;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
      std::vector<zmq::message_t> frames;
      if (zmq::recv_multipart(sub, std::back_inserter(frames)) && frames.size() == 2)
        out.emplace_back(frames[0].to_string(), frames[1].to_string());
    }
    return out;
  }
  zmq::socket_t sub;
};

}  // namespace

TEST_CASE("curve: each key sees the events of its own sessions only, whole", "[curve][events]") {
  Keys keys;
  d2k::env::Config c = curve_config(keys);
  c.endpoint = "ipc:///tmp/d2k-curve-" + std::to_string(::getpid()) + ".sock";
  c.events_endpoint = "";  // derived: <ipc path>.events, CURVE like the server
  d2k::test::TestServer srv(c);
  REQUIRE(!srv.server->events_endpoint().empty());
  zmq::context_t ctx;
  Watcher alice_watch(ctx, srv.server->events_endpoint(), keys.as(keys.alice));
  Watcher bob_watch(ctx, srv.server->events_endpoint(), keys.as(keys.bob));
  Watcher plain_watch(ctx, srv.server->events_endpoint(), std::nullopt);  // refused at the handshake
  d2k::Client alice(srv.endpoint, with(keys.as(keys.alice)));
  const std::string session = alice.reset("vector_add", 1, 5)["session"];
  const std::string topic = keys.alice.public_key + ":" + d2k::env::watch_id(session);
  // Subscriptions reach the server asynchronously: observe (no step) until alice's watcher has one.
  bool joined = false;
  for (int i = 0; i < 100 && !joined; ++i) {
    alice.observe(session);
    joined = !alice_watch.drain(100).empty();
  }
  REQUIRE(joined);
  // Bob watches alice's session by its watch id: still nothing of hers.
  Watcher bob_targeted(ctx, srv.server->events_endpoint(), keys.as(keys.bob), d2k::env::watch_id(session));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  alice.step(session, write_file("ALICE_SECRET_SOURCE"));
  alice.close(session);
  bool ended = false;
  std::string seen;
  for (int i = 0; i < 50 && !ended; ++i)
    for (const auto& [t, payload] : alice_watch.drain(100)) {
      CHECK(t == topic);
      CHECK(payload.find(session) == std::string::npos);
      seen += payload;
      ended = ended || json::from_msgpack(payload).value("kind", "") == "end";
    }
  CHECK(ended);
  CHECK(seen.find("ALICE_SECRET_SOURCE") != std::string::npos);  // the owner sees its source
  CHECK(bob_watch.drain(300).empty());
  CHECK(bob_targeted.drain(300).empty());
  CHECK(plain_watch.drain(300).empty());
}

TEST_CASE("without CURVE, event subscribers get neither session ids nor agent source", "[curve][events]") {
  d2k::env::Config c = d2k::test::test_config();
  c.events_endpoint = "";  // derived from the ipc endpoint
  d2k::test::TestServer srv(c);
  REQUIRE(!srv.server->events_endpoint().empty());
  zmq::context_t ctx;
  Watcher watch(ctx, srv.server->events_endpoint(), std::nullopt);
  d2k::Client client(srv.endpoint, with(std::nullopt));
  const std::string session = client.reset("vector_add", 1, 5)["session"];
  bool joined = false;
  for (int i = 0; i < 100 && !joined; ++i) {
    client.observe(session);
    joined = !watch.drain(100).empty();
  }
  REQUIRE(joined);
  client.step(session, write_file("PLAIN_SECRET_SOURCE"));
  client.step(session, {{"type", "edit"}, {"path", "notes.h"}, {"old", "PLAIN_SECRET"}, {"new", "EDITED_SECRET"}});
  client.close(session);
  std::string seen;
  bool ended = false;
  for (int i = 0; i < 50 && !ended; ++i)
    for (const auto& [t, payload] : watch.drain(100)) {
      CHECK(t == d2k::env::watch_id(session));
      seen += payload;
      ended = ended || json::from_msgpack(payload).value("kind", "") == "end";
    }
  REQUIRE(ended);
  CHECK(seen.find(session) == std::string::npos);
  CHECK(seen.find("SECRET") == std::string::npos);
  CHECK(seen.find("write_file") != std::string::npos);  // what happened still shows, without the text
}

TEST_CASE("curve: events beyond loopback only with CURVE", "[curve][events]") {
  d2k::env::Config plain = d2k::test::test_config();
  plain.events_endpoint = "tcp://0.0.0.0:0";
  d2k::env::Server refused(plain, d2k::tasks::load_tasks(plain.tasks_dir));
  try {
    refused.bind();
    FAIL("events bound beyond loopback without CURVE");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("events need CURVE") != std::string::npos);
  }
  Keys keys;
  d2k::env::Config c = curve_config(keys);
  c.events_endpoint = "tcp://0.0.0.0:0";
  d2k::test::TestServer srv(c);
  CHECK(srv.server->events_endpoint().rfind("tcp://0.0.0.0:", 0) == 0);
}

TEST_CASE("curve: the C++ client takes its keys from D2K_SERVER_KEY and D2K_CLIENT_KEY", "[curve]") {
  Keys keys;
  d2k::test::TestServer srv(curve_config(keys));
  ::setenv("D2K_SERVER_KEY", (keys.dir / "server.pub").c_str(), 1);
  ::setenv("D2K_CLIENT_KEY", (keys.dir / "bob.key").c_str(), 1);
  d2k::Client::Options o;
  o.timeout = std::chrono::milliseconds(20000);
  o.retries = 0;
  bool served = false;
  try {
    served = d2k::Client(srv.endpoint, o).hello().value("ok", false);
  } catch (const d2k::ClientError&) {
  }
  ::setenv("D2K_CLIENT_KEY", "", 1);  // one without the other is an error, not a silent plain client
  CHECK_THROWS_AS(d2k::Client(srv.endpoint, o), std::invalid_argument);
  ::unsetenv("D2K_SERVER_KEY");
  ::unsetenv("D2K_CLIENT_KEY");
  CHECK(served);
}
