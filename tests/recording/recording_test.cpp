// Episode logs, the catalogue, the report and the Recorder, in process (no server, no nvcc).
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <tuple>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "catch.hpp"
#include "env/catalogue.hpp"
#include "env/episode_log.hpp"
#include "env/recorder.hpp"
#include "env/report.hpp"
#include "tasks/loader/task.hpp"

using nlohmann::json;
namespace fs = std::filesystem;
using namespace d2k::env;

namespace {

fs::path temp_dir(const std::string& prefix) {
  std::string tmpl = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
  REQUIRE(::mkdtemp(tmpl.data()));
  return tmpl;
}

EpisodeLog sample_log(int exchanges) {
  EpisodeLog log;
  log.header = {{"k", "header"}, {"format", 1}, {"protocol", 1}, {"session", "abc"},
                {"task", {{"id", "vector_add"}, {"content_hash", "ff00"}}}, {"layer", 2},
                {"seed", std::uint64_t{18446744073709551615ull}}, {"label", "model-x"}, {"started_at", 1700000000.5}};
  for (int i = 0; i < exchanges; ++i) {
    LogExchange x;
    x.n = static_cast<std::uint64_t>(i);
    x.t_request = 1700000000.5 + i;
    x.t_reply = x.t_request + 0.25;
    x.request = {{"v", 1}, {"id", i + 1}, {"op", i == 0 ? "reset" : "step"},
                 {"action", {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", std::string(100 + i, 'x')}}}};
    x.reply = {{"v", 1}, {"id", i + 1}, {"ok", true}, {"reward", -0.1 * i}, {"note", "\xc3\xa9t\xc3\xa9"}};
    log.exchanges.push_back(x);
  }
  log.end = json{{"k", "end"}, {"reason", "closed"}, {"steps", exchanges - 1}};
  return log;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void spit(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

}  // namespace

TEST_CASE("episode log: write and read back every record exactly", "[log]") {
  fs::path dir = temp_dir("d2k-log");
  EpisodeLog log = sample_log(5);
  write_episode_log(dir / "a.d2klog", log);
  EpisodeLog back = read_episode_log(dir / "a.d2klog");
  CHECK(back.format_version == kLogFormatVersion);
  CHECK(back.header == log.header);
  CHECK(back.header["seed"].get<std::uint64_t>() == 18446744073709551615ull);
  REQUIRE(back.exchanges.size() == 5);
  for (std::size_t i = 0; i < 5; ++i) {
    CHECK(back.exchanges[i].n == log.exchanges[i].n);
    CHECK(back.exchanges[i].t_request == log.exchanges[i].t_request);
    CHECK(back.exchanges[i].request == log.exchanges[i].request);
    CHECK(back.exchanges[i].reply == log.exchanges[i].reply);
  }
  REQUIRE(back.end);
  CHECK((*back.end)["reason"] == "closed");
  CHECK_FALSE(back.torn_tail);
  // The bytes start with the magic and the format version.
  std::string bytes = slurp(dir / "a.d2klog");
  CHECK(bytes.substr(0, 8) == "D2KEPLOG");
  CHECK(bytes[8] == static_cast<char>(kLogFormatVersion));
  fs::remove_all(dir);
}

TEST_CASE("episode log: a file cut at any byte reads back its complete records and reports the tail",
          "[log]") {
  fs::path dir = temp_dir("d2k-log");
  EpisodeLog log = sample_log(4);
  log.end.reset();
  write_episode_log(dir / "full.d2klog", log);
  std::string bytes = slurp(dir / "full.d2klog");
  // Record boundaries: preamble, then each record.
  std::vector<std::size_t> ends;
  std::size_t at = kLogPreambleBytes;
  while (at < bytes.size()) {
    std::uint32_t len = 0;
    for (int i = 0; i < 4; ++i) len |= std::uint32_t(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
    at += kLogRecordOverhead + len;
    ends.push_back(at);
  }
  REQUIRE(ends.size() == 5);
  REQUIRE(ends.back() == bytes.size());
  for (std::size_t cut = 0; cut <= bytes.size(); ++cut) {
    spit(dir / "cut.d2klog", bytes.substr(0, cut));
    std::size_t complete = 0;
    while (complete < ends.size() && ends[complete] <= cut) ++complete;
    if (complete == 0) {
      CHECK_THROWS_AS(read_episode_log(dir / "cut.d2klog"), LogError);
      continue;
    }
    EpisodeLog back = read_episode_log(dir / "cut.d2klog");
    REQUIRE(back.exchanges.size() == complete - 1);
    for (std::size_t i = 0; i + 1 < complete; ++i) CHECK(back.exchanges[i].reply == log.exchanges[i].reply);
    bool at_boundary = cut == ends[complete - 1];
    CHECK(back.torn_tail.has_value() == !at_boundary);
    if (back.torn_tail) {
      CHECK(back.torn_tail->offset == ends[complete - 1]);
      CHECK(back.torn_tail->bytes == cut - ends[complete - 1]);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("episode log: flipped bits, wrong magic and newer formats are reported, never misread", "[log]") {
  fs::path dir = temp_dir("d2k-log");
  write_episode_log(dir / "a.d2klog", sample_log(3));
  std::string bytes = slurp(dir / "a.d2klog");
  EpisodeLog good = read_episode_log(dir / "a.d2klog");

  std::string flipped = bytes;
  flipped[bytes.size() - 3] ^= 0x20;  // inside the end record's payload
  spit(dir / "b.d2klog", flipped);
  EpisodeLog b = read_episode_log(dir / "b.d2klog");
  CHECK(b.exchanges.size() == 3);
  CHECK_FALSE(b.end);
  REQUIRE(b.torn_tail);
  CHECK(b.torn_tail->reason == "checksum mismatch");

  std::string wrong_magic = bytes;
  wrong_magic[0] = 'X';
  spit(dir / "c.d2klog", wrong_magic);
  CHECK_THROWS_WITH(read_episode_log(dir / "c.d2klog"), Catch::Contains("not a d2k episode log"));

  std::string newer = bytes;
  newer[8] = 9;
  spit(dir / "d.d2klog", newer);
  CHECK_THROWS_WITH(read_episode_log(dir / "d.d2klog"), Catch::Contains("format 9"));

  std::string huge = bytes.substr(0, kLogPreambleBytes) + std::string("\xff\xff\xff\xff", 4) + std::string(40, 'z');
  spit(dir / "e.d2klog", huge);
  CHECK_THROWS_WITH(read_episode_log(dir / "e.d2klog"), Catch::Contains("not plausible"));
  CHECK_THROWS_AS(read_episode_log(dir / "missing.d2klog"), LogError);
  fs::remove_all(dir);
}

TEST_CASE("compare_recorded: exact fields, ignored wall-clock fields, measured fields within tolerance", "[log]") {
  json a = {{"observation", {{"budget", {{"seconds_used", 1.0}, {"steps_used", 2}}},
                             {"last", {{"compile", {{"seconds", 3.0}, {"cached", false}, {"ok", true}}}}}}},
            {"reward", 0.5},
            {"info", {{"reward", {{"t_agent_us", 100.0}, {"score", 2.0}, {"correct", true}}}}}};
  json b = a;
  b["observation"]["budget"]["seconds_used"] = 99.0;
  b["observation"]["last"]["compile"]["seconds"] = 0.001;
  b["observation"]["last"]["compile"]["cached"] = true;
  a["instance"] = "0011223344556677";  // the server run (reset replies): differs on every replay
  b["instance"] = "8899aabbccddeeff";
  b["info"]["reward"]["t_agent_us"] = 110.0;
  CHECK_FALSE(compare_recorded(a, b, 0.25));
  auto d = compare_recorded(a, b, 0.05);
  REQUIRE(d);
  CHECK(d->path == "/info/reward/t_agent_us");
  b = a;
  b["observation"]["budget"]["steps_used"] = 3;
  d = compare_recorded(a, b, 0.25);
  REQUIRE(d);
  CHECK(d->path == "/observation/budget/steps_used");
  CHECK(d->recorded == 2);
  CHECK(d->replayed == 3);
  b = a;
  b["info"]["reward"]["correct"] = false;
  d = compare_recorded(a, b, 0.25);
  REQUIRE(d);
  CHECK(d->path == "/info/reward/correct");
  b = a;
  b["observation"].erase("budget");
  REQUIRE(compare_recorded(a, b, 0.25));
  CHECK(compare_recorded(a, b, 0.25)->path == "/observation/budget");
}

namespace {

EpisodeRow row(const std::string& s, const std::string& label, int layer, const std::string& outcome,
               std::optional<double> speedup = {}, std::optional<double> score = {}, std::optional<int> met = {},
               std::optional<int> total = {}, double started = 1700000000, const std::string& task = "vector_add") {
  EpisodeRow r;
  r.session = s;
  r.task = task;
  r.task_hash = "h";
  r.label = label;
  r.layer = layer;
  r.outcome = outcome;
  r.submit_speedup = speedup;
  r.submit_score = score;
  r.best_score = score;
  r.properties_met = met;
  r.properties_total = total;
  r.started_at = started;
  if (outcome != "running") r.ended_at = started + 10;
  r.seed = 42;
  r.log_path = "/x/" + s + ".d2klog";
  return r;
}

// The fixture whose numbers are worked out by hand in the report test.
std::vector<EpisodeRow> fixture() {
  return {row("e1", "A", 0, "correct", 2.0, 0.5, 1, 2, 1700000001),
          row("e2", "A", 0, "correct", 8.0, 2.0, 2, 2, 1700000002, "softmax"),
          row("e3", "A", 0, "incorrect", {}, {}, {}, {}, 1700000003),
          row("e4", "A", 0, "unsubmitted", {}, {}, {}, {}, 1700000004),
          row("e5", "A", 1, "correct", 4.0, 0.25, {}, {}, 1700000005),
          row("e6", "A", 1, "correct", 16.0, 1.0, {}, {}, 1700000006, "softmax"),
          row("e7", "A", 1, "running", {}, {}, {}, {}, 1700000007),
          row("e8", "B", 2, "correct", 3.0, 3.0, {}, {}, 1700086400)};
}

}  // namespace

TEST_CASE("catalogue: upsert, find and filtered queries", "[catalogue]") {
  fs::path dir = temp_dir("d2k-cat");
  Catalogue c(dir / "sub" / "catalogue.sqlite");
  for (const auto& r : fixture()) c.upsert(r);
  CHECK(c.query({}).size() == 8);
  EpisodeFilter f;
  f.label = "A";
  CHECK(c.query(f).size() == 7);
  f.layer = 0;
  CHECK(c.query(f).size() == 4);
  f.outcome = "correct";
  auto rows = c.query(f);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].session == "e2");  // newest first
  CHECK(rows[0].submit_speedup == 8.0);
  CHECK(rows[0].properties_met == 2);
  EpisodeFilter t;
  t.task = "softmax";
  CHECK(c.query(t).size() == 2);
  EpisodeFilter since;
  since.since = parse_since("2023-11-15", 0);  // 1700006400
  REQUIRE(c.query(since).size() == 1);
  CHECK(c.query(since)[0].session == "e8");
  EpisodeFilter lim;
  lim.limit = 3;
  CHECK(c.query(lim).size() == 3);
  // Upsert replaces; a row read back equals what went in.
  EpisodeRow e3 = *c.find("e3");
  CHECK(e3.outcome == "incorrect");
  CHECK_FALSE(e3.submit_speedup);
  CHECK(e3.seed == 42);
  e3.outcome = "unsubmitted";
  c.upsert(e3);
  CHECK(c.find("e3")->outcome == "unsubmitted");
  c.set_log_status("e3", "failed: disk full");
  CHECK(c.find("e3")->log_status == "failed: disk full");
  CHECK_FALSE(c.find("nope"));
  fs::remove_all(dir);
}

TEST_CASE("parse_since accepts unix seconds, dates and ages, and rejects the rest", "[catalogue]") {
  CHECK(parse_since("1700000000", 0) == 1700000000);
  CHECK(parse_since("1970-01-02", 0) == 86400);
  CHECK(parse_since("1970-01-01T01:00:00", 0) == 3600);
  CHECK(parse_since("2h", 10000) == 10000 - 7200);
  CHECK(parse_since("7d", 1000000) == 1000000 - 7 * 86400);
  CHECK_THROWS_AS(parse_since("yesterday", 0), std::invalid_argument);
  CHECK_THROWS_AS(parse_since("2024-13-01", 0), std::invalid_argument);
  CHECK_THROWS_AS(parse_since("", 0), std::invalid_argument);
}

TEST_CASE("report: numbers match the hand-computed fixture", "[report]") {
  Report r = build_report(fixture());
  CHECK(r.running_skipped == 1);
  REQUIRE(r.layers.size() == 3);
  const LayerStats& a0 = r.layers[0];
  CHECK((a0.label == "A" && a0.layer == 0));
  CHECK(a0.episodes == 4);
  CHECK(a0.correct == 2);
  CHECK(a0.correct_rate == Approx(0.5));
  REQUIRE(a0.speedup_gmean);
  CHECK(*a0.speedup_gmean == Approx(4.0));  // sqrt(2 * 8)
  REQUIRE(a0.expert_gmean);
  CHECK(*a0.expert_gmean == Approx(1.0));   // sqrt(0.5 * 2)
  REQUIRE(a0.properties_share);
  CHECK(*a0.properties_share == Approx(0.75));  // mean(1/2, 2/2)
  CHECK(a0.properties_n == 2);
  const LayerStats& a1 = r.layers[1];
  CHECK((a1.label == "A" && a1.layer == 1));
  CHECK(a1.episodes == 2);  // the running one is left out
  CHECK(a1.correct_rate == Approx(1.0));
  CHECK(*a1.speedup_gmean == Approx(8.0));  // sqrt(4 * 16)
  CHECK(*a1.expert_gmean == Approx(0.5));   // sqrt(0.25 * 1)
  CHECK_FALSE(a1.properties_share);         // never measured: unknown, not 0
  const LayerStats& b2 = r.layers[2];
  CHECK((b2.label == "B" && b2.layer == 2 && b2.episodes == 1));
  REQUIRE(r.deltas.size() == 1);  // B has no L0 to compare with
  CHECK(r.deltas[0].label == "A");
  CHECK(r.deltas[0].layer == 1);
  CHECK(r.deltas[0].correct_rate_delta == Approx(0.5));
  CHECK(*r.deltas[0].speedup_ratio == Approx(2.0));
  CHECK(*r.deltas[0].expert_ratio == Approx(0.5));
  CHECK(r.points.size() == 5);

  std::string text = render_report_text(r);
  CHECK(text.find("4.00x") != std::string::npos);
  CHECK(text.find("75% (2)") != std::string::npos);
  CHECK(text.find("unknown") != std::string::npos);
  CHECK(text.find("+50 pp") != std::string::npos);
  std::string html = render_report_html(r, "t<est>");
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("t&lt;est&gt;") != std::string::npos);
  CHECK(html.find("http") == html.find("http://www.w3.org/2000/svg"));  // no external resources
}

TEST_CASE("default_events_endpoint derives port+1 and <ipc>.events", "[recorder]") {
  CHECK(default_events_endpoint("tcp://127.0.0.1:5555") == "tcp://127.0.0.1:5556");
  // Events carry agent source: never derived beyond loopback (issue 22.2).
  CHECK(default_events_endpoint("tcp://*:7000").empty());
  CHECK(default_events_endpoint("tcp://10.1.2.3:7000").empty());
  CHECK(default_events_endpoint("tcp://localhost:7000") == "tcp://localhost:7001");
  CHECK(default_events_endpoint("ipc:///tmp/x.sock") == "ipc:///tmp/x.sock.events");
  CHECK(default_events_endpoint("tcp://127.0.0.1:*").empty());
  CHECK(default_events_endpoint("inproc://x").empty());
}

namespace {

struct Fixture {
  d2k::tasks::TaskSet set = d2k::tasks::load_tasks(D2K_TASKS_DIR);
  const d2k::tasks::Task& task() {
    const d2k::tasks::Task* t = set.find("vector_add");
    REQUIRE(t);
    return *t;
  }
};

json reset_request(bool record) {
  json r = {{"v", 1}, {"id", 1}, {"op", "reset"}, {"task", "vector_add"}, {"layer", 1}};
  if (!record) r["options"] = {{"record", false}};
  return r;
}

}  // namespace

TEST_CASE("Recorder: logs, catalogue row and the record=false opt-out", "[recorder]") {
  Fixture fx;
  fs::path dir = temp_dir("d2k-rec");
  RecorderConfig rc;
  rc.log_dir = dir / "episodes";
  rc.catalogue = dir / "catalogue.sqlite";
  rc.server_info = {{"version", "test"}};
  Recorder rec(rc);
  CHECK(rec.events_endpoint().empty());
  Episode ep("s1", fx.task(), 1, 7, Budget{}, "lbl", Workspace::Limits{});
  json reset_reply = {{"v", 1}, {"id", 1}, {"ok", true}, {"session", "s1"}, {"observation", ep.observation()}};
  rec.begin(ep, reset_request(true), reset_reply, 10.0, 10.5);
  ep.workspace().write("kernel.cu", "x");
  ep.record_step({{"action", "write_file"}, {"ok", true}}, 0.0);
  json step = {{"v", 1}, {"id", 2}, {"op", "step"}, {"session", "s1"},
               {"action", {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", "x"}}}};
  json step_reply = {{"v", 1}, {"id", 2}, {"ok", true}, {"observation", ep.observation()}, {"reward", 0.0},
                     {"info", ep.info()}};
  rec.record(ep, step, step_reply, 11.0, 11.1);
  fs::path path = rec.log_path("s1");
  CHECK(path == rc.log_dir / "s1.d2klog");
  // Flushed per step: readable while the episode runs.
  EpisodeLog mid = read_episode_log(path);
  CHECK(mid.exchanges.size() == 2);
  CHECK_FALSE(mid.end);
  CHECK(mid.header["task"]["content_hash"] == fx.task().content_hash);
  CHECK(mid.header["seed"] == 7);
  CHECK(mid.header["label"] == "lbl");
  Catalogue cat(rc.catalogue);
  CHECK(cat.find("s1")->outcome == "running");
  ep.end("closed");
  rec.end(ep, "closed");
  EpisodeLog done = read_episode_log(path);
  REQUIRE(done.end);
  CHECK((*done.end)["end_reason"] == "closed");
  auto row1 = cat.find("s1");
  REQUIRE(row1);
  CHECK(row1->outcome == "unsubmitted");
  CHECK(row1->steps == 1);
  CHECK(row1->label == "lbl");
  CHECK(row1->log_status == "ok");
  CHECK(row1->log_path == path.string());
  EpisodeRow rebuilt = row_from_log(done, path);
  CHECK(rebuilt.steps == 1);
  CHECK(rebuilt.outcome == "unsubmitted");
  CHECK(rebuilt.end_reason == "closed");

  Episode ep2("s2", fx.task(), 1, 8, Budget{}, "", Workspace::Limits{});
  rec.begin(ep2, reset_request(false), reset_reply, 12.0, 12.1);
  CHECK(rec.log_path("s2").empty());
  ep2.end("closed");
  rec.end(ep2, "closed");
  CHECK_FALSE(fs::exists(rc.log_dir / "s2.d2klog"));
  CHECK(cat.find("s2")->log_status == "disabled");
  fs::remove_all(dir);
}

TEST_CASE("Recorder: an unwritable log dir never throws and marks the log failed", "[recorder]") {
  Fixture fx;
  fs::path dir = temp_dir("d2k-rec");
  fs::create_directories(dir / "episodes");
  RecorderConfig rc;
  rc.log_dir = dir / "episodes";
  rc.catalogue = dir / "catalogue.sqlite";
  Recorder rec(rc);
  // A file already where the log must go: creating it fails (O_EXCL), as a full or read-only disk would.
  fs::create_directories(rc.log_dir / "s3.d2klog");
  Episode ep("s3", fx.task(), 0, 1, Budget{}, "", Workspace::Limits{});
  json reset_reply = {{"v", 1}, {"id", 1}, {"ok", true}, {"session", "s3"}};
  REQUIRE_NOTHROW(rec.begin(ep, reset_request(true), reset_reply, 1.0, 1.1));
  REQUIRE_NOTHROW(rec.record(ep, {{"op", "observe"}}, reset_reply, 2.0, 2.1));
  ep.end("closed");
  REQUIRE_NOTHROW(rec.end(ep, "closed"));
  Catalogue cat(rc.catalogue);
  auto r = cat.find("s3");
  REQUIRE(r);
  CHECK(r->log_status.rfind("failed:", 0) == 0);
  CHECK(r->outcome == "unsubmitted");
  fs::remove_all(dir);
}

TEST_CASE("Recorder: an events endpoint that cannot be bound is a start-up error", "[recorder]") {
  RecorderConfig rc;
  rc.events_endpoint = "tcp://256.0.0.1:1";
  CHECK_THROWS_AS(Recorder(rc), std::runtime_error);
  rc.events_endpoint = "ipc:///tmp/d2k-rec-test-" + std::to_string(::getpid()) + ".events";
  Recorder ok(rc);
  CHECK(ok.events_endpoint() == rc.events_endpoint);
}

TEST_CASE("Recorder: events stay on this host and never carry a session id", "[recorder]") {
  // Issue 22.2: every session's id went out as the topic and in every request and reply, to anyone.
  RecorderConfig rc;
  rc.events_endpoint = "tcp://0.0.0.0:0";
  CHECK_THROWS_AS(Recorder(rc), std::runtime_error);  // not loopback: refused at start
  rc.events_endpoint = "ipc:///tmp/d2k-rec-test-" + std::to_string(::getpid()) + "-redact.events";
  Recorder rec(rc);
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.set(zmq::sockopt::rcvtimeo, 200);
  sub.connect(rc.events_endpoint);
  Fixture fx;
  const std::string id = "0123456789abcdef0123456789abcdef";
  Episode ep(id, fx.task(), 1, 7, Budget{}, "", Workspace::Limits{});
  json reset_reply = {{"v", 1}, {"id", 1}, {"ok", true}, {"session", id}, {"observation", ep.observation()}};
  json step = {{"v", 1}, {"id", 2}, {"op", "observe"}, {"session", id}};
  std::vector<zmq::message_t> frames;
  for (int attempt = 0; attempt < 50 && frames.empty(); ++attempt) {  // until the subscription is up
    rec.begin(ep, reset_request(true), reset_reply, 1.0, 1.1);
    rec.record(ep, step, reset_reply, 2.0, 2.1);
    if (!zmq::recv_multipart(sub, std::back_inserter(frames))) frames.clear();
  }
  REQUIRE(frames.size() == 2);
  CHECK(frames[0].to_string() == "01234567");
  const std::string payload = frames[1].to_string();
  CHECK(payload.find(id) == std::string::npos);
  json event = json::from_msgpack(payload);
  CHECK(event["session"] == "01234567");
}

TEST_CASE("Recorder: episode logs over their byte budget lose the oldest finished ones", "[recorder]") {
  // Issue 22.10: disk use had no bound (every observe logged whole, ~6.5 GB/h in the soak).
  Fixture fx;
  fs::path dir = temp_dir("d2k-rec-budget");
  RecorderConfig rc;
  rc.log_dir = dir / "episodes";
  rc.sync = false;
  rc.log_budget_bytes = 1;  // a finished log is always over it
  Recorder rec(rc);
  Episode done("old0000000000000000000000000000a", fx.task(), 1, 7, Budget{}, "", Workspace::Limits{});
  json reply = {{"v", 1}, {"id", 1}, {"ok", true}, {"session", done.id()}, {"observation", done.observation()}};
  rec.begin(done, reset_request(true), reply, 1.0, 1.1);
  Episode live("live000000000000000000000000000b", fx.task(), 1, 8, Budget{}, "", Workspace::Limits{});
  rec.begin(live, reset_request(true), reply, 2.0, 2.1);
  CHECK(rec.enforce_log_budget() == 0);  // both still recorded: never deleted
  done.end("closed");
  rec.end(done, "closed");
  CHECK(fs::exists(rc.log_dir / (done.id() + ".d2klog")));
  CHECK(rec.enforce_log_budget() == 1);
  CHECK_FALSE(fs::exists(rc.log_dir / (done.id() + ".d2klog")));
  CHECK(fs::exists(rc.log_dir / (live.id() + ".d2klog")));
  fs::remove_all(dir);
}

TEST_CASE("Recorder: step replies that change no file are logged as small patches and read back exactly",
          "[recorder]") {
  // Issue 22 (d): a step reply carries the whole observation (a 100 KB workspace here); a compile
  // or evaluate changes none of its files, so its record is a patch of the previous reply.
  Fixture fx;
  fs::path dir = temp_dir("d2k-rec");
  RecorderConfig rc;
  rc.log_dir = dir / "episodes";
  rc.sync = false;
  Recorder rec(rc);
  Episode ep("s1", fx.task(), 1, 7, Budget{}, "", Workspace::Limits{});
  ep.workspace().write("big.cu", std::string(100000, 'x'));
  json reset_reply = {{"v", 1}, {"id", 1}, {"ok", true}, {"session", "s1"}, {"observation", ep.observation()}};
  rec.begin(ep, reset_request(true), reset_reply, 10.0, 10.5);
  std::vector<json> sent{reset_reply};
  const fs::path path = rec.log_path("s1");
  std::vector<std::uintmax_t> record_bytes;
  for (std::uint64_t id = 2; id < 12; ++id) {
    ep.record_step({{"action", "compile"}, {"ok", id % 2 == 0}, {"compile", {{"log", "line " + std::to_string(id)}}}}, 0.1);
    json step = {{"v", 1}, {"id", id}, {"op", "step"}, {"session", "s1"}, {"action", {{"type", "compile"}}}};
    json reply = {{"v", 1}, {"id", id}, {"ok", true}, {"observation", ep.observation()}, {"reward", 0.1},
                  {"terminated", false}, {"truncated", false}, {"info", ep.info()}};
    const auto before = fs::file_size(path);
    rec.record(ep, step, reply, 11.0, 11.1);
    record_bytes.push_back(fs::file_size(path) - before);
    sent.push_back(reply);
  }
  ep.end("closed");
  rec.end(ep, "closed");
  for (auto b : record_bytes) CHECK(b < 4096);  // whole, each would be over 100 KB
  EpisodeLog log = read_episode_log(path);
  REQUIRE(log.exchanges.size() == sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    INFO("exchange " << i);
    CHECK(log.exchanges[i].reply == sent[i]);
  }
  fs::remove_all(dir);
}

TEST_CASE("Recorder: observe replies are logged as patches of an earlier reply and read back exactly",
          "[recorder]") {
  // Issue 22.10: every observe was logged whole (~6.5 GB/h in the soak). An observe's reply now goes
  // to disk as the RFC 6902 patch from the latest whole reply; read_episode_log rebuilds it exactly.
  Fixture fx;
  fs::path dir = temp_dir("d2k-rec");
  RecorderConfig rc;
  rc.log_dir = dir / "episodes";
  rc.sync = false;
  Recorder rec(rc);
  Episode ep("s1", fx.task(), 1, 7, Budget{}, "", Workspace::Limits{});
  ep.workspace().write("big.cu", std::string(100000, 'x'));  // an observation of ~100 KB
  json reset_reply = {{"v", 1}, {"id", 1}, {"ok", true}, {"session", "s1"}, {"observation", ep.observation()}};
  rec.begin(ep, reset_request(true), reset_reply, 10.0, 10.5);
  std::vector<json> sent{reset_reply};
  std::uint64_t id = 2;
  auto observe = [&] {
    json req = {{"v", 1}, {"id", id}, {"op", "observe"}, {"session", "s1"}};
    json reply = {{"v", 1}, {"id", id++}, {"ok", true}, {"observation", ep.observation()}, {"info", ep.info()}};
    reply["observation"]["budget"]["seconds_used"] = 0.001 * static_cast<double>(id);  // differs each time
    rec.record(ep, req, reply, 11.0, 11.1);
    sent.push_back(reply);
  };
  for (int i = 0; i < 50; ++i) observe();
  const auto after_observes = fs::file_size(rec.log_path("s1"));
  // A step changes the workspace: its reply is logged as a patch of the base and becomes the base
  // of later observes (the reader rebuilds it first).
  ep.workspace().write("kernel.cu", "y");
  ep.record_step({{"action", "write_file"}, {"ok", true}}, 0.0);
  json step = {{"v", 1}, {"id", id}, {"op", "step"}, {"session", "s1"},
               {"action", {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", "y"}}}};
  json step_reply = {{"v", 1}, {"id", id++}, {"ok", true}, {"observation", ep.observation()}, {"reward", 0.0},
                     {"info", ep.info()}};
  rec.record(ep, step, step_reply, 12.0, 12.1);
  sent.push_back(step_reply);
  for (int i = 0; i < 5; ++i) observe();
  json error_reply = {{"v", 1}, {"id", id}, {"ok", false}, {"error", {{"code", "busy"}, {"message", "x"}}}};
  rec.record(ep, {{"v", 1}, {"id", id}, {"op", "observe"}, {"session", "s1"}}, error_reply, 13.0, 13.1);
  sent.push_back(error_reply);
  fs::path path = rec.log_path("s1");
  ep.end("closed");
  rec.end(ep, "closed");

  // 50 whole observes would be over 5 MB; as patches the file holds one observation and little more.
  CHECK(after_observes < 2 * json::to_msgpack(reset_reply).size());
  EpisodeLog log = read_episode_log(path);
  CHECK(log.format_version == 2);
  REQUIRE(log.exchanges.size() == sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    INFO("exchange " << i);
    CHECK(log.exchanges[i].reply == sent[i]);
    CHECK(log.exchanges[i].n == i);
  }
  // The raw records: observes after the step name the step's exchange as their base.
  std::string bytes = slurp(path);
  std::size_t at = kLogPreambleBytes;
  std::vector<json> raw;
  while (at < bytes.size()) {
    std::uint32_t len = 0;
    std::memcpy(&len, bytes.data() + at, 4);
    raw.push_back(json::from_msgpack(bytes.substr(at + kLogRecordOverhead, len)));
    at += kLogRecordOverhead + len;
  }
  REQUIRE(raw.size() == sent.size() + 2);  // header, exchanges, end
  CHECK(raw[2].value("reply_base", 99) == 0);
  CHECK_FALSE(raw[2].contains("reply"));
  CHECK(raw[52].value("reply_base", 99) == 0);  // the step: a patch of the reset's reply
  CHECK_FALSE(raw[52].contains("reply"));
  CHECK(raw[53].value("reply_base", 99) == 51);  // and the base of the observes after it
  CHECK(raw[58].value("reply_base", 99) == 51);  // an error reply to an observe: a (small) patch too

  // A patch naming an exchange that is not in the file is damage, never a misread.
  {
    d2k::env::EpisodeLogWriter w(dir / "bad2.d2klog", false);
    w.append(log.header);
    w.append({{"k", "exchange"}, {"n", 0}, {"t_request", 1.0}, {"t_reply", 1.0}, {"request", json::object()},
              {"reply_base", 7}, {"reply_patch", json::array()}});
    w.close();
  }
  EpisodeLog b2 = read_episode_log(dir / "bad2.d2klog");
  CHECK(b2.exchanges.empty());
  REQUIRE(b2.torn_tail);
  CHECK_THAT(b2.torn_tail->reason, Catch::Contains("no earlier exchange"));
  fs::remove_all(dir);
}

namespace {
// fdatasync(2) calls made by each thread: this definition takes the place of libc's for the whole
// test binary (the Recorder's code included) and forwards to the system call.
thread_local int fdatasyncs_here = 0;
}  // namespace

extern "C" int fdatasync(int fd) noexcept {
  ++fdatasyncs_here;
  return static_cast<int>(::syscall(SYS_fdatasync, fd));
}

TEST_CASE("Recorder with log-sync threads: the caller's thread never runs an fdatasync", "[recorder]") {
  // Issue 22.6: with log-sync threads the writer still ran its own fdatasync after every record,
  // on the caller's thread (the server loop), before the sync threads ran theirs: every reply of
  // every logged session waited for the disk on the loop, twice.
  Fixture fx;
  fs::path dir = temp_dir("d2k-rec-nosync");
  std::atomic<int> reports{0};
  for (const bool threads : {false, true}) {
    RecorderConfig rc;
    rc.log_dir = dir / (threads ? "threads" : "inline");
    rc.server_info = {{"version", "test"}};
    if (threads) rc.on_synced = [&](const std::string&, std::uint64_t, int) { ++reports; };
    Recorder rec(rc);
    Episode ep("s1", fx.task(), 1, 7, Budget{}, "", Workspace::Limits{});
    json reset_reply = {{"v", 1}, {"id", 1}, {"ok", true}, {"session", "s1"}, {"observation", ep.observation()}};
    fdatasyncs_here = 0;
    REQUIRE(rec.begin(ep, reset_request(true), reset_reply, 10.0, 10.5));
    json request = {{"v", 1}, {"id", 2}, {"op", "observe"}, {"session", "s1"}};
    CHECK(rec.record(ep, request, reset_reply, 11.0, 11.1));
    if (threads) {
      CHECK(fdatasyncs_here == 0);  // the log-sync threads make the records durable
      CHECK(rec.pending("s1") != 0);
    } else {
      CHECK(fdatasyncs_here >= 3);  // preamble, header and each exchange, on this thread
    }
    rec.stop_sync();
  }
  CHECK(reports.load() >= 1);
  fs::remove_all(dir);
}

TEST_CASE("Recorder with log-sync threads: pending until durable, and a failed fdatasync writes the records again",
          "[recorder]") {
  // Issue 22.6: records are written on the caller's thread and fdatasync'ed by log-sync threads,
  // whose reports the owner hands to synced(). A failed fdatasync cuts the file back to its last
  // durable record; the records after it wait and are written again, in order, by the next flush.
  Fixture fx;
  fs::path dir = temp_dir("d2k-rec-sync");
  std::mutex mutex;
  std::condition_variable came;
  std::deque<std::tuple<std::string, std::uint64_t, int>> reports;
  RecorderConfig rc;
  rc.log_dir = dir / "episodes";
  rc.server_info = {{"version", "test"}};
  rc.sync_threads = 2;
  rc.on_synced = [&](const std::string& s, std::uint64_t n, int error) {
    std::lock_guard lock(mutex);
    reports.emplace_back(s, n, error);
    came.notify_all();
  };
  Recorder rec(rc);
  // Hands the reports to synced() (as the server loop does) until the session has nothing pending.
  auto settle = [&](const std::string& s) {
    while (rec.pending(s) != 0) {
      std::unique_lock lock(mutex);
      REQUIRE(came.wait_for(lock, std::chrono::seconds(60), [&] { return !reports.empty(); }));
      auto [session, n, error] = reports.front();
      reports.pop_front();
      lock.unlock();
      rec.synced(session, n, error);
    }
  };
  Episode ep("s1", fx.task(), 1, 7, Budget{}, "", Workspace::Limits{});
  json reset_reply = {{"v", 1}, {"id", 1}, {"ok", true}, {"session", "s1"}, {"observation", ep.observation()}};
  REQUIRE(rec.begin(ep, reset_request(true), reset_reply, 10.0, 10.5));
  CHECK(rec.pending("s1") != 0);  // written, not yet known durable: a reply would wait
  settle("s1");
  const fs::path path = rec.log_path("s1");
  const std::uintmax_t durable = fs::file_size(path);

  auto step = [&](std::uint64_t id, const std::string& content) {
    ep.workspace().write("kernel.cu", content);
    ep.record_step({{"action", "write_file"}, {"ok", true}}, 0.0);
    json request = {{"v", 1}, {"id", id}, {"op", "step"}, {"session", "s1"},
                    {"action", {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", content}}}};
    json reply = {{"v", 1}, {"id", id}, {"ok", true}, {"observation", ep.observation()}, {"reward", 0.0}, {"info", ep.info()}};
    CHECK(rec.record(ep, request, reply, 11.0, 11.1));
  };
  step(2, "x");
  step(3, "y");
  const std::uint64_t last = rec.pending("s1");
  REQUIRE(last != 0);
  CHECK(read_episode_log(path).exchanges.size() == 3);
  // The fdatasync of those two records fails: they are cut off and wait; nothing is pending now.
  CHECK_FALSE(rec.synced("s1", last, EIO));
  CHECK(fs::file_size(path) == durable);
  CHECK(read_episode_log(path).exchanges.size() == 1);
  CHECK(rec.pending("s1") == 0);
  // A stale report about the records cut off changes nothing.
  CHECK(rec.synced("s1", last, EIO));
  CHECK(fs::file_size(path) == durable);
  // The next flush writes them again, in order, before anything later.
  CHECK(rec.flush(std::string("s1")));
  CHECK(rec.pending("s1") > last);
  step(4, "z");
  settle("s1");
  EpisodeLog log = read_episode_log(path);
  CHECK_FALSE(log.torn_tail);
  REQUIRE(log.exchanges.size() == 4);
  for (std::size_t i = 0; i < log.exchanges.size(); ++i) {
    CHECK(log.exchanges[i].n == i);
    CHECK(log.exchanges[i].request["id"] == i + 1);
  }
  CHECK(log.exchanges[3].reply["observation"]["files"]["kernel.cu"] == "z");
  // The session ends while its end record is not yet durable: the log closes once it is.
  ep.end("closed");
  rec.end(ep, "closed");
  CHECK(rec.active() == 0);
  settle("s1");
  REQUIRE(read_episode_log(path).end);
  rec.stop_sync();
  fs::remove_all(dir);
}
