#include "protocol/codec.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "protocol/detail/utf8.hpp"

namespace d2k::protocol {

namespace {

constexpr std::array<std::pair<ErrorCode, std::string_view>, 18> kCodeNames{{
    {ErrorCode::bad_request, "bad_request"},
    {ErrorCode::version_mismatch, "version_mismatch"},
    {ErrorCode::unknown_op, "unknown_op"},
    {ErrorCode::unknown_session, "unknown_session"},
    {ErrorCode::unknown_task, "unknown_task"},
    {ErrorCode::invalid_action, "invalid_action"},
    {ErrorCode::path_violation, "path_violation"},
    {ErrorCode::too_large, "too_large"},
    {ErrorCode::busy, "busy"},
    {ErrorCode::capacity, "capacity"},
    {ErrorCode::timeout, "timeout"},
    {ErrorCode::sandbox_violation, "sandbox_violation"},
    {ErrorCode::no_gpu, "no_gpu"},
    {ErrorCode::episode_ended, "episode_ended"},
    {ErrorCode::budget_exhausted, "budget_exhausted"},
    {ErrorCode::shutting_down, "shutting_down"},
    {ErrorCode::storage_unavailable, "storage_unavailable"},
    {ErrorCode::internal, "internal"},
}};

std::string bytes_text(std::size_t n) { return std::to_string(n) + " bytes"; }

// msgpack::object → Value. The dotted field path of the value being converted ("action.path",
// "files[2]") is kept as a stack of segments that point into the message, and spelled out only
// for an error message; the depth is bounded by the unpack limit, so the recursion is too.
class ObjectConverter {
 public:
  explicit ObjectConverter(const Limits& limits) : limits_(limits) {}

  Value convert(const msgpack::object& o) {
    switch (o.type) {
      case msgpack::type::NIL:
        return nullptr;
      case msgpack::type::BOOLEAN:
        return o.via.boolean;
      case msgpack::type::POSITIVE_INTEGER:
        return o.via.u64;
      case msgpack::type::NEGATIVE_INTEGER:
        return o.via.i64;
      case msgpack::type::FLOAT32:
      case msgpack::type::FLOAT64:
        return o.via.f64;
      case msgpack::type::STR:
        return text(o.via.str.ptr, o.via.str.size);
      case msgpack::type::BIN:
        return text(o.via.bin.ptr, o.via.bin.size);
      case msgpack::type::EXT:
        throw error("MessagePack extension types are not part of the protocol");
      case msgpack::type::ARRAY: {
        Value out = Value::array();
        auto& items = out.get_ref<Value::array_t&>();
        items.reserve(o.via.array.size);
        for (std::uint32_t i = 0; i < o.via.array.size; ++i) {
          path_.push_back({{}, i});
          items.push_back(convert(o.via.array.ptr[i]));
          path_.pop_back();
        }
        return out;
      }
      case msgpack::type::MAP: {
        Value out = Value::object();
        auto& entries = out.get_ref<Value::object_t&>();
        for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
          const msgpack::object_kv& kv = o.via.map.ptr[i];
          if (kv.key.type != msgpack::type::STR) throw error("map keys must be strings");
          const std::string_view key(kv.key.via.str.ptr, kv.key.via.str.size);
          if (detail::first_invalid_utf8(key) != std::string_view::npos) throw error("a map key is not valid UTF-8");
          // Where the key goes: after the last one when the keys come in order (as every encoder
          // of a sorted map writes them), else found; a key already there is a duplicate.
          auto at = entries.end();
          if (!entries.empty() && !(entries.rbegin()->first < key)) {
            at = entries.lower_bound(key);
            if (at != entries.end() && at->first == key) {
              path_.push_back({key, kKeySegment});
              std::string dup = path();
              throw Error(ErrorCode::bad_request, "duplicate map key '" + detail::sanitize_utf8(key, 64) + "'", dup);
            }
          }
          path_.push_back({key, kKeySegment});
          Value v = convert(kv.val);
          path_.pop_back();
          entries.emplace_hint(at, std::string(key), std::move(v));
        }
        return out;
      }
    }
    throw error("unknown MessagePack type");
  }

