// Round-trip latency of `observe` with 1, 100 and 1000 open sessions, beside a bare ZeroMQ round trip
// of the same sizes on the same transport, sample by sample (issue 15 item 5: observe p50 within 2x
// of it), and compile latency cold and cached, against a real server on a real ZeroMQ socket.
// Prints a table; asserts nothing.
//   build/bin/bench_server [--endpoint tcp://127.0.0.1:5599] [--samples 2000] [--cold 4] [--record 0|1]
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "bench/bench_args.hpp"

#include "env/episode.hpp"
#include "env/recorder.hpp"
#include "env/server.hpp"
#include "protocol/client.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"

using namespace std::chrono;
using d2k::protocol::Value;

namespace {

struct Stats {
  double p50, p99, mean;
};

Stats summarize(std::vector<double> v) {
  if (v.empty()) return {0, 0, 0};
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<std::size_t>(q * (v.size() - 1) + 0.5))]; };
  return {at(0.5), at(0.99), sum / static_cast<double>(v.size())};
}

const char* kKernel = R"(#include <cuda_runtime.h>
#include <cstdint>
__global__ void add(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
}
extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
  add<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(a, b, y, n);
  return (int)cudaGetLastError();
}
)";

// A ROUTER that echoes `reply_bytes` bytes to each request, and a DEALER timing round trips to it:
// ZeroMQ alone, no decoding, no server. The echo end runs on its own thread, as the server's loop.
class BareEcho {
 public:
  BareEcho(const std::string& endpoint, std::size_t request_bytes, std::size_t reply_bytes, bool server_loop = false)
      : router_(ctx_, zmq::socket_type::router), dealer_(ctx_, zmq::socket_type::dealer), request_(request_bytes, 'q') {
    router_.set(zmq::sockopt::linger, 0);
    router_.bind(endpoint);
    echo_ = std::thread([this, reply_bytes, server_loop] { serve(std::string(reply_bytes, 'r'), server_loop); });
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.connect(router_.get(zmq::sockopt::last_endpoint));
    for (int i = 0; i < 50; ++i) round_trip();  // warm-up
  }
  ~BareEcho() {
    dealer_.send(zmq::buffer(std::string("stop")));
    echo_.join();
  }
  double round_trip() {  // microseconds
    auto t0 = steady_clock::now();
    dealer_.send(zmq::buffer(request_));
    zmq::message_t msg;
    (void)dealer_.recv(msg);
    return duration<double, std::micro>(steady_clock::now() - t0).count();
  }

 private:
  void serve(const std::string& reply, bool server_loop) {
    const int fd1 = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), fd2 = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    for (;;) {
      if (server_loop) {  // the server loop's shape: poll the socket and two eventfds, then receive
        zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, fd1, ZMQ_POLLIN, 0},
                                   {nullptr, fd2, ZMQ_POLLIN, 0}};
        zmq::poll(items, 3, std::chrono::milliseconds(500));
      }
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(router_, std::back_inserter(frames), server_loop ? zmq::recv_flags::dontwait
                                                                                 : zmq::recv_flags::none))
        continue;
      if (frames.size() == 2 && frames[1].size() == 4 && frames[1].to_string() == "stop") {
        ::close(fd1);
        ::close(fd2);
        return;
      }
      std::vector<zmq::const_buffer> parts{zmq::buffer(frames[0].data(), frames[0].size()), zmq::buffer(reply)};
      zmq::send_multipart(router_, parts);
    }
  }

  zmq::context_t ctx_{1};
  zmq::socket_t router_, dealer_;
  std::string request_;
  std::thread echo_;
};

std::vector<double> bare_round_trips(const std::string& endpoint, std::size_t request_bytes, std::size_t reply_bytes,
                                     int samples, bool server_loop = false) {
  BareEcho echo(endpoint, request_bytes, reply_bytes, server_loop);
  std::vector<double> us;
  for (int i = 0; i < samples; ++i) us.push_back(echo.round_trip());
  return us;
}

