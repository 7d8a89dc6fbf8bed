#include "env/episode_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>
#include <unordered_map>

#include <xxhash.h>

namespace d2k::env {

using nlohmann::json;

namespace {

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_le(const std::string& s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

std::system_error sys_error(const std::string& what, const std::filesystem::path& path) {
  return std::system_error(errno, std::generic_category(), what + " " + path.string());
}

}  // namespace

std::string log_preamble() {
  std::string out(kLogMagic, sizeof kLogMagic);
  put_u32(out, kLogFormatVersion);
  put_u32(out, 0);
  return out;
}

std::string encode_log_record(const json& record) {
  const std::vector<std::uint8_t> payload = json::to_msgpack(record);
  return encode_log_payload(std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()));
}

std::string encode_log_payload(std::string_view payload) {
  if (payload.size() > kLogMaxRecordBytes) throw std::length_error("episode log record over 256 MiB");
  std::string out;
  out.reserve(payload.size() + kLogRecordOverhead);
  put_u32(out, static_cast<std::uint32_t>(payload.size()));
  put_u64(out, XXH3_64bits(payload.data(), payload.size()));
  out.append(payload);
  return out;
}

LogFile::~LogFile() {
  if (fd >= 0) ::close(fd);
}

EpisodeLogWriter::EpisodeLogWriter(const std::filesystem::path& path, bool sync) : path_(path), sync_(sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw sys_error("cannot create episode log", path);
  file_ = std::make_shared<LogFile>(fd);
  try {
    write_all(log_preamble());
  } catch (...) {  // no writer: leave no file behind
    file_.reset();
    std::error_code ec;
    std::filesystem::remove(path, ec);
    throw;
  }
}

EpisodeLogWriter::~EpisodeLogWriter() = default;

void EpisodeLogWriter::write_all(const std::string& bytes) {
  if (!file_) throw std::system_error(EBADF, std::generic_category(), "episode log closed " + path_.string());
  if (broken_) throw std::system_error(EIO, std::generic_category(), "episode log ends in a torn record " + path_.string());
  const int fd = file_->fd;
  // On failure, cut the file back to its last complete record, so a later append of the same record
  // (once the disk has room) leaves a well-formed log.
  auto fail = [&](const char* what) {
    const int err = errno;
    while (::ftruncate(fd, static_cast<off_t>(size_)) != 0) {
      if (errno == EINTR) continue;
      broken_ = true;
      break;
    }
    errno = err;
    throw sys_error(what, path_);
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write episode log");
    }
    done += static_cast<std::size_t>(n);
  }
  if (sync_ && ::fdatasync(fd) != 0) fail("cannot sync episode log");
  size_ += bytes.size();
}

void EpisodeLogWriter::append(const json& record) { write_all(encode_log_record(record)); }
void EpisodeLogWriter::append_encoded(const std::string& record) { write_all(record); }

void EpisodeLogWriter::truncate(std::uint64_t bytes) {
  if (!file_) throw std::system_error(EBADF, std::generic_category(), "episode log closed " + path_.string());
  while (::ftruncate(file_->fd, static_cast<off_t>(bytes)) != 0) {
    if (errno == EINTR) continue;
    broken_ = true;
    throw sys_error("cannot cut back episode log", path_);
  }
  size_ = bytes;
  broken_ = false;
}

void EpisodeLogWriter::close() {
  if (!file_) return;
  std::shared_ptr<LogFile> file = std::move(file_);
  file_.reset();
  if (file.use_count() > 1) return;  // a log-sync thread still holds it: closed when it lets go
  const int fd = file->fd;
  file->fd = -1;
  if (::close(fd) != 0) throw sys_error("cannot close episode log", path_);
}