 private:
  static constexpr std::uint32_t kKeySegment = 0xffffffffu;
  struct Segment {
    std::string_view key;
    std::uint32_t index;  // kKeySegment for a map key
  };

  // The path as the messages spell it: keys joined by '.', array items as [i].
  std::string path() const {
    std::string out;
    for (const Segment& s : path_) {
      if (s.index != kKeySegment) {
        out += '[' + std::to_string(s.index) + ']';
      } else {
        if (!out.empty()) out += '.';
        out += s.key;
      }
    }
    return out;
  }

  // Error{bad_request} naming where: "message (at 'path')".
  Error error(const std::string& message) const {
    std::string p = path();
    return Error(ErrorCode::bad_request, p.empty() ? message : message + " (at '" + p + "')", p);
  }

  Value text(const char* data, std::uint32_t size) const {
    std::string_view s(data, size);
    if (limits_.require_utf8) {
      if (std::size_t bad = detail::first_invalid_utf8(s); bad != std::string_view::npos)
        throw error("a string is not valid UTF-8 (byte " + std::to_string(bad) + ")");
    }
    return std::string(s);
  }

  const Limits& limits_;
  std::vector<Segment> path_;
};

// A first pass over the bytes that allocates nothing: it stops at the first container that would
// push the total of declared items over max_total_items or nest deeper than max_depth, so the
// allocating unpack never sees such input (msgpack-cxx reserves each container's declared size
// up front, so a small message of many small containers could otherwise cost ~40x its size).
struct ShapeScan : msgpack::null_visitor {
  explicit ShapeScan(const Limits& l) : limits(l) {}
  // A single container over its own limit is left to unpack, which names it precisely.
  bool start_array(std::uint32_t n) { return n <= limits.max_array_items && open(n); }
  bool start_map(std::uint32_t n) { return n <= limits.max_map_entries && open(n); }
  bool end_array() { return close(); }
  bool end_map() { return close(); }

  bool open(std::uint32_t n) {
    total += n;
    if (total > limits.max_total_items) {
      too_many = true;
      return false;
    }
    if (++depth > limits.max_depth) {
      too_deep = true;
      return false;
    }
    return true;
  }
  bool close() {
    --depth;
    return true;
  }

  const Limits& limits;
  std::size_t total = 0;
  std::size_t depth = 0;
  bool too_many = false;
  bool too_deep = false;
};

// Always float64, even for integral values: msgpack-cxx 4's pack_double writes 1.0 as the integer
// 1, which would make a reward of 0.0 arrive as an integer in typed clients.
void float64_bytes(double d, char (&buf)[9]) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof bits);
  buf[0] = static_cast<char>(0xcb);
  for (int i = 0; i < 8; ++i) buf[1 + i] = static_cast<char>((bits >> (56 - 8 * i)) & 0xff);
}

void pack_float64(msgpack::sbuffer& out, double d) {
  char buf[9];
  float64_bytes(d, buf);
  out.write(buf, sizeof buf);
}

// `mark`: a node inside the value whose first byte's offset goes to `*mark_at` (see encode_marked).
void pack_value(msgpack::sbuffer& out, msgpack::packer<msgpack::sbuffer>& pk, const Value& v,
                const Value* mark = nullptr, std::size_t* mark_at = nullptr) {
  if (mark == &v) *mark_at = out.size();
  auto checked_size = [](std::size_t n) {
    if (n > std::numeric_limits<std::uint32_t>::max())
      throw Error(ErrorCode::too_large, "a value is too large for MessagePack (" + bytes_text(n) + ")");
    return static_cast<std::uint32_t>(n);
  };
  switch (v.type()) {
    case Value::value_t::null:
    case Value::value_t::discarded:
      pk.pack_nil();
      return;
    case Value::value_t::boolean:
      if (v.get<bool>()) pk.pack_true(); else pk.pack_false();
      return;
    case Value::value_t::number_unsigned:
      pk.pack_uint64(v.get<std::uint64_t>());
      return;
    case Value::value_t::number_integer: {
      auto i = v.get<std::int64_t>();
      if (i >= 0) pk.pack_uint64(static_cast<std::uint64_t>(i)); else pk.pack_int64(i);
      return;
    }
    case Value::value_t::number_float:
      pack_float64(out, v.get<double>());
      return;
    case Value::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      pk.pack_str(checked_size(s.size()));
      pk.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
      return;
    }
    case Value::value_t::binary: {
      const auto& b = v.get_binary();
      pk.pack_bin(checked_size(b.size()));
      pk.pack_bin_body(reinterpret_cast<const char*>(b.data()), static_cast<std::uint32_t>(b.size()));
      return;
    }
    case Value::value_t::array:
      pk.pack_array(checked_size(v.size()));
      for (const auto& item : v) pack_value(out, pk, item, mark, mark_at);
      return;
    case Value::value_t::object:
      pk.pack_map(checked_size(v.size()));
      for (const auto& [key, item] : v.items()) {
        pk.pack_str(checked_size(key.size()));
        pk.pack_str_body(key.data(), static_cast<std::uint32_t>(key.size()));
        pack_value(out, pk, item, mark, mark_at);
      }
      return;
  }
}

}  // namespace

