// decode/encode: exact bytes for each type, round trips, and every kind of hostile input.
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "protocol/codec.hpp"
#include "protocol/detail/utf8.hpp"

// Substring matcher under both Catch2 v2 (Debian) and v3 (the GPU machine).
#if __has_include(<catch2/catch_all.hpp>)
inline auto Contains(const std::string& text) { return Catch::Matchers::ContainsSubstring(text); }
#else
inline auto Contains(const std::string& text) { return Catch::Matchers::Contains(text); }
#endif

using d2k::protocol::decode;
using d2k::protocol::encode;
using d2k::protocol::Error;
using d2k::protocol::ErrorCode;
using d2k::protocol::Limits;
using d2k::protocol::Value;

namespace {

std::string bytes(std::initializer_list<int> list) {
  std::string s;
  for (int b : list) s += static_cast<char>(b);
  return s;
}

// The Error decode throws for `data`; fails the test when it throws nothing or something else.
Error decode_error(const std::string& data, const Limits& limits = Limits{}) {
  try {
    Value v = decode(data, limits);
    FAIL("decoded without error: " << v.dump());
  } catch (const Error& e) {
    return e;
  }
  throw std::logic_error("unreachable");
}

std::string valid_request() {
  return encode({{"v", 1}, {"id", 42}, {"op", "step"}, {"session", "s-1"},
                 {"action", {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", "__global__ void k() {}\n"}}}});
}

// Nested one-element arrays, `depth` deep, inside a top-level map {"a": ...}.
std::string nested(std::size_t depth) {
  std::string s = bytes({0x81, 0xa1, 'a'});
  for (std::size_t i = 1; i < depth; ++i) s += static_cast<char>(0x91);
  s += static_cast<char>(0xc0);
  return s;
}

}  // namespace

TEST_CASE("encode writes the documented MessagePack types") {
  CHECK(encode({{"a", 1}}) == bytes({0x81, 0xa1, 'a', 0x01}));                 // non-negative → positive fixint
  CHECK(encode({{"a", -1}}) == bytes({0x81, 0xa1, 'a', 0xff}));                // negative fixint
  CHECK(encode({{"a", 300}}) == bytes({0x81, 0xa1, 'a', 0xcd, 0x01, 0x2c}));   // uint16
  CHECK(encode({{"a", nullptr}}) == bytes({0x81, 0xa1, 'a', 0xc0}));
  CHECK(encode({{"a", true}}) == bytes({0x81, 0xa1, 'a', 0xc3}));
  CHECK(encode({{"a", 1.5}}) == bytes({0x81, 0xa1, 'a', 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}));  // float64
  CHECK(encode({{"a", 1.0}}) == bytes({0x81, 0xa1, 'a', 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0}));  // integral double
  CHECK(encode({{"a", 0.0}}) == bytes({0x81, 0xa1, 'a', 0xcb, 0, 0, 0, 0, 0, 0, 0, 0}));
  CHECK(encode({{"a", "hi"}}) == bytes({0x81, 0xa1, 'a', 0xa2, 'h', 'i'}));                    // str
  CHECK(encode({{"a", Value::binary({1, 2})}}) == bytes({0x81, 0xa1, 'a', 0xc4, 0x02, 0x01, 0x02}));  // bin
  CHECK(encode({{"a", Value::array({1, "x"})}}) == bytes({0x81, 0xa1, 'a', 0x92, 0x01, 0xa1, 'x'}));
  CHECK(encode(Value::object()) == bytes({0x80}));
}

TEST_CASE("decode keeps types: signedness, floats, bin as string") {
  Value v = decode(encode({{"u", 18446744073709551615ull}, {"i", -5}, {"d", 0.25}, {"s", "text"}, {"n", nullptr},
                           {"b", false}, {"m", {{"x", Value::array({1, 2, 3})}}}}),
                   Limits{});
  CHECK(v["u"].is_number_unsigned());
  CHECK(v["u"].get<std::uint64_t>() == 18446744073709551615ull);
  CHECK(v["i"].is_number_integer());
  CHECK_FALSE(v["i"].is_number_unsigned());
  CHECK(v["i"].get<std::int64_t>() == -5);
  CHECK(v["d"].get<double>() == 0.25);
  CHECK(decode(encode({{"r", 0.0}}), Limits{})["r"].is_number_float());  // a reward of 0.0 stays a float
  CHECK(v["s"] == "text");
  CHECK(v["n"].is_null());
  CHECK(v["b"] == false);
  CHECK(v["m"]["x"] == Value::array({1, 2, 3}));

  // float32 becomes a double; bin becomes a string.
  Value f = decode(bytes({0x81, 0xa1, 'f', 0xca, 0x3f, 0xc0, 0, 0}), Limits{});
  CHECK(f["f"].is_number_float());
  CHECK(f["f"].get<double>() == 1.5);
  Value b = decode(bytes({0x81, 0xa1, 'c', 0xc4, 0x03, 'a', 'b', 'c'}), Limits{});
  CHECK(b["c"] == "abc");
}

TEST_CASE("round trip of a valid request is exact") {
  std::string wire = valid_request();
  Value v = decode(wire, Limits{});
  CHECK(encode(v) == wire);
  CHECK(v["action"]["path"] == "kernel.cu");
}

TEST_CASE("the top level must be a map") {
  for (const Value& v : {Value::array({1}), Value(1), Value("x"), Value(nullptr)}) {
    Error e = decode_error(encode(v));
    CHECK(e.code == ErrorCode::bad_request);
    CHECK_THAT(e.what(), Contains("map at the top level"));
  }
}

TEST_CASE("every strict prefix of a valid request is refused as truncated") {
  std::string wire = valid_request();
  Error empty = decode_error("");
  CHECK(empty.code == ErrorCode::bad_request);
  for (std::size_t n = 1; n < wire.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    Error e = decode_error(wire.substr(0, n));
    CHECK(e.code == ErrorCode::bad_request);
    CHECK_THAT(e.what(), Contains("truncated"));
  }
}

TEST_CASE("trailing bytes after the value are refused") {
  Error e = decode_error(valid_request() + "x");
  CHECK(e.code == ErrorCode::bad_request);
  CHECK_THAT(e.what(), Contains("trailing bytes"));
  CHECK(decode_error(valid_request() + valid_request()).code == ErrorCode::bad_request);
}

TEST_CASE("invalid type bytes and extension types are refused") {
  Error invalid = decode_error(bytes({0x81, 0xa1, 'a', 0xc1}));
  CHECK(invalid.code == ErrorCode::bad_request);
  CHECK_THAT(invalid.what(), Contains("malformed"));
  Error ext = decode_error(bytes({0x81, 0xa1, 'a', 0xd4, 0x01, 0x00}));  // fixext1
  CHECK(ext.code == ErrorCode::bad_request);
  CHECK_THAT(ext.what(), Contains("extension"));
  CHECK(ext.field == "a");
  // A large ext body is refused by the unpack limit before it is read.
  CHECK(decode_error(bytes({0x81, 0xa1, 'a', 0xc9, 0x7f, 0xff, 0xff, 0xff, 0x01})).code == ErrorCode::bad_request);
}

TEST_CASE("map keys must be unique strings; the error names where") {
  Error top = decode_error(bytes({0x81, 0x01, 0x02}));
  CHECK(top.code == ErrorCode::bad_request);
  CHECK_THAT(top.what(), Contains("keys must be strings"));
  // {"action": {1: 2}}
  std::string inner = bytes({0x81, 0xa6, 'a', 'c', 't', 'i', 'o', 'n', 0x81, 0x01, 0x02});
  Error e = decode_error(inner);
  CHECK(e.field == "action");
  // {"a": [0, {"b": {nil: 1}}]}
  Error deep = decode_error(bytes({0x81, 0xa1, 'a', 0x92, 0x00, 0x81, 0xa1, 'b', 0x81, 0xc0, 0x01}));
  CHECK(deep.field == "a[1].b");
  Error dup = decode_error(bytes({0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x02}));
  CHECK(dup.code == ErrorCode::bad_request);
  CHECK_THAT(dup.what(), Contains("duplicate"));
  CHECK(dup.field == "a");
}

TEST_CASE("strings must be UTF-8 unless the limits say otherwise") {
  std::string bad = bytes({0x81, 0xa4, 'p', 'a', 't', 'h', 0xa2, 0xc3, 0x28});
  Error e = decode_error(bad);
  CHECK(e.code == ErrorCode::bad_request);
  CHECK(e.field == "path");
  CHECK_THAT(e.what(), Contains("UTF-8"));
  for (auto seq : {bytes({0xed, 0xa0, 0x80}), bytes({0xc0, 0xaf}), bytes({0xf4, 0x90, 0x80, 0x80}), bytes({0xff})}) {
    std::string m = bytes({0x81, 0xa1, 'a'}) + static_cast<char>(0xa0 + seq.size()) + seq;
    CHECK(decode_error(m).code == ErrorCode::bad_request);
  }
  Limits lax;
  lax.require_utf8 = false;
  CHECK(decode(bad, lax)["path"].get<std::string>() == bytes({0xc3, 0x28}));
  CHECK(decode(encode({{"s", "grüße ✓ 🚀"}}), Limits{})["s"] == "grüße ✓ 🚀");
}

namespace {

// The first ill-formed byte by the definition (Unicode table 3-7), one code point at a time: the
// reference the codec's validator (which skips ASCII eight bytes at a time) must agree with.
std::size_t reference_first_invalid(const std::string& s) {
  auto u = [&](std::size_t k) { return static_cast<unsigned>(static_cast<unsigned char>(s[k])); };
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned c = u(i);
    std::size_t n = 0;
    unsigned lo = 0x80, hi = 0xbf;
    if (c <= 0x7f) n = 1;
    else if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c == 0xe0) n = 3, lo = 0xa0;
    else if (c == 0xed) n = 3, hi = 0x9f;
    else if (c >= 0xe1 && c <= 0xef) n = 3;
    else if (c == 0xf0) n = 4, lo = 0x90;
    else if (c == 0xf4) n = 4, hi = 0x8f;
    else if (c >= 0xf1 && c <= 0xf3) n = 4;
    else return i;
    if (i + n > s.size()) return i;
    for (std::size_t k = 1; k < n; ++k) {
      const unsigned b = u(i + k);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) return i;
    }
    i += n;
  }
  return std::string::npos;
}

}  // namespace

TEST_CASE("the UTF-8 check finds the same first bad byte as a code-point-at-a-time reference") {
  using d2k::protocol::detail::first_invalid_utf8;
  // Long ASCII runs (the eight-byte path) with a bad or a multi-byte sequence at every offset.
  const std::vector<std::string> inserts = {bytes({0x80}), bytes({0xc3}), bytes({0xc3, 0xa9}), bytes({0xc0, 0xaf}),
                                            bytes({0xe2, 0x9c, 0x93}), bytes({0xe2, 0x9c}), bytes({0xed, 0xa0, 0x80}),
                                            bytes({0xf0, 0x9f, 0x9a, 0x80}), bytes({0xf4, 0x90, 0x80, 0x80}),
                                            bytes({0xff}), bytes({0x7f})};
  for (std::size_t len : {0, 1, 7, 8, 9, 15, 16, 17, 31, 64}) {
    for (std::size_t at = 0; at <= len; ++at) {
      for (const std::string& ins : inserts) {
        std::string s = std::string(len, 'a');
        s.insert(at, ins);
        INFO("length " << len << ", insert at " << at << ", " << ins.size() << " bytes");
        CHECK(first_invalid_utf8(s) == reference_first_invalid(s));
      }
    }
  }
  std::mt19937 rng(2026);
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const std::size_t n = rng() % 48;
    for (std::size_t k = 0; k < n; ++k) {
      const unsigned r = rng() % 16;
      if (r < 10) s += static_cast<char>('a' + r);        // mostly ASCII, in runs
      else if (r < 13) s += inserts[rng() % inserts.size()];
      else s += static_cast<char>(rng());                   // any byte
    }
    INFO("case " << i);
    CHECK(first_invalid_utf8(s) == reference_first_invalid(s));
  }
  CHECK(first_invalid_utf8(std::string(100, 'x') + bytes({0xc3})) == 100);
}

