// Frames over the message limit are answered with a typed too_large that carries the request's
// id (read from the frame without decoding it), over a real ZeroMQ socket.
#include "catch.hpp"
#include "server_fixture.hpp"

using d2k::protocol::Value;

namespace {

Value round_trip(zmq::socket_t& s, const std::string& bytes) {
  s.send(zmq::buffer(bytes), zmq::send_flags::none);
  zmq::message_t m;
  REQUIRE(s.recv(m));
  d2k::protocol::Limits l;
  l.max_message_bytes = 64u << 20;
  return d2k::protocol::decode(std::string_view(static_cast<const char*>(m.data()), m.size()), l);
}

}  // namespace

TEST_CASE("peek_request_id finds the id without decoding the frame") {
  using d2k::protocol::encode;
  using d2k::protocol::peek_request_id;
  CHECK(peek_request_id(encode({{"v", 1}, {"id", 9}, {"op", "hello"}})) == 9u);
  // Keys are encoded in order: "action" (with a big string, an array and a nested map) comes first.
  const std::string step = encode({{"v", 1},
                                   {"id", 123456789012ull},
                                   {"op", "step"},
                                   {"action", {{"type", "write_file"}, {"content", std::string(70000, 'x')},
                                               {"list", Value::array({1, -2, 3.5, nullptr, true, "s"})}}}});
  CHECK(peek_request_id(step) == 123456789012ull);
  CHECK(peek_request_id(encode({{"v", 1}, {"op", "hello"}})) == std::nullopt);          // no id
  CHECK(peek_request_id(encode({{"id", "7"}, {"op", "hello"}})) == std::nullopt);       // not a number
  CHECK(peek_request_id(encode({{"id", -7}, {"op", "hello"}})) == std::nullopt);        // negative
  CHECK(peek_request_id(encode(Value::array({1, 2}))) == std::nullopt);                 // not a map
  CHECK(peek_request_id(step.substr(0, 1000)) == std::nullopt);                         // cut before the id
  CHECK(peek_request_id(step, 3) == std::nullopt);                                      // over the item budget
  CHECK(peek_request_id("") == std::nullopt);
  // A signed encoding of a non-negative id (some encoders use it) counts: {"id": int8 5}.
  CHECK(peek_request_id(std::string("\x81\xa2id\xd0\x05", 6)) == 5u);
  CHECK(peek_request_id(std::string("\x81\xa2id\xd0\xfb", 6)) == std::nullopt);  // -5
}

TEST_CASE("a frame over the message limit gets too_large with its request id", "[server][protocol]") {
  d2k::test::TestServer srv;
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::req);
  s.set(zmq::sockopt::linger, 0);
  s.connect(srv.endpoint);
  const std::size_t limit = srv.server->config().limits.max_message_bytes;

  // Just over the limit, id first.
  Value r = round_trip(s, d2k::protocol::encode({{"v", 1}, {"id", 9}, {"op", "hello"}, {"pad", std::string(limit, 'p')}}));
  CHECK(r["ok"] == false);
  CHECK(r["error"]["code"] == "too_large");
  CHECK(r["id"] == 9);

  // The case: a 50 MB write_file (more than 4 × the 8 MiB limit), its id after the action.
  r = round_trip(s, d2k::protocol::encode({{"v", 1},
                                          {"id", 10},
                                          {"op", "step"},
                                          {"session", "s"},
                                          {"action", {{"type", "write_file"}, {"path", "kernel.cu"},
                                                      {"content", std::string(50'000'000, 'x')}}}}));
  CHECK(r["error"]["code"] == "too_large");
  CHECK(r["id"] == 10);
  CHECK(r["error"]["message"].get<std::string>().find("50000") != std::string::npos);

  // No readable id: still answered, with id nil.
  r = round_trip(s, d2k::protocol::encode({{"pad", std::string(limit, 'p')}, {"v", 1}}));
  CHECK(r["error"]["code"] == "too_large");
  CHECK(r["id"].is_null());

  // The server carries on.
  r = round_trip(s, d2k::protocol::encode({{"v", 1}, {"id", 11}, {"op", "hello"}}));
  CHECK(r["ok"] == true);
}
