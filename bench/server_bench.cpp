// Round-trip latency of `observe` with 1, 100 and 1000 open sessions, and compile latency cold and
// cached, against a real server on a real ZeroMQ socket. Prints a table; asserts nothing.
//   build/bin/bench_server [--endpoint tcp://127.0.0.1:5599] [--samples 2000] [--cold 4]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "env/server.hpp"
#include "protocol/client.hpp"

using namespace std::chrono;
using d2k::protocol::Value;

namespace {

struct Stats {
  double p50, p99, mean;
};

Stats summarize(std::vector<double> v) {
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

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint = "tcp://127.0.0.1:5599";
  int samples = 2000, cold = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--endpoint")) endpoint = argv[i + 1];
    else if (!std::strcmp(argv[i], "--samples")) samples = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--cold")) cold = std::atoi(argv[i + 1]);
  }
  char state[] = "/tmp/d2k-bench-XXXXXX";
  if (!::mkdtemp(state)) return 1;
  d2k::env::Config cfg;
  cfg.endpoint = endpoint;
  cfg.tasks_dir = D2K_TASKS_DIR;
  cfg.state_dir = state;
  cfg.max_sessions = 2000;
  cfg.finalize();
  d2k::env::Server server(cfg, d2k::tasks::load_tasks(cfg.tasks_dir));
  server.bind();
  std::thread loop([&] { server.run(); });
  d2k::Client c(server.endpoint());
  unsigned cores = std::thread::hardware_concurrency();
  std::printf("d2k bench_server: endpoint %s, %u cores, %d observe samples per row\n", server.endpoint().c_str(),
              cores, samples);
  std::printf("%-28s %10s %10s %10s\n", "measure", "p50", "p99", "mean");

  std::vector<std::string> sessions;
  for (int open : {1, 100, 1000}) {
    while (static_cast<int>(sessions.size()) < open)
      sessions.push_back(c.reset("vector_add", 2, sessions.size())["session"].get<std::string>());
    for (int i = 0; i < 50; ++i) c.observe(sessions[static_cast<std::size_t>(i) % sessions.size()]);  // warm-up
    std::vector<double> us;
    us.reserve(static_cast<std::size_t>(samples));
    for (int i = 0; i < samples; ++i) {
      auto t0 = steady_clock::now();
      c.observe(sessions[static_cast<std::size_t>(i) % sessions.size()]);
      us.push_back(duration<double, std::micro>(steady_clock::now() - t0).count());
    }
    Stats s = summarize(us);
    std::printf("observe, %4d sessions (us)  %10.1f %10.1f %10.1f\n", open, s.p50, s.p99, s.mean);
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