TEST_CASE("maps decode whatever the key order; a duplicate is found in or out of order") {
  // {"b": 1, "a": 2, "c": 3}: out of order, all kept.
  Value v = decode(bytes({0x83, 0xa1, 'b', 0x01, 0xa1, 'a', 0x02, 0xa1, 'c', 0x03}), Limits{});
  CHECK(v == Value({{"a", 2}, {"b", 1}, {"c", 3}}));
  // {"b": 1, "a": 2, "b": 3}: the duplicate is not the last key.
  Error back = decode_error(bytes({0x83, 0xa1, 'b', 0x01, 0xa1, 'a', 0x02, 0xa1, 'b', 0x03}));
  CHECK_THAT(back.what(), Contains("duplicate map key 'b'"));
  CHECK(back.field == "b");
  // {"x": {"a": 1, "c": 2, "b": 3, "c": 4}} nested: the field is the whole path.
  Error nested_dup = decode_error(
      bytes({0x81, 0xa1, 'x', 0x84, 0xa1, 'a', 0x01, 0xa1, 'c', 0x02, 0xa1, 'b', 0x03, 0xa1, 'c', 0x04}));
  CHECK(nested_dup.field == "x.c");
  // The duplicate is found before its value is read (the value here is not UTF-8).
  Error first = decode_error(bytes({0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0xa1, 0xff}));
  CHECK_THAT(first.what(), Contains("duplicate"));
  // Paths through arrays and maps, and the message that quotes them.
  Error deep = decode_error(bytes({0x81, 0xa1, 'a', 0x92, 0x00, 0x81, 0xa1, 'b', 0x91, 0xa1, 0xff}));
  CHECK(deep.field == "a[1].b[0]");
  CHECK_THAT(deep.what(), Contains("(at 'a[1].b[0]')"));
}

