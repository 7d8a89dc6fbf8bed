#include "env/catalogue.hpp"

#include <sqlite3.h>

#include <cctype>
#include <ctime>
#include <stdexcept>

namespace d2k::env {

using nlohmann::json;

namespace {

const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS episodes (
  session TEXT PRIMARY KEY,
  task TEXT NOT NULL,
  task_hash TEXT NOT NULL,
  layer INTEGER NOT NULL,
  label TEXT NOT NULL,
  seed TEXT NOT NULL,
  started_at REAL NOT NULL,
  ended_at REAL,
  wall_s REAL NOT NULL,
  steps INTEGER NOT NULL,
  outcome TEXT NOT NULL,
  end_reason TEXT NOT NULL,
  total_reward REAL NOT NULL,
  best_score REAL,
  submit_score REAL,
  submit_speedup REAL,
  properties_met INTEGER,
  properties_total INTEGER,
  log_path TEXT NOT NULL,
  log_status TEXT NOT NULL,
  server_version TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS episodes_task ON episodes(task, layer);
CREATE INDEX IF NOT EXISTS episodes_started ON episodes(started_at);
)";

const char* kColumns =
    "session, task, task_hash, layer, label, seed, started_at, ended_at, wall_s, steps, outcome, end_reason, "
    "total_reward, best_score, submit_score, submit_speedup, properties_met, properties_total, log_path, "
    "log_status, server_version";

class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string("catalogue: ") + sqlite3_errmsg(db));
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  sqlite3_stmt* get() const { return stmt_; }
  void text(int i, const std::string& v) { sqlite3_bind_text(stmt_, i, v.c_str(), -1, SQLITE_TRANSIENT); }
  void real(int i, std::optional<double> v) { v ? sqlite3_bind_double(stmt_, i, *v) : sqlite3_bind_null(stmt_, i); }
  void integer(int i, std::optional<std::int64_t> v) {
    v ? sqlite3_bind_int64(stmt_, i, *v) : sqlite3_bind_null(stmt_, i);
  }
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw std::runtime_error(std::string("catalogue: ") + sqlite3_errmsg(db_));
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

std::string col_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}
std::optional<double> col_real(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_double(s, i);
}
std::optional<int> col_int(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int(s, i);
}

EpisodeRow read_row(sqlite3_stmt* s) {
  EpisodeRow r;
  r.session = col_text(s, 0);
  r.task = col_text(s, 1);
  r.task_hash = col_text(s, 2);
  r.layer = sqlite3_column_int(s, 3);
  r.label = col_text(s, 4);
  r.seed = std::stoull(col_text(s, 5).empty() ? "0" : col_text(s, 5));
  r.started_at = sqlite3_column_double(s, 6);
  r.ended_at = col_real(s, 7);
  r.wall_s = sqlite3_column_double(s, 8);
  r.steps = static_cast<std::uint32_t>(sqlite3_column_int64(s, 9));
  r.outcome = col_text(s, 10);
  r.end_reason = col_text(s, 11);
  r.total_reward = sqlite3_column_double(s, 12);
  r.best_score = col_real(s, 13);
  r.submit_score = col_real(s, 14);
  r.submit_speedup = col_real(s, 15);
  r.properties_met = col_int(s, 16);
  r.properties_total = col_int(s, 17);
  r.log_path = col_text(s, 18);
  r.log_status = col_text(s, 19);
  r.server_version = col_text(s, 20);
  return r;
}

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
json opt(const std::optional<int>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

json EpisodeRow::to_json() const {
  return {{"session", session},
          {"task", task},
          {"task_hash", task_hash},
          {"layer", layer},
          {"label", label},
          {"seed", seed},
          {"started_at", started_at},
          {"ended_at", opt(ended_at)},
          {"wall_s", wall_s},
          {"steps", steps},
          {"outcome", outcome},
          {"end_reason", end_reason},
          {"total_reward", total_reward},
          {"best_score", opt(best_score)},
          {"submit_score", opt(submit_score)},
          {"submit_speedup", opt(submit_speedup)},
          {"properties_met", opt(properties_met)},
          {"properties_total", opt(properties_total)},
          {"log_path", log_path},
          {"log_status", log_status},
          {"server_version", server_version}};
}

double parse_since(const std::string& text, double now) {
  auto bad = [&]() {
    return std::invalid_argument("--since '" + text +
                                 "': expected unix seconds, YYYY-MM-DD, YYYY-MM-DDTHH:MM:SS (UTC) or an age "
                                 "like 30m, 12h, 7d");
  };
  if (text.empty()) throw bad();
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == text.size()) {
    if (digits > 12) throw bad();
    return std::stod(text);
  }
  if (digits > 0 && digits <= 6 && digits + 1 == text.size()) {
    double n = std::stod(text.substr(0, digits));
    switch (text.back()) {
      case 's': return now - n;
      case 'm': return now - n * 60;
      case 'h': return now - n * 3600;
      case 'd': return now - n * 86400;
      default: throw bad();
    }
  }
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  char tail = 0;
  int got = std::sscanf(text.c_str(), "%4d-%2d-%2d%c%2d:%2d:%2d", &y, &mo, &d, &tail, &h, &mi, &s);
  if (!(got == 3 || (got == 7 && (tail == 'T' || tail == ' ')))) throw bad();
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) throw bad();
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<double>(timegm(&tm));
}

