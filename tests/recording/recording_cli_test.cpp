// The recording commands end to end, through the real `d2k` binary: a server killed with SIGKILL,
// replay --verify (honest and tampered logs), episodes, export, watch from a second process, and the
// report page rendered in headless Chromium. Episodes are compile-only (no GPU here).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "catch.hpp"
#include "../env/server_fixture.hpp"
#include "env/catalogue.hpp"
#include "env/episode_log.hpp"
#include "protocol/client.hpp"

extern char** environ;

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string& kBin = d2k::test::d2k_binary();
using d2k::test::kGoodKernel;

const char* kBadKernel = R"(#include <cuda_runtime.h>
#include <cstdint>
extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
  return undefined_thing;
}
)";

using d2k::test::temp_dir;

using Run = d2k::test::CommandResult;

Run run(const std::string& args) { return d2k::test::run_command(kBin + " " + args); }

// A child process with its stdout (and stderr) on a pipe we read.
struct Child {
  pid_t pid = -1;
  int out = -1;
  std::string text;
  // Reads what is there within `ms`; false at EOF.
  bool read_some(int ms) {
    pollfd p{out, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return true;
    char buf[4096];
    ssize_t n = ::read(out, buf, sizeof buf);
    if (n <= 0) return false;
    text.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  int wait() {
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (out >= 0) ::close(out);
    out = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
};

Child spawn(std::vector<std::string> args, bool capture) {
  args.insert(args.begin(), kBin);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Child c;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  int fds[2] = {-1, -1};
  if (capture) {
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  }
  REQUIRE(posix_spawn(&c.pid, kBin.c_str(), &fa, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  if (capture) {
    ::close(fds[1]);
    c.out = fds[0];
  }
  return c;
}

Child spawn_server(const std::string& endpoint, const fs::path& state) {
  return spawn({"serve", "--no-gpu", "--endpoint", endpoint, "--tasks", D2K_TASKS_DIR, "--state-dir", state.string(),
                "--compile-workers", "1"},
               false);
}

void wait_hello(const std::string& endpoint) {
  d2k::Client::Options o;
  o.timeout = std::chrono::milliseconds(200);
  o.retries = 0;
  for (int i = 0; i < 150; ++i) {
    try {
      d2k::Client c(endpoint, o);
      c.hello();
      return;
    } catch (const d2k::ClientError&) {
    }
  }
  FAIL("server did not answer");
}

json write_file(const std::string& content) {
  return {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", content}};
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("a server killed with SIGKILL leaves a log that reads back to its last complete step", "[cli][slow]") {
  fs::path state = temp_dir("d2k-rec-kill");
  std::string endpoint = "ipc://" + (state / "s.sock").string();
  Child server = spawn_server(endpoint, state);
  wait_hello(endpoint);
  std::string session, log_path;
  {
    d2k::Client c(endpoint);
    json r = c.reset("vector_add", 1, 5, {{"label", "killed"}});
    session = r["session"].get<std::string>();
    c.step(session, write_file(kGoodKernel));
    json compiled = c.step(session, {{"type", "compile"}});
    CHECK(compiled["observation"]["last"]["ok"] == true);
    c.step(session, {{"type", "edit"}, {"path", "kernel.cu"}, {"old", "256, 0, s"}, {"new", "128, 0, s"}});
    c.observe(session);
  }
  ::kill(server.pid, SIGKILL);
  CHECK(server.wait() == 128 + SIGKILL);
  fs::path log = state / "episodes" / (session + ".d2klog");
  REQUIRE(fs::exists(log));
  d2k::env::EpisodeLog back = d2k::env::read_episode_log(log);
  CHECK(back.header["session"] == session);
  CHECK(back.header["seed"] == 5);
  CHECK(back.header["layer"] == 1);
  CHECK(back.header["label"] == "killed");
  CHECK(back.header["task"]["id"] == "vector_add");
  CHECK_FALSE(back.header["task"]["content_hash"].get<std::string>().empty());
  CHECK(back.header["server"]["version"].is_string());
  REQUIRE(back.exchanges.size() == 5);  // reset, write_file, compile, edit, observe
  CHECK(back.exchanges[2].request["action"]["type"] == "compile");
  CHECK(back.exchanges[2].reply["observation"]["last"]["compile"]["ok"] == true);
  CHECK(back.exchanges[4].request["op"] == "observe");
  CHECK(back.exchanges[1].t_reply >= back.exchanges[1].t_request);
  CHECK_FALSE(back.end);
  CHECK_FALSE(back.torn_tail);

  // A write torn by the kill: half of a record after the last complete one.
  std::string bytes = slurp(log);
  std::string record = d2k::env::encode_log_record({{"k", "exchange"}, {"n", 5}, {"t_request", 1.0}, {"t_reply", 2.0},
                                                    {"request", {{"op", "observe"}}}, {"reply", {{"ok", true}}}});
  {
    std::ofstream out(log, std::ios::binary | std::ios::app);
    out << record.substr(0, record.size() / 2);
  }
  back = d2k::env::read_episode_log(log);
  CHECK(back.exchanges.size() == 5);
  REQUIRE(back.torn_tail);
  CHECK(back.torn_tail->offset == bytes.size());
  CHECK(back.torn_tail->reason.find("truncated") != std::string::npos);

  Run shown = run("replay " + log.string());
  INFO(shown.out);
  CHECK(shown.status == 0);
  CHECK(shown.out.find("torn tail at byte " + std::to_string(bytes.size())) != std::string::npos);
  CHECK(shown.out.find("no end record") != std::string::npos);
  CHECK(shown.out.find("compile ok") != std::string::npos);
  CHECK(shown.out.find("-  add<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(a, b, y, n);") != std::string::npos);

  // The catalogue still says running (the server died); indexing the log settles the row.
  Run listed = run("episodes --json --state-dir " + state.string());
  INFO(listed.out);
  REQUIRE(listed.status == 0);
  json rows = json::parse(listed.out);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["outcome"] == "running");
  Run indexed = run("episodes --json --state-dir " + state.string() + " --index " + log.string());
  INFO(indexed.out);
  auto json_start = indexed.out.find('[');
  REQUIRE(json_start != std::string::npos);
  rows = json::parse(indexed.out.substr(json_start));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["outcome"] == "unsubmitted");
  CHECK(rows[0]["end_reason"] == "server_died");
  CHECK(rows[0]["steps"] == 3);
  CHECK(rows[0]["log_status"].get<std::string>().rfind("torn:", 0) == 0);
  fs::remove_all(state);
}

TEST_CASE("replay --verify passes on an honest episode and catches a tampered log; episodes and export",
          "[cli][slow]") {
  fs::path state = temp_dir("d2k-rec-verify");
  std::string endpoint = "ipc://" + (state / "s.sock").string();
  Child server = spawn_server(endpoint, state);
  wait_hello(endpoint);
  std::string session;
  {
    d2k::Client c(endpoint);
    session = c.reset("vector_add", 2, std::nullopt, {{"label", "honest"}})["session"].get<std::string>();
    c.step(session, write_file(kBadKernel));
    json bad = c.step(session, {{"type", "compile"}});
    REQUIRE(bad["observation"]["last"]["ok"] == false);
    REQUIRE_FALSE(bad["observation"]["last"]["compile"]["diagnostics"].empty());
    c.step(session, write_file(kGoodKernel));
    c.step(session, {{"type", "compile"}});
    c.step(session, {{"type", "edit"}, {"path", "kernel.cu"}, {"old", "no such text"}, {"new", "x"}});
    c.observe(session);
    c.close(session);
  }
  ::kill(server.pid, SIGTERM);
  CHECK(server.wait() == 0);
  fs::path log = state / "episodes" / (session + ".d2klog");
  d2k::env::EpisodeLog honest = d2k::env::read_episode_log(log);
  REQUIRE(honest.exchanges.size() == 8);
  REQUIRE(honest.end);
  CHECK((*honest.end)["end_reason"] == "closed");

  Run shown = run("replay " + log.string());
  INFO(shown.out);
  CHECK(shown.status == 0);
  CHECK(shown.out.find("undefined_thing") != std::string::npos);  // the diagnostic
  CHECK(shown.out.find("[invalid_action]") != std::string::npos);
  CHECK(shown.out.find("ended: closed") != std::string::npos);

  Run verified = run("replay --verify -q --tasks " + std::string(D2K_TASKS_DIR) + " " + log.string());
  INFO(verified.out);
  CHECK(verified.status == 0);
  CHECK(verified.out.find("verified: 8 exchange(s)") != std::string::npos);

  // Tampered: the diagnostic's line number of the failed compile.
  d2k::env::EpisodeLog tampered = honest;
  json& line = tampered.exchanges[2].reply["observation"]["last"]["compile"]["diagnostics"][0]["line"];
  line = line.get<int>() + 1;
  fs::path bad_log = state / "tampered.d2klog";
  d2k::env::write_episode_log(bad_log, tampered);
  Run caught = run("replay --verify -q --tasks " + std::string(D2K_TASKS_DIR) + " " + bad_log.string());
  INFO(caught.out);
  CHECK(caught.status == 1);
  CHECK(caught.out.find("DIVERGED at exchange #2 (step compile)") != std::string::npos);
  CHECK(caught.out.find("/observation/last/compile/diagnostics/0/line") != std::string::npos);

  // A log of another protocol version says exactly why it cannot be verified.
  d2k::env::EpisodeLog old = honest;
  old.header["protocol"] = 0;
  fs::path old_log = state / "old.d2klog";
  d2k::env::write_episode_log(old_log, old);
  Run refused = run("replay --verify -q " + old_log.string());
  CHECK(refused.status == 2);
  CHECK(refused.out.find("recorded with protocol v0; this build speaks v1") != std::string::npos);

  // The catalogue row, through the filters.
  Run listed = run("episodes --json --state-dir " + state.string() + " --task vector_add --layer 2 --label honest");
  INFO(listed.out);
  REQUIRE(listed.status == 0);
  json rows = json::parse(listed.out);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["session"] == session);
  CHECK(rows[0]["outcome"] == "unsubmitted");
  CHECK(rows[0]["end_reason"] == "closed");
  CHECK(rows[0]["steps"] == 5);
  CHECK(rows[0]["log_path"] == log.string());
  CHECK(rows[0]["log_status"] == "ok");
  CHECK(rows[0]["seed"] == honest.header["seed"]);
  CHECK(json::parse(run("episodes --json --state-dir " + state.string() + " --layer 1").out).empty());
  CHECK(json::parse(run("episodes --json --state-dir " + state.string() + " --outcome correct").out).empty());
  CHECK(json::parse(run("episodes --json --state-dir " + state.string() + " --since 1h").out).size() == 1);
  Run table = run("episodes --state-dir " + state.string());
  CHECK(table.out.find(session.substr(0, 16)) != std::string::npos);
  CHECK(run("episodes --state-dir " + state.string() + " --since tomorrow").status != 0);

  // Export: one record per step, with the observation the agent acted on.
  fs::path out = state / "train.jsonl";
  Run exported = run("export --jsonl " + out.string() + " --state-dir " + state.string());
  INFO(exported.out);
  REQUIRE(exported.status == 0);
  std::ifstream in(out);
  std::vector<json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(json::parse(l));
  REQUIRE(lines.size() == 5);
  CHECK(lines[0]["episode"]["session"] == session);
  CHECK(lines[0]["episode"]["layer"] == 2);
  CHECK(lines[0]["step"] == 1);
  CHECK(lines[0]["action"]["type"] == "write_file");
  CHECK(lines[0]["observation"]["files"]["kernel.cu"].get<std::string>().find("undefined_thing") == std::string::npos);
  CHECK(lines[1]["observation"]["files"]["kernel.cu"] == kBadKernel);
  CHECK(lines[1]["action"]["type"] == "compile");
  CHECK(lines[1]["reward"] == honest.exchanges[2].reply["reward"]);
  CHECK(lines[1]["result"]["ok"] == false);
  CHECK(lines[4]["result"]["error"]["code"] == "invalid_action");
  fs::remove_all(state);
}

TEST_CASE("replay --verify accepts a busy answer and a close sent during a compile", "[cli][slow]") {
  // Issue 22.8: both valid logs failed verification. The close's record comes before the compile's
  // (replies are logged in the order they go out) and says steps: 1; the compile's later says step 2.
  fs::path state = temp_dir("d2k-rec-inflight");
  std::string endpoint = "ipc://" + (state / "s.sock").string();
  Child server = spawn_server(endpoint, state);
  wait_hello(endpoint);
  std::string session;
  {
    zmq::context_t ctx;
    zmq::socket_t d(ctx, zmq::socket_type::dealer);
    d.set(zmq::sockopt::linger, 0);
    d.set(zmq::sockopt::rcvtimeo, 300000);
    d.connect(endpoint);
    d2k::protocol::Limits l;
    l.max_message_bytes = 256u << 20;
    auto send = [&](const json& r) { d.send(zmq::buffer(d2k::protocol::encode(r)), zmq::send_flags::none); };
    auto recv = [&]() {
      zmq::message_t m;
      REQUIRE(d.recv(m));
      return d2k::protocol::decode(std::string_view(static_cast<const char*>(m.data()), m.size()), l);
    };
    send({{"v", 1}, {"id", 1}, {"op", "reset"}, {"task", "vector_add"}, {"layer", 1}});
    session = recv()["session"].get<std::string>();
    auto step = [&](std::uint64_t id, const json& action) {
      return json{{"v", 1}, {"id", id}, {"op", "step"}, {"session", session}, {"action", action}};
    };
    send(step(2, write_file(kGoodKernel)));
    REQUIRE(recv()["ok"] == true);
    send(step(3, {{"type", "compile"}}));                // in flight for a while (nvcc)
    send(step(4, write_file(kGoodKernel)));              // → busy
    send({{"v", 1}, {"id", 5}, {"op", "close"}, {"session", session}});  // → closed while compiling
    std::map<std::uint64_t, json> replies;
    for (int i = 0; i < 3; ++i) {
      json r = recv();
      replies[r["id"].get<std::uint64_t>()] = r;
    }
    REQUIRE(replies[4]["error"]["code"] == "busy");
    REQUIRE(replies[5]["ok"] == true);
    REQUIRE(replies[3]["ok"] == true);
  }
  ::kill(server.pid, SIGTERM);
  CHECK(server.wait() == 0);
  fs::path log = state / "episodes" / (session + ".d2klog");
  d2k::env::EpisodeLog recorded = d2k::env::read_episode_log(log);
  REQUIRE(recorded.exchanges.size() == 5);
  REQUIRE(recorded.exchanges[3].request["op"] == "close");  // logged before the compile's reply
  Run verified = run("replay --verify -q --tasks " + std::string(D2K_TASKS_DIR) + " " + log.string());
  INFO(verified.out);
  CHECK(verified.status == 0);
  CHECK(verified.out.find("verified: 4 exchange(s)") != std::string::npos);
  CHECK(verified.out.find("1 busy answer(s) not re-sent") != std::string::npos);
  fs::remove_all(state);
}

TEST_CASE("d2k watch follows a live episode from a second process", "[cli][slow]") {
  fs::path state = temp_dir("d2k-rec-watch");
  std::string endpoint = "ipc://" + (state / "s.sock").string();
  // --events-source: without CURVE, subscribers see agent source only when the operator says so.
  Child server = spawn({"serve", "--no-gpu", "--endpoint", endpoint, "--tasks", D2K_TASKS_DIR, "--state-dir",
                        state.string(), "--compile-workers", "1", "--events-source"},
                       false);
  wait_hello(endpoint);
  d2k::Client c(endpoint);
  std::string session = c.reset("vector_add", 0, 3)["session"].get<std::string>();
  Child watcher = spawn({"watch", "--endpoint", endpoint, session}, true);
  // PUB/SUB joins asynchronously: observe (no step consumed) until the watcher shows an event.
  bool joined = false;
  for (int i = 0; i < 200 && !joined; ++i) {
    c.observe(session);
    watcher.read_some(50);
    joined = watcher.text.find("observe") != std::string::npos;
  }
  INFO(watcher.text);
  REQUIRE(joined);
  c.step(session, write_file(kGoodKernel));
  c.step(session, {{"type", "compile"}});
  c.close(session);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (watcher.read_some(1000) && std::chrono::steady_clock::now() < deadline) {
  }
  CHECK(watcher.wait() == 0);  // exits when its session ends
  INFO(watcher.text);
  CHECK(watcher.text.find("write_file kernel.cu") != std::string::npos);
  CHECK(watcher.text.find("| +__global__ void add") != std::string::npos);
  CHECK(watcher.text.find("compile ok") != std::string::npos);
  CHECK(watcher.text.find("ended: closed, 2 steps") != std::string::npos);
  ::kill(server.pid, SIGTERM);
  CHECK(server.wait() == 0);
  fs::remove_all(state);
}

namespace {

struct Image {
  std::uint32_t width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // 3 bytes per pixel
};

std::uint32_t be32(const std::string& s, std::size_t at) {
  return (std::uint32_t(static_cast<unsigned char>(s[at])) << 24) |
         (std::uint32_t(static_cast<unsigned char>(s[at + 1])) << 16) |
         (std::uint32_t(static_cast<unsigned char>(s[at + 2])) << 8) | std::uint32_t(static_cast<unsigned char>(s[at + 3]));
}

// Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes).
Image decode_png(const std::string& png) {
  REQUIRE(png.size() > 33);
  REQUIRE(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  Image img;
  int channels = 0;
  std::string idat;
  for (std::size_t at = 8; at + 12 <= png.size();) {
    std::uint32_t len = be32(png, at);
    std::string type = png.substr(at + 4, 4);
    if (type == "IHDR") {
      img.width = be32(png, at + 8);
      img.height = be32(png, at + 12);
      REQUIRE(png[at + 16] == 8);
      int color = png[at + 17];
      REQUIRE((color == 2 || color == 6));
      REQUIRE(png[at + 20] == 0);
      channels = color == 2 ? 3 : 4;
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, len);
    }
    at += 12 + len;
  }
  std::size_t stride = static_cast<std::size_t>(img.width) * channels;
  std::vector<std::uint8_t> raw((stride + 1) * img.height);
  uLongf raw_len = raw.size();
  REQUIRE(uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) == Z_OK);
  std::vector<std::uint8_t> prev(stride, 0), cur(stride);
  img.rgb.reserve(static_cast<std::size_t>(img.width) * img.height * 3);
  for (std::uint32_t y = 0; y < img.height; ++y) {
    const std::uint8_t* line = raw.data() + y * (stride + 1);
    int filter = line[0];
    for (std::size_t i = 0; i < stride; ++i) {
      int a = i >= static_cast<std::size_t>(channels) ? cur[i - channels] : 0;
      int b = prev[i];
      int c = i >= static_cast<std::size_t>(channels) ? prev[i - channels] : 0;
      int x = line[1 + i];
      int v = 0;
      switch (filter) {
        case 0: v = x; break;
        case 1: v = x + a; break;
        case 2: v = x + b; break;
        case 3: v = x + (a + b) / 2; break;
        case 4: {
          int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          v = x + (pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
          break;
        }
        default: FAIL("bad PNG filter");
      }
      cur[i] = static_cast<std::uint8_t>(v & 0xff);
    }
    for (std::uint32_t px = 0; px < img.width; ++px)
      for (int k = 0; k < 3; ++k) img.rgb.push_back(cur[px * channels + k]);
    std::swap(prev, cur);
  }
  return img;
}

std::size_t count_color(const Image& img, int r, int g, int b) {
  std::size_t n = 0;
  for (std::size_t i = 0; i + 2 < img.rgb.size(); i += 3)
    if (std::abs(img.rgb[i] - r) <= 2 && std::abs(img.rgb[i + 1] - g) <= 2 && std::abs(img.rgb[i + 2] - b) <= 2) ++n;
  return n;
}

d2k::env::EpisodeRow fixture_row(const std::string& s, const std::string& label, int layer, const std::string& outcome,
                                 std::optional<double> speedup, std::optional<double> score, const std::string& task) {
  d2k::env::EpisodeRow r;
  r.session = s;
  r.task = task;
  r.label = label;
  r.layer = layer;
  r.outcome = outcome;
  r.submit_speedup = speedup;
  r.submit_score = score;
  r.started_at = 1700000000;
  r.ended_at = 1700000100;
  return r;
}

}  // namespace

TEST_CASE("d2k report: tables, and an HTML page whose charts render in headless Chromium", "[cli][slow]") {
  fs::path dir = temp_dir("d2k-rec-report");
  {
    d2k::env::Catalogue cat(dir / "catalogue.sqlite");
    cat.upsert(fixture_row("e1", "A", 0, "correct", 2.0, 0.5, "vector_add"));
    cat.upsert(fixture_row("e2", "A", 0, "correct", 8.0, 2.0, "softmax"));
    cat.upsert(fixture_row("e3", "A", 0, "incorrect", {}, {}, "vector_add"));
    cat.upsert(fixture_row("e4", "A", 1, "correct", 4.0, 0.25, "vector_add"));
    cat.upsert(fixture_row("e5", "A", 1, "correct", 16.0, 1.0, "softmax"));
  }
  fs::path page = dir / "report.html";
  Run r = run("report --catalogue " + (dir / "catalogue.sqlite").string() + " --html " + page.string());
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("4.00x") != std::string::npos);   // A L0: sqrt(2*8)
  CHECK(r.out.find("8.00x") != std::string::npos);   // A L1: sqrt(4*16)
  CHECK(r.out.find("67%") != std::string::npos);     // A L0: 2 of 3 correct
  CHECK(r.out.find("+33 pp") != std::string::npos);  // L1 vs L0
  CHECK(r.out.find("unknown") != std::string::npos); // no design properties measured
  Run filtered = run("report --json --layer 1 --catalogue " + (dir / "catalogue.sqlite").string());
  json j = json::parse(filtered.out);
  REQUIRE(j["layers"].size() == 1);
  CHECK(j["layers"][0]["speedup_gmean"].get<double>() == Approx(8.0));

  if (std::system("command -v chromium > /dev/null 2>&1") != 0) {
    WARN("chromium is not installed (apt-get install chromium): the page was not rendered");
    return;
  }
  fs::path png = dir / "shot.png";
  std::string cmd = "chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1500,1100 "
                    "--screenshot=" + png.string() + " file://" + page.string() + " > /dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  Image img = decode_png(slurp(png));
  CHECK(img.width == 1500);
  // Correctness bars (#4e79a7), fraction-of-expert bars (#f28e2b), L0 and L1 scatter points.
  CHECK(count_color(img, 0x4e, 0x79, 0xa7) > 1000);
  CHECK(count_color(img, 0xf2, 0x8e, 0x2b) > 1000);
  CHECK(count_color(img, 0x59, 0xa1, 0x4f) > 50);
  CHECK(count_color(img, 0xed, 0xc9, 0x48) > 50);
  fs::remove_all(dir);
}