TEST_CASE("size limits give too_large") {
  Limits small;
  small.max_message_bytes = 64;
  Error big = decode_error(valid_request() + std::string(100, '\0'), small);
  CHECK(big.code == ErrorCode::too_large);
  CHECK_THAT(big.what(), Contains("the limit is 64 bytes"));

  // Default limits: a string one byte over 1 MiB.
  Error str = decode_error(encode({{"content", std::string((1u << 20) + 1, 'x')}}));
  CHECK(str.code == ErrorCode::too_large);
  CHECK_THAT(str.what(), Contains("string"));
  CHECK(decode(encode({{"content", std::string(1u << 20, 'x')}}), Limits{})["content"].get<std::string>().size() ==
        (1u << 20));

  Limits tiny;
  tiny.max_array_items = 3;
  tiny.max_map_entries = 2;
  tiny.max_string_bytes = 4;
  CHECK(decode_error(encode({{"a", Value::array({1, 2, 3, 4})}}), tiny).code == ErrorCode::too_large);
  CHECK(decode_error(encode({{"a", 1}, {"b", 2}, {"c", 3}}), tiny).code == ErrorCode::too_large);
  CHECK(decode_error(encode({{"a", Value::binary({1, 2, 3, 4, 5})}}), tiny).code == ErrorCode::too_large);
  CHECK(decode_error(encode({{"abcde", 1}}), tiny).code == ErrorCode::too_large);  // keys count too
  CHECK_NOTHROW(decode(encode({{"a", Value::array({1, 2, 3})}, {"b", "abcd"}}), tiny));
}