// The bare echo's endpoint beside the server's: a free tcp port on the same interface, or another ipc path.
std::string bare_endpoint(const std::string& server) {
  if (server.rfind("ipc://", 0) == 0) return server + ".bare";
  const auto colon = server.rfind(':');
  if (colon == std::string::npos) return server;
  return server.substr(0, colon + 1) + "*";  // a free port on the same interface
}

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint = "tcp://127.0.0.1:5599";
  int samples = 2000, cold = 4, record = 1;
  d2k::bench::Args args("bench_server",
                        "Round trip of `observe` with 1, 100 and 1000 open sessions against a real server, beside a bare\n"
                        "ZeroMQ round trip of the same sizes (issue 15 item 5), and compile latency cold and cached.\n"
                        "Prints a table; asserts nothing. bench/README.md has the figures.");
  args.option("--endpoint", &endpoint, "the server's ZeroMQ endpoint");
  args.option("--samples", &samples, "observe samples per row");
  args.option("--cold", &cold, "cold compiles timed (0 skips the compile rows)");
  args.option("--record", &record, "1: episode logs and live events (the server's default); 0: no recorder");
  if (const int rc = args.parse(argc, argv); rc >= 0) return rc;
  if (samples < 1 || cold < 0) {
    std::fprintf(stderr, "bench_server: --samples must be at least 1 and --cold at least 0\n");
    return 2;
  }
  char state[] = "/tmp/d2k-bench-XXXXXX";
  if (!::mkdtemp(state)) return 1;
  d2k::env::Config cfg;
  cfg.endpoint = endpoint;
  cfg.tasks_dir = D2K_TASKS_DIR;
  cfg.state_dir = state;
  cfg.max_sessions = 2000;
  cfg.record = record != 0;
  if (!record) cfg.events_endpoint = "none";  // --record 0: no recorder at all (no logs, no live events)
  cfg.finalize();
  d2k::env::Server server(cfg, d2k::tasks::load_tasks(cfg.tasks_dir));
  server.bind();
  std::thread loop([&] { server.run(); });
  d2k::Client c(server.endpoint());
  unsigned cores = std::thread::hardware_concurrency();
  std::printf("d2k bench_server: endpoint %s, %u cores, %d observe samples per row, %s\n", server.endpoint().c_str(),
              cores, samples, record ? "recording (episode logs, live events)" : "no recorder (--record 0)");
  std::printf("%-28s %10s %10s %10s\n", "measure", "p50", "p99", "mean");

  std::vector<std::string> sessions{c.reset("vector_add", 2, 0)["session"].get<std::string>()};
  // The sizes on the wire, for the bare round trips.
  const std::size_t observe_request_bytes =
      d2k::protocol::encode({{"v", 1}, {"id", 1000000}, {"op", "observe"}, {"session", sessions.front()}}).size();
  const std::size_t observe_reply_bytes =
      d2k::protocol::encode(d2k::protocol::make_ok_reply(1000000, c.observe(sessions.front()))).size();
  // Each observe sample alternates with a bare round trip of the same sizes (which goes first
  // alternates too), so that both see the same load: on a shared machine the ratio of the two
  // p50s of one row is the figure to read, separate runs of each are minutes apart in load.
  double observe_p50_1 = 0, observe_p50_1000 = 0, beside_p50_1 = 0, beside_p50_1000 = 0;
  {
    BareEcho beside(bare_endpoint(server.endpoint()), observe_request_bytes, observe_reply_bytes);
    for (int open : {1, 100, 1000}) {
      while (static_cast<int>(sessions.size()) < open)
        sessions.push_back(c.reset("vector_add", 2, sessions.size())["session"].get<std::string>());
      for (int i = 0; i < 50; ++i) c.observe(sessions[static_cast<std::size_t>(i) % sessions.size()]);  // warm-up
      std::vector<double> us, bare;
      us.reserve(static_cast<std::size_t>(samples));
      bare.reserve(static_cast<std::size_t>(samples));
      for (int i = 0; i < samples; ++i) {
        if (i % 2) bare.push_back(beside.round_trip());
        auto t0 = steady_clock::now();
        c.observe(sessions[static_cast<std::size_t>(i) % sessions.size()]);
        us.push_back(duration<double, std::micro>(steady_clock::now() - t0).count());
        if (i % 2 == 0) bare.push_back(beside.round_trip());
      }
      Stats s = summarize(us), b = summarize(bare);
      std::printf("observe, %4d sessions (us)  %10.1f %10.1f %10.1f\n", open, s.p50, s.p99, s.mean);
      std::printf("  bare zmq beside it (us)    %10.1f %10.1f %10.1f   observe / bare p50: %.2fx\n", b.p50, b.p99,
                  b.mean, s.p50 / b.p50);
      if (open == 1) observe_p50_1 = s.p50, beside_p50_1 = b.p50;
      if (open == 1000) observe_p50_1000 = s.p50, beside_p50_1000 = b.p50;
    }
  }
  {
    // observe again from a raw DEALER: the server's part without the client's decode of the reply.
    zmq::context_t ctx(1);
    zmq::socket_t raw(ctx, zmq::socket_type::dealer);
    raw.set(zmq::sockopt::linger, 0);
    raw.connect(server.endpoint());
    std::vector<double> us;
    for (int i = -50; i < samples; ++i) {
      const std::string req = d2k::protocol::encode(
          {{"v", 1}, {"id", 2000000 + i + 50}, {"op", "observe"}, {"session", sessions.front()}});
      auto t0 = steady_clock::now();
      raw.send(zmq::buffer(req));
      zmq::message_t msg;
      (void)raw.recv(msg);
      if (i >= 0) us.push_back(duration<double, std::micro>(steady_clock::now() - t0).count());
    }
    Stats s = summarize(us);
    std::printf("observe, raw, no decode (us) %10.1f %10.1f %10.1f\n", s.p50, s.p99, s.mean);
  }
  {
    Stats tiny = summarize(bare_round_trips(bare_endpoint(server.endpoint()), 64, 64, samples));
    Stats same = summarize(bare_round_trips(bare_endpoint(server.endpoint()), observe_request_bytes, observe_reply_bytes,
                                            samples));
    std::printf("bare zmq, 64 B both ways (us) %9.1f %10.1f %10.1f\n", tiny.p50, tiny.p99, tiny.mean);
    Stats looped = summarize(bare_round_trips(bare_endpoint(server.endpoint()), observe_request_bytes,
                                              observe_reply_bytes, samples, true));
    std::printf("bare zmq, server-loop shape (us)%8.1f %10.1f %10.1f\n", looped.p50, looped.p99, looped.mean);
    std::printf("bare zmq, observe's sizes (us)%9.1f %10.1f %10.1f   (%zu B request, %zu B reply)\n", same.p50,
                same.p99, same.mean, observe_request_bytes, observe_reply_bytes);
    // Where the rest goes: the reply's MessagePack encode (server) and decode (client), in-process.
    const Value reply = d2k::protocol::make_ok_reply(1000000, c.observe(sessions.front()));
    const std::string bytes = d2k::protocol::encode(reply);
    std::vector<double> enc, dec;
    for (int i = 0; i < samples; ++i) {
      auto t0 = steady_clock::now();
      const std::string b = d2k::protocol::encode(reply);
      auto t1 = steady_clock::now();
      const Value v = d2k::protocol::decode(b, d2k::protocol::Limits{});
      auto t2 = steady_clock::now();
      enc.push_back(duration<double, std::micro>(t1 - t0).count());
      dec.push_back(duration<double, std::micro>(t2 - t1).count());
    }
    // And building the reply's value from the episode (what op_observe does before the encode).
    d2k::tasks::TaskSet ts = d2k::tasks::load_tasks(cfg.tasks_dir);
    d2k::env::Episode ep("bench", *ts.find("vector_add"), 2, 1, cfg.default_budget, "", d2k::env::Workspace::Limits{});
    std::vector<double> build;
    for (int i = 0; i < samples; ++i) {
      auto t0 = steady_clock::now();
      Value v = d2k::protocol::make_ok_reply(7, {{"observation", ep.observation()}, {"info", ep.info()}});
      build.push_back(duration<double, std::micro>(steady_clock::now() - t0).count());
    }
    Stats sb = summarize(build);
    std::printf("build observe reply (us)     %10.1f %10.1f %10.1f\n", sb.p50, sb.p99, sb.mean);
    // And logging it, what recording adds to each observe on the loop (--record 1): the record made
    // from the patch of its generation, one write(2), no fdatasync (log-sync threads on, as in serve).
    {
      d2k::env::RecorderConfig rc;
      rc.log_dir = std::filesystem::path(state) / "bench-episodes";
      rc.on_synced = [](const std::string&, std::uint64_t, int) {};
      d2k::env::Recorder rec(rc);
      const Value observe_request = {{"v", 1}, {"id", 2}, {"op", "observe"}, {"session", "bench"}};
      rec.begin(ep, {{"v", 1}, {"id", 1}, {"op", "reset"}, {"task", "vector_add"}, {"layer", 2}},
                d2k::protocol::make_ok_reply(
                    1, {{"session", "bench"}, {"observation", ep.observation()}, {"info", ep.info()}}),
                0.0, 0.0);
      const Value observed = d2k::protocol::make_ok_reply(2, {{"observation", ep.observation()}, {"info", ep.info()}});
      std::vector<double> logged;
      for (int i = 0; i < samples; ++i) {
        auto t0 = steady_clock::now();
        rec.record_observe(ep, observe_request, 1, 2 + static_cast<std::uint64_t>(i), 0.5, [&] { return observed; },
                           1.0, 1.0);
        logged.push_back(duration<double, std::micro>(steady_clock::now() - t0).count());
      }
      rec.end(ep, "closed");
      rec.stop_sync();
      Stats sl = summarize(logged);
      std::printf("log observe record (us)      %10.1f %10.1f %10.1f\n", sl.p50, sl.p99, sl.mean);
    }
    Stats se = summarize(enc), sd = summarize(dec);
    std::printf("encode observe reply (us)    %10.1f %10.1f %10.1f\n", se.p50, se.p99, se.mean);
    std::printf("decode observe reply (us)    %10.1f %10.1f %10.1f\n", sd.p50, sd.p99, sd.mean);
    std::printf("observe p50 / bare p50 of the same sizes: %.2fx (1 session), %.2fx (1000 sessions); "
                "interleaved: %.2fx, %.2fx\n",
                observe_p50_1 / same.p50, observe_p50_1000 / same.p50, observe_p50_1 / beside_p50_1,
                observe_p50_1000 / beside_p50_1000);
  }

  std::string s = sessions.front();
  std::vector<double> cold_ms, cached_ms;
  for (int i = 0; i < cold; ++i) {
    std::string src = std::string(kKernel) + "// cold sample " + std::to_string(i) + " " + state + "\n";
    c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", src}});
    auto t0 = steady_clock::now();
    Value r = c.step(s, {{"type", "compile"}});
    cold_ms.push_back(duration<double, std::milli>(steady_clock::now() - t0).count());
    if (!r["observation"]["last"]["ok"].get<bool>())
      std::fprintf(stderr, "cold compile failed: %s\n", r["observation"]["last"].dump().substr(0, 600).c_str());
  }
  for (int i = 0; i < 20; ++i) {
    std::string sid = c.reset("vector_add", 1, 1000 + i, {{"max_compiles", 100}})["session"].get<std::string>();
    c.step(sid, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", kKernel}});
    auto t0 = steady_clock::now();
    Value r = c.step(sid, {{"type", "compile"}});
    double ms = duration<double, std::milli>(steady_clock::now() - t0).count();
    if (i > 0) cached_ms.push_back(ms);  // the first one fills the cache
    c.close(sid);
  }
  Stats sc = summarize(cold_ms), sh = summarize(cached_ms);
  std::printf("compile, cold (ms)           %10.1f %10.1f %10.1f   (n=%zu)\n", sc.p50, sc.p99, sc.mean, cold_ms.size());
  std::printf("compile, cached (ms)         %10.2f %10.2f %10.2f   (n=%zu)\n", sh.p50, sh.p99, sh.mean, cached_ms.size());
  server.request_stop();
  loop.join();
  std::filesystem::remove_all(state);
  return 0;
}