Catalogue::Catalogue(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw std::runtime_error("cannot open catalogue " + path.string() + ": " + why);
  }
  sqlite3_busy_timeout(db_, 5000);
  char* err = nullptr;
  std::string sql = std::string("PRAGMA journal_mode=WAL;") + kSchema;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : "unknown error";
    sqlite3_free(err);
    sqlite3_close(db_);
    db_ = nullptr;
    throw std::runtime_error("cannot initialise catalogue " + path.string() + ": " + why);
  }
}

Catalogue::~Catalogue() { sqlite3_close(db_); }

void Catalogue::upsert(const EpisodeRow& r) {
  Statement s(db_, std::string("INSERT OR REPLACE INTO episodes (") + kColumns +
                       ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  s.text(1, r.session);
  s.text(2, r.task);
  s.text(3, r.task_hash);
  s.integer(4, r.layer);
  s.text(5, r.label);
  s.text(6, std::to_string(r.seed));
  s.real(7, r.started_at);
  s.real(8, r.ended_at);
  s.real(9, r.wall_s);
  s.integer(10, r.steps);
  s.text(11, r.outcome);
  s.text(12, r.end_reason);
  s.real(13, r.total_reward);
  s.real(14, r.best_score);
  s.real(15, r.submit_score);
  s.real(16, r.submit_speedup);
  s.integer(17, r.properties_met ? std::optional<std::int64_t>(*r.properties_met) : std::nullopt);
  s.integer(18, r.properties_total ? std::optional<std::int64_t>(*r.properties_total) : std::nullopt);
  s.text(19, r.log_path);
  s.text(20, r.log_status);
  s.text(21, r.server_version);
  s.step();
}

void Catalogue::set_log_status(const std::string& session, const std::string& status) {
  Statement s(db_, "UPDATE episodes SET log_status = ? WHERE session = ?");
  s.text(1, status);
  s.text(2, session);
  s.step();
}

std::vector<EpisodeRow> Catalogue::query(const EpisodeFilter& f) const {
  std::string sql = std::string("SELECT ") + kColumns + " FROM episodes WHERE 1=1";
  if (f.task) sql += " AND task = ?";
  if (f.label) sql += " AND label = ?";
  if (f.outcome) sql += " AND outcome = ?";
  if (f.layer) sql += " AND layer = ?";
  if (f.since) sql += " AND started_at >= ?";
  sql += " ORDER BY started_at DESC, session";
  if (f.limit) sql += " LIMIT " + std::to_string(*f.limit);
  Statement s(db_, sql);
  int i = 1;
  if (f.task) s.text(i++, *f.task);
  if (f.label) s.text(i++, *f.label);
  if (f.outcome) s.text(i++, *f.outcome);
  if (f.layer) s.integer(i++, *f.layer);
  if (f.since) s.real(i++, *f.since);
  std::vector<EpisodeRow> out;
  while (s.step()) out.push_back(read_row(s.get()));
  return out;
}

std::optional<EpisodeRow> Catalogue::find(const std::string& session) const {
  Statement s(db_, std::string("SELECT ") + kColumns + " FROM episodes WHERE session = ?");
  s.text(1, session);
  if (s.step()) return read_row(s.get());
  return std::nullopt;
}

}  // namespace d2k::env