TEST_CASE("nesting: the limit exactly is fine, one more and 1000 are too_large") {
  Limits limits;
  CHECK_NOTHROW(decode(nested(limits.max_depth), limits));
  Error over = decode_error(nested(limits.max_depth + 1));
  CHECK(over.code == ErrorCode::too_large);
  CHECK_THAT(over.what(), Contains("nested deeper"));
  CHECK(decode_error(nested(1000)).code == ErrorCode::too_large);
  // 100000 levels of nested maps with no data behind them.
  CHECK(decode_error(std::string(100000, static_cast<char>(0x81))).code == ErrorCode::too_large);
}

TEST_CASE("many small containers: the total of declared items is bounded before any allocation") {
  // {"a": [[nil x 4096] x 2046]}: 8 MiB that would cost ~340 MB as objects; refused by the pre-scan.
  std::string s = bytes({0x81, 0xa1, 'a', 0xdc, 0x07, 0xfe});
  for (int i = 0; i < 2046; ++i) s += bytes({0xdc, 0x10, 0x00}) + std::string(4096, static_cast<char>(0xc0));
  Error e = decode_error(s);
  CHECK(e.code == ErrorCode::too_large);
  CHECK_THAT(e.what(), Contains("in total"));
  // Declared but absent items count too: 64 arrays of 4096 with no data.
  std::string declared = bytes({0x81, 0xa1, 'a', 0xdc, 0x00, 0x40});
  for (int i = 0; i < 64; ++i) declared += bytes({0xdc, 0x10, 0x00});
  CHECK(decode_error(declared).code == ErrorCode::too_large);
  Limits few;
  few.max_total_items = 5;
  CHECK_NOTHROW(decode(encode({{"a", Value::array({1, 2})}, {"b", 1}}), few));  // 2 + 2 + 1 items
  CHECK(decode_error(encode({{"a", Value::array({1, 2, 3})}, {"b", 1}, {"c", 2}}), few).code == ErrorCode::too_large);
}

