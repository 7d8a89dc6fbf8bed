// The episode log file: one append-only file per episode (docs/episode-log.md).
//
//   file   = magic "D2KEPLOG" (8 bytes) · u32le format version · u32le reserved (0) · record*
//   record = u32le payload length · u64le XXH3-64 of the payload · payload (one MessagePack map)
//
// Records: {k:"header", ...} first, then {k:"exchange", n, t_request, t_reply, request, reply}
// for every request/reply of the session (reset first; an observe's may carry {reply_base: n,
// reply_patch: RFC 6902 patch} instead of the reply: read_episode_log rebuilds the reply), then {k:"end", reason, ...} when the session
// is gone. Each record goes out with one write(2), so a process killed at any moment leaves a file
// whose complete records read back; what follows the last complete record is reported as a torn tail.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace d2k::env {

inline constexpr char kLogMagic[8] = {'D', '2', 'K', 'E', 'P', 'L', 'O', 'G'};
// 2: observe exchanges may be compact ({reply_base, reply_patch} instead of {reply}); 1 is still read.
inline constexpr std::uint32_t kLogFormatVersion = 2;
inline constexpr std::size_t kLogPreambleBytes = 16;
inline constexpr std::size_t kLogRecordOverhead = 12;            // length + checksum
inline constexpr std::uint32_t kLogMaxRecordBytes = 256u << 20;  // larger lengths mean corruption

// A file that is not an episode log, or one of a format this build cannot read.
struct LogError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Encodes one record (length, checksum, payload) ready to append.
std::string encode_log_record(const nlohmann::json& record);
// The same from a record's MessagePack payload already encoded (one map).
std::string encode_log_payload(std::string_view payload);
// The 16-byte preamble of a log of kLogFormatVersion.
std::string log_preamble();

// An open log file's descriptor, closed when the last holder lets go: the writer shares it with
// the log-sync threads (env/log_sync.hpp), so a sync never runs on a descriptor closed and reused.
struct LogFile {
  explicit LogFile(int f) : fd(f) {}
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;
  int fd = -1;
};

// Appends records to a log file. Every append is one write(2) (plus fdatasync when `sync`; without
// it, whoever holds file() makes the records durable: the Recorder's log-sync threads).
// Throws std::system_error on I/O errors (ENOSPC, EDQUOT, EIO, ...). A failed append leaves the
// file as it was before it (what was written of it is cut off again), so the same record can be
// appended again once the disk has room; broken() is true when even that cut failed (the file now
// ends in a torn record: the Recorder gives the log up).
class EpisodeLogWriter {
 public:
  // Creates `path` (fails if it exists) and writes the preamble.
  EpisodeLogWriter(const std::filesystem::path& path, bool sync);
  ~EpisodeLogWriter();
  EpisodeLogWriter(const EpisodeLogWriter&) = delete;
  EpisodeLogWriter& operator=(const EpisodeLogWriter&) = delete;

  void append(const nlohmann::json& record);
  void append_encoded(const std::string& record);  // what encode_log_record/encode_log_payload give
  void close();
  // Cuts the file back to `bytes` (a record boundary at or after the preamble): the records after
  // it are gone, to be appended again. Throws std::system_error (and broken() is then true) when
  // the cut fails.
  void truncate(std::uint64_t bytes);
  std::shared_ptr<LogFile> file() const { return file_; }
  const std::filesystem::path& path() const { return path_; }
  bool broken() const { return broken_; }
  std::uint64_t bytes() const { return size_; }  // the file's length: preamble + complete records

 private:
  void write_all(const std::string& bytes);
  std::filesystem::path path_;
  std::shared_ptr<LogFile> file_;  // null once closed
  bool sync_;
  bool broken_ = false;
  std::uint64_t size_ = 0;
};

struct TornTail {
  std::uint64_t offset = 0;  // where the first unreadable record starts
  std::uint64_t bytes = 0;   // bytes from there to the end of the file
  std::string reason;        // "truncated record header", "truncated payload", "checksum mismatch", ...
};

struct LogExchange {
  std::uint64_t n = 0;  // 0 = the reset
  double t_request = 0, t_reply = 0;
  nlohmann::json request, reply;
};

struct EpisodeLog {
  std::uint32_t format_version = 0;
  nlohmann::json header;               // the header record (k:"header")
  std::vector<LogExchange> exchanges;  // in the order the replies were sent
  std::optional<nlohmann::json> end;   // the end record, when the session ended cleanly
  std::optional<TornTail> torn_tail;   // set when the file ends in something unreadable
};

// Reads every complete record. Throws LogError when the file cannot be opened, is not an episode log
// (magic), has a format version this build does not read (the message says which), or has no
// readable header record. Damage after the header never throws: reading stops there and torn_tail
// says where and why.
EpisodeLog read_episode_log(const std::filesystem::path& path);

// Writes `log` as a fresh file (header, exchanges, end). For tools and tests that derive logs.
void write_episode_log(const std::filesystem::path& path, const EpisodeLog& log);

// Replay comparison (d2k replay --verify). Fields compared by their key name:
//  - wall-clock, cache state and the server run, never compared: "seconds", "seconds_used", "cached", "instance", keys ending in
//    "_s", "samples", "cv", "rse" (compile time and timing-sample counts depend on machine load);
//  - measured GPU times and what derives from them, compared within `tolerance` (|a-b| <= tolerance *
//    max(1, |a|, |b|)): keys ending in "_us" or "_ms", starting with "median", "score",
//    "speedup_vs_baseline", "fraction_of_expert", "reward", "total_reward", everything under "terms";
//  - everything else exactly (types, strings, integers, array lengths, key sets).
struct Divergence {
  std::string path;  // JSON pointer, e.g. /observation/last/compile/diagnostics/0/message
  nlohmann::json recorded, replayed;
};
std::optional<Divergence> compare_recorded(const nlohmann::json& recorded, const nlohmann::json& replayed,
                                           double tolerance);

}  // namespace d2k::env