EpisodeLog read_episode_log(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw LogError("cannot open " + path.string() + ": " + std::strerror(errno));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < kLogPreambleBytes || std::memcmp(data.data(), kLogMagic, sizeof kLogMagic) != 0)
    throw LogError(path.string() + " is not a d2k episode log (no D2KEPLOG magic)");
  EpisodeLog log;
  log.format_version = static_cast<std::uint32_t>(get_le(data, 8, 4));
  if (log.format_version < 1 || log.format_version > kLogFormatVersion)
    throw LogError(path.string() + " is episode-log format " + std::to_string(log.format_version) +
                   "; this build reads formats 1 to " + std::to_string(kLogFormatVersion));
  std::unordered_map<std::uint64_t, std::size_t> by_n;  // exchange number → index in log.exchanges

  std::size_t at = kLogPreambleBytes;
  auto torn = [&](std::string reason) { log.torn_tail = TornTail{at, data.size() - at, std::move(reason)}; };
  while (at < data.size()) {
    if (data.size() - at < kLogRecordOverhead) {
      torn("truncated record header");
      break;
    }
    std::uint64_t length = get_le(data, at, 4);
    std::uint64_t checksum = get_le(data, at + 4, 8);
    if (length > kLogMaxRecordBytes) {
      torn("record length " + std::to_string(length) + " is not plausible");
      break;
    }
    if (data.size() - at - kLogRecordOverhead < length) {
      torn("truncated payload (" + std::to_string(data.size() - at - kLogRecordOverhead) + " of " +
           std::to_string(length) + " bytes)");
      break;
    }
    const char* payload = data.data() + at + kLogRecordOverhead;
    if (XXH3_64bits(payload, length) != checksum) {
      torn("checksum mismatch");
      break;
    }
    json record;
    try {
      record = json::from_msgpack(payload, payload + length);
    } catch (const json::exception& e) {
      torn(std::string("undecodable payload: ") + e.what());
      break;
    }
    const json* kind = record.is_object() && record.contains("k") ? &record["k"] : nullptr;
    if (!kind || !kind->is_string()) {
      torn("record without a kind");
      break;
    }
    const std::string k = kind->get<std::string>();
    bool first = log.header.is_null();
    if (first && k != "header") {
      torn("first record is '" + k + "', not the header");
      break;
    }
    if (k == "header") {
      if (!first) {
        torn("second header record");
        break;
      }
      log.header = std::move(record);
    } else if (k == "exchange") {
      LogExchange x;
      try {
        x.n = record.at("n").get<std::uint64_t>();
        x.t_request = record.at("t_request").get<double>();
        x.t_reply = record.at("t_reply").get<double>();
        x.request = record.at("request");
        if (auto base = record.find("reply_base"); base != record.end()) {
          // A compact record (format 2): the reply is the patch applied to an earlier exchange's reply.
          auto earlier = by_n.find(base->get<std::uint64_t>());
          if (earlier == by_n.end())
            throw std::runtime_error("its reply_base " + base->dump() + " is no earlier exchange of the log");
          x.reply = log.exchanges[earlier->second].reply.patch(record.at("reply_patch"));
        } else {
          x.reply = record.at("reply");
        }
      } catch (const std::exception& e) {
        torn(std::string("malformed exchange record: ") + e.what());
        break;
      }
      by_n[x.n] = log.exchanges.size();
      log.exchanges.push_back(std::move(x));
    } else if (k == "end") {
      log.end = std::move(record);
    } else {
      torn("unknown record kind '" + k + "'");
      break;
    }
    at += kLogRecordOverhead + length;
  }
  if (log.header.is_null()) {
    std::string why = log.torn_tail ? log.torn_tail->reason : std::string("the file ends after the preamble");
    throw LogError(path.string() + " has no readable header record (" + why + ")");
  }
  return log;
}

void write_episode_log(const std::filesystem::path& path, const EpisodeLog& log) {
  EpisodeLogWriter w(path, false);
  w.append(log.header);
  for (const LogExchange& x : log.exchanges)  // whole replies (readable as format 2)
    w.append({{"k", "exchange"}, {"n", x.n}, {"t_request", x.t_request}, {"t_reply", x.t_reply},
              {"request", x.request}, {"reply", x.reply}});
  if (log.end) w.append(*log.end);
  w.close();
}

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  std::size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

enum class FieldClass { exact, measured, ignored };

FieldClass classify(const std::string& key, FieldClass parent) {
  if (parent != FieldClass::exact) return parent;
  if (key == "seconds" || key == "seconds_used" || key == "cached" || ends_with(key, "_s") || key == "samples" ||
      key == "cv" || key == "rse" || key == "instance")
    return FieldClass::ignored;
  if (ends_with(key, "_us") || ends_with(key, "_ms") || key.rfind("median", 0) == 0 || key == "score" ||
      key == "speedup_vs_baseline" || key == "fraction_of_expert" || key == "reward" || key == "total_reward" ||
      key == "terms")
    return FieldClass::measured;
  return FieldClass::exact;
}

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::optional<Divergence> compare_at(const json& a, const json& b, double tol, const std::string& path,
                                     FieldClass cls) {
  if (cls == FieldClass::ignored) return std::nullopt;
  if (a.is_number() && b.is_number()) {
    if (cls == FieldClass::measured) {
      double x = a.get<double>(), y = b.get<double>();
      double scale = std::max({1.0, std::fabs(x), std::fabs(y)});
      if (std::fabs(x - y) <= tol * scale) return std::nullopt;
      return Divergence{path, a, b};
    }
    if (a == b) return std::nullopt;
    return Divergence{path, a, b};
  }
  if (a.type() != b.type()) return Divergence{path, a, b};
  if (a.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      std::string p = path + "/" + escape_pointer(it.key());
      auto other = b.find(it.key());
      if (other == b.end()) return Divergence{p, it.value(), "(missing)"};
      if (auto d = compare_at(it.value(), *other, tol, p, classify(it.key(), cls))) return d;
    }
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!a.contains(it.key())) return Divergence{path + "/" + escape_pointer(it.key()), "(missing)", it.value()};
    return std::nullopt;
  }
  if (a.is_array()) {
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
      if (auto d = compare_at(a[i], b[i], tol, path + "/" + std::to_string(i), cls)) return d;
    if (a.size() != b.size())
      return Divergence{path, "array of " + std::to_string(a.size()), "array of " + std::to_string(b.size())};
    return std::nullopt;
  }
  if (a == b) return std::nullopt;
  return Divergence{path, a, b};
}

}  // namespace

std::optional<Divergence> compare_recorded(const json& recorded, const json& replayed, double tolerance) {
  return compare_at(recorded, replayed, tolerance, "", FieldClass::exact);
}

}  // namespace d2k::env