TEST_CASE("huge declared lengths with no data behind them allocate nothing") {
  // array32 / map32 / str32 / bin32 declaring 2^32-1 items or bytes, then nothing.
  Error arr = decode_error(bytes({0x81, 0xa1, 'a', 0xdd, 0xff, 0xff, 0xff, 0xff}));
  CHECK(arr.code == ErrorCode::too_large);
  CHECK_THAT(arr.what(), Contains("array"));
  Error map = decode_error(bytes({0xdf, 0xff, 0xff, 0xff, 0xff}));
  CHECK(map.code == ErrorCode::too_large);
  CHECK_THAT(map.what(), Contains("map"));
  // str32/bin32 headers are only weighed once their bytes are there; without them: truncated.
  CHECK_THAT(decode_error(bytes({0x81, 0xa1, 'a', 0xdb, 0xff, 0xff, 0xff, 0xff})).what(), Contains("truncated"));
  CHECK_THAT(decode_error(bytes({0x81, 0xa1, 'a', 0xc6, 0xff, 0xff, 0xff, 0xff})).what(), Contains("truncated"));
  // Within the limits but absent: truncated.
  Error within = decode_error(bytes({0x81, 0xa1, 'a', 0xdc, 0x0f, 0xa0}));  // array16 of 4000
  CHECK(within.code == ErrorCode::bad_request);
  CHECK_THAT(within.what(), Contains("truncated"));
  CHECK(decode_error(bytes({0x81, 0xa1, 'a', 0xda, 0x03, 0xe8})).code == ErrorCode::bad_request);  // str16 of 1000
}

TEST_CASE("seeded random bytes and mutations give a value or a typed Error, nothing else") {
  std::mt19937 rng(12345);
  std::string wire = valid_request();
  std::size_t decoded = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string data;
    if (i % 2 == 0) {
      data.resize(rng() % 96);
      for (char& c : data) c = static_cast<char>(rng());
      if (i % 4 == 0 && !data.empty()) data[0] = static_cast<char>(0x80 | (rng() % 16));  // often a fixmap
    } else {
      data = wire;
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) data[rng() % data.size()] = static_cast<char>(rng());
    }
    try {
      Value v = decode(data, Limits{});
      CHECK(v.is_object());
      ++decoded;
    } catch (const Error& e) {
      CHECK((e.code == ErrorCode::bad_request || e.code == ErrorCode::too_large));
      CHECK(std::string(e.what()).size() > 0);
      ++refused;
    }
  }
  CHECK(refused > 1000);  // the generator does produce hostile input
  CHECK(decoded > 100);   // and some that decodes
}

TEST_CASE("encode_marked finds a node's bytes; overwrite_float64 changes that double and nothing else") {
  Value v = {{"a", {{"b", 1}, {"clock", 0.5}, {"z", "text"}}}, {"files", {{"k.cu", std::string(300, 'x')}}}};
  const Value* clock = &v["a"]["clock"];
  d2k::protocol::Marked m = d2k::protocol::encode_marked(v, clock);
  CHECK(m.bytes == encode(v));
  REQUIRE(m.at != std::string::npos);
  CHECK(static_cast<unsigned char>(m.bytes[m.at]) == 0xcb);
  CHECK(d2k::protocol::overwrite_float64(m.bytes, m.at, 1234.25));
  v["a"]["clock"] = 1234.25;
  CHECK(m.bytes == encode(v));                   // the same bytes as encoding the changed value
  CHECK(decode(m.bytes, Limits{}) == v);
  Value other = 1.0;
  CHECK(d2k::protocol::encode_marked(v, &other).at == std::string::npos);  // not inside: no offset
  CHECK(d2k::protocol::encode_marked(v, &v).at == 0);
  // Not at a float64: refused, nothing written.
  const std::string before = m.bytes;
  CHECK_FALSE(d2k::protocol::overwrite_float64(m.bytes, m.at + 1, 2.0));
  CHECK_FALSE(d2k::protocol::overwrite_float64(m.bytes, std::string::npos, 2.0));
  CHECK_FALSE(d2k::protocol::overwrite_float64(m.bytes, m.bytes.size() - 4, 2.0));
  CHECK(m.bytes == before);
}
