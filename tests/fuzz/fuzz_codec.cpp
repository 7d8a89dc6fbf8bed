// libFuzzer harness for the wire codec (protocol/codec.cpp) and the typed request layer
// (protocol/messages.cpp). Built only with -DD2K_FUZZ=ON and clang (tests/fuzz/README.md).
//
// Besides "no crash, no sanitizer report, no exception other than protocol::Error", it checks:
//  - decode's errors are the decoding ones (bad_request, too_large);
//  - what decodes re-encodes, and encode is a fixed point: encode(decode(encode(v))) == encode(v);
//  - peek_request_id, which walks a frame without decoding it, agrees with decode on the id;
//  - the same frame under tight limits fails only with bad_request / too_large;
//  - the envelope and each op's parser throw only protocol::Error, and an error reply always encodes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/codec.hpp"
#include "protocol/messages.hpp"

namespace p = d2k::protocol;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_codec: property violated: %s\n", what);
  std::abort();
}

bool decode_error(p::ErrorCode c) { return c == p::ErrorCode::bad_request || c == p::ErrorCode::too_large; }

// An error reply must encode and carry a message of at most 2048 bytes (PROTOCOL.md section 3).
void error_reply(std::optional<std::uint64_t> id, const p::Error& e) {
  const p::Value reply = p::make_error_reply(id, e);
  if (reply.at("error").at("message").get_ref<const std::string&>().size() > 2048)
    fail("an error message over 2048 bytes");
  (void)p::encode(reply);
}

void typed_layer(const p::Value& v, const p::Limits& limits) {
  p::Envelope env;
  try {
    env = p::parse_envelope(v);
  } catch (const p::Error& e) {
    error_reply(std::nullopt, e);
    return;
  }
  try {
    if (env.op == "reset") (void)p::parse_reset(env, limits);
    if (env.op == "step") (void)p::parse_step(env, limits);
    if (env.op == "observe" || env.op == "close") (void)p::parse_session(env);
  } catch (const p::Error& e) {
    error_reply(env.id, e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const p::Limits limits;
  const std::optional<std::uint64_t> peeked = p::peek_request_id(bytes);

  p::Value v;
  try {
    v = p::decode(bytes, limits);
  } catch (const p::Error& e) {
    if (!decode_error(e.code)) fail("decode threw a code other than bad_request/too_large");
    return 0;
  }
  if (!v.is_object()) fail("decode returned something that is not a map");

  const std::string once = p::encode(v);
  p::Value again;
  try {
    again = p::decode(once, limits);
  } catch (const p::Error&) {
    fail("a decoded value, re-encoded, does not decode");
  }
  if (p::encode(again) != once) fail("encode(decode(encode(v))) != encode(v)");

  auto it = v.find("id");
  if (it != v.end() && it->is_number_unsigned()) {
    if (!peeked || *peeked != it->get<std::uint64_t>()) fail("peek_request_id disagrees with decode on the id");
  }

  // Tight limits: the limit paths must refuse cleanly.
  p::Limits tight;
  tight.max_depth = 3;
  tight.max_string_bytes = 8;
  tight.max_array_items = 3;
  tight.max_map_entries = 5;
  tight.max_total_items = 12;
  tight.max_file_bytes = 16;
  tight.max_label_bytes = 4;
  try {
    (void)p::decode(bytes, tight);
  } catch (const p::Error& e) {
    if (!decode_error(e.code)) fail("decode (tight limits) threw a code other than bad_request/too_large");
  }

  typed_layer(v, limits);
  typed_layer(v, tight);
  return 0;
}