std::string_view to_string(ErrorCode code) {
  for (const auto& [c, name] : kCodeNames)
    if (c == code) return name;
  return "internal";
}

std::optional<ErrorCode> error_code_from_string(std::string_view name) {
  for (const auto& [c, n] : kCodeNames)
    if (n == name) return c;
  return std::nullopt;
}

bool is_retryable(ErrorCode code) {
  return code == ErrorCode::busy || code == ErrorCode::capacity || code == ErrorCode::timeout ||
         code == ErrorCode::shutting_down || code == ErrorCode::storage_unavailable;
}

namespace {

// Messages quote what a peer sent (a path, a field name); what() is a C string, so a NUL byte in
// such a quote would cut the message there. Control bytes other than newline and tab are written
// as escapes instead (\0, \r, \xNN).
bool escaped_in_messages(char c) { return static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t'; }

std::string printable_message(std::string message) {
  if (std::none_of(message.begin(), message.end(), escaped_in_messages)) return message;
  std::string out;
  out.reserve(message.size() + 16);
  static constexpr char kHex[] = "0123456789abcdef";
  for (char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if (u == 0) {
      out += "\\0";
    } else if (u == '\r') {
      out += "\\r";
    } else if (escaped_in_messages(c)) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Error::Error(ErrorCode c, std::string message, std::string bad_field)
    : std::runtime_error(printable_message(std::move(message))), code(c), field(std::move(bad_field)) {}

Value decode(std::string_view bytes, const Limits& limits) {
  if (bytes.size() > limits.max_message_bytes)
    throw Error(ErrorCode::too_large, "the message is " + bytes_text(bytes.size()) + "; the limit is " +
                                          bytes_text(limits.max_message_bytes));
  if (bytes.empty()) throw Error(ErrorCode::bad_request, "empty message: expected one MessagePack map");

  ShapeScan scan(limits);
  std::size_t scanned = 0;
  msgpack::parse(bytes.data(), bytes.size(), scanned, scan);
  if (scan.too_deep)
    throw Error(ErrorCode::too_large,
                "maps and arrays are nested deeper than the limit of " + std::to_string(limits.max_depth));
  if (scan.too_many)
    throw Error(ErrorCode::too_large, "the message declares more than " + std::to_string(limits.max_total_items) +
                                          " array items and map entries in total");

  // Extensions are refused after decoding; a small ext limit keeps their bodies from costing memory.
  const msgpack::unpack_limit limit(limits.max_array_items, limits.max_map_entries, limits.max_string_bytes,
                                    limits.max_string_bytes, /*ext=*/16, limits.max_depth);
  msgpack::object_handle handle;
  std::size_t offset = 0;
  try {
    handle = msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limit);
  } catch (const msgpack::depth_size_overflow&) {
    throw Error(ErrorCode::too_large,
                "maps and arrays are nested deeper than the limit of " + std::to_string(limits.max_depth));
  } catch (const msgpack::array_size_overflow&) {
    throw Error(ErrorCode::too_large,
                "an array declares more items than the limit of " + std::to_string(limits.max_array_items));
  } catch (const msgpack::map_size_overflow&) {
    throw Error(ErrorCode::too_large,
                "a map declares more entries than the limit of " + std::to_string(limits.max_map_entries));
  } catch (const msgpack::str_size_overflow&) {
    throw Error(ErrorCode::too_large,
                "a string is longer than the limit of " + bytes_text(limits.max_string_bytes));
  } catch (const msgpack::bin_size_overflow&) {
    throw Error(ErrorCode::too_large,
                "a binary value is longer than the limit of " + bytes_text(limits.max_string_bytes));
  } catch (const msgpack::ext_size_overflow&) {
    throw Error(ErrorCode::bad_request, "MessagePack extension types are not part of the protocol");
  } catch (const msgpack::insufficient_bytes&) {
    throw Error(ErrorCode::bad_request,
                "truncated MessagePack: the message ends inside a value (" + bytes_text(bytes.size()) + " received)");
  } catch (const msgpack::parse_error&) {
    throw Error(ErrorCode::bad_request, "malformed MessagePack (an invalid type byte)");
  } catch (const msgpack::unpack_error& e) {
    throw Error(ErrorCode::bad_request, std::string("malformed MessagePack: ") + e.what());
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::too_large, "the message needs more memory to decode than the server allows");
  }
  if (offset != bytes.size())
    throw Error(ErrorCode::bad_request, "trailing bytes after the MessagePack value (" +
                                            bytes_text(bytes.size() - offset) + " after offset " +
                                            std::to_string(offset) + "); send one value per frame");
  const msgpack::object& root = handle.get();
  if (root.type != msgpack::type::MAP)
    throw Error(ErrorCode::bad_request, "the message must be a MessagePack map at the top level");
  return ObjectConverter(limits).convert(root);
}

namespace {

// Walks MessagePack without building values; every read is bounds-checked.
class Peeker {
 public:
  Peeker(std::string_view bytes, std::size_t max_items) : b_(bytes), items_left_(max_items) {}

  std::optional<std::uint64_t> request_id() {
    std::uint64_t entries = 0;
    if (!map_header(entries)) return std::nullopt;
    for (std::uint64_t i = 0; i < entries; ++i) {
      std::string_view key;
      const bool string_key = str(key);
      if (string_key && key == "id") return unsigned_int();
      if (!skip(string_key ? 1 : 2)) return std::nullopt;  // the value (and a key that is no string)
    }
    return std::nullopt;
  }

 private:
  bool take(std::size_t n, std::string_view& out) {
    if (b_.size() - at_ < n) return false;
    out = b_.substr(at_, n);
    at_ += n;
    return true;
  }
  bool be(std::size_t n, std::uint64_t& v) {  // big-endian unsigned of n bytes
    std::string_view raw;
    if (!take(n, raw)) return false;
    v = 0;
    for (unsigned char c : raw) v = (v << 8) | c;
    return true;
  }
  bool byte(unsigned char& c) {
    if (at_ >= b_.size()) return false;
    c = static_cast<unsigned char>(b_[at_++]);
    return true;
  }
  bool map_header(std::uint64_t& n) {
    unsigned char c = 0;
    if (!byte(c)) return false;
    if ((c & 0xf0) == 0x80) {
      n = c & 0x0f;
      return true;
    }
    if (c == 0xde) return be(2, n);
    if (c == 0xdf) return be(4, n);
    return false;
  }
  // A str key (leaves the position after it); false, with the position unchanged, for another type.
  bool str(std::string_view& s) {
    const std::size_t start = at_;
    unsigned char c = 0;
    std::uint64_t n = 0;
    if (!byte(c)) return false;
    bool ok = false;
    if ((c & 0xe0) == 0xa0) {
      n = c & 0x1f;
      ok = true;
    } else if (c == 0xd9) ok = be(1, n);
    else if (c == 0xda) ok = be(2, n);
    else if (c == 0xdb) ok = be(4, n);
    if (ok && take(static_cast<std::size_t>(n), s)) return true;
    at_ = start;
    return false;
  }
  std::optional<std::uint64_t> unsigned_int() {
    unsigned char c = 0;
    std::uint64_t v = 0;
    if (!byte(c)) return std::nullopt;
    if (c <= 0x7f) return c;
    if (c >= 0xcc && c <= 0xcf) return be(std::size_t{1} << (c - 0xcc), v) ? std::optional(v) : std::nullopt;
    if (c >= 0xd0 && c <= 0xd3) {  // a signed form of a non-negative number
      const std::size_t n = std::size_t{1} << (c - 0xd0);
      if (!be(n, v)) return std::nullopt;
      if (n < 8 && (v >> (8 * n - 1)) != 0) return std::nullopt;
      if (n == 8 && (v >> 63) != 0) return std::nullopt;
      return v;
    }
    return std::nullopt;
  }
  // Skips `count` values (and everything inside them).
  bool skip(std::uint64_t count) {
    std::string_view ignored;
    while (count > 0) {
      if (items_left_ == 0) return false;
      --items_left_;
      --count;
      unsigned char c = 0;
      std::uint64_t n = 0;
      if (!byte(c)) return false;
      if (c <= 0x7f || c >= 0xe0 || (c >= 0xc0 && c <= 0xc3)) continue;  // fixint, nil, bool
      if ((c & 0xf0) == 0x80) count += 2 * static_cast<std::uint64_t>(c & 0x0f);
      else if ((c & 0xf0) == 0x90) count += c & 0x0f;
      else if ((c & 0xe0) == 0xa0) { if (!take(c & 0x1f, ignored)) return false; }
      else if (c == 0xc4 || c == 0xd9) { if (!be(1, n) || !take(n, ignored)) return false; }
      else if (c == 0xc5 || c == 0xda) { if (!be(2, n) || !take(n, ignored)) return false; }
      else if (c == 0xc6 || c == 0xdb) { if (!be(4, n) || !take(n, ignored)) return false; }
      else if (c == 0xc7) { if (!be(1, n) || !take(n + 1, ignored)) return false; }
      else if (c == 0xc8) { if (!be(2, n) || !take(n + 1, ignored)) return false; }
      else if (c == 0xc9) { if (!be(4, n) || !take(n + 1, ignored)) return false; }
      else if (c == 0xca) { if (!take(4, ignored)) return false; }
      else if (c == 0xcb) { if (!take(8, ignored)) return false; }
      else if (c >= 0xcc && c <= 0xcf) { if (!take(std::size_t{1} << (c - 0xcc), ignored)) return false; }
      else if (c >= 0xd0 && c <= 0xd3) { if (!take(std::size_t{1} << (c - 0xd0), ignored)) return false; }
      else if (c >= 0xd4 && c <= 0xd8) { if (!take((std::size_t{1} << (c - 0xd4)) + 1, ignored)) return false; }
      else if (c == 0xdc) { if (!be(2, n)) return false; count += n; }
      else if (c == 0xdd) { if (!be(4, n)) return false; count += n; }
      else if (c == 0xde) { if (!be(2, n)) return false; count += 2 * n; }
      else if (c == 0xdf) { if (!be(4, n)) return false; count += 2 * n; }
      else return false;  // 0xc1: never used
    }
    return true;
  }

  std::string_view b_;
  std::size_t at_ = 0;
  std::size_t items_left_;
};

}  // namespace

std::optional<std::uint64_t> peek_request_id(std::string_view bytes, std::size_t max_items) {
  return Peeker(bytes, max_items).request_id();
}

std::string encode(const Value& value) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  pack_value(buffer, packer, value);
  return std::string(buffer.data(), buffer.size());
}

Marked encode_marked(const Value& value, const Value* mark) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  Marked out;
  pack_value(buffer, packer, value, mark, &out.at);
  out.bytes.assign(buffer.data(), buffer.size());
  return out;
}

bool overwrite_float64(std::string& bytes, std::size_t at, double d) {
  if (at >= bytes.size() || bytes.size() - at < 9 || static_cast<unsigned char>(bytes[at]) != 0xcb) return false;
  char buf[9];
  float64_bytes(d, buf);
  std::memcpy(bytes.data() + at, buf, sizeof buf);
  return true;
}

}  // namespace d2k::protocol
