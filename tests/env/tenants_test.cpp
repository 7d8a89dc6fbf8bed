// Many tenants on one server (issue 22): what one client can do to another, and the limits that
// hold per session and per server. Real servers on real ZeroMQ ipc sockets; no nvcc needed.
#include <string>

#include "catch.hpp"
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
                             {"action", {{"type", "write_file"}, {"path", "notes.md"}, {"content", "x"}}}});
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
