// GPU evaluation figures (prints them; asserts nothing). On a GPU machine:
//   (a) timing stability: the vector_add L3 expert evaluated N times, each in a fresh runner:
//       median of the medians and the CV of the medians (pow2_64m);
//   (b) the latency of one evaluate split into its phases (median over those runs);
//   (c) evaluations per hour with S concurrent sessions on one GPU through a real server, and that
//       GPU's busy fraction from `stats`.
//   CUDA_VISIBLE_DEVICES=0 build/bin/bench_gpu [--runs 20] [--sessions 32] [--seconds 45]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "env/gpu_setup.hpp"
#include "env/server.hpp"
#include "protocol/client.hpp"
#include "sandbox/compiler.hpp"
#include "sandbox/eval/evaluator.hpp"

using namespace std::chrono;
namespace fs = std::filesystem;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 20, sessions = 32;
  double seconds = 45;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--sessions")) sessions = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
  }
  char state[] = "/tmp/d2k-gpubench-XXXXXX";
  if (!::mkdtemp(state)) return 1;
  d2k::env::Config cfg;
  cfg.endpoint = std::string("ipc://") + state + "/s.sock";
  cfg.tasks_dir = D2K_TASKS_DIR;
  cfg.state_dir = state;
  cfg.record = false;
  cfg.events_endpoint = "none";
  cfg.max_budget.max_evaluations = 100000;
  cfg.max_budget.max_steps = 100000;
  cfg.finalize();
  d2k::tasks::TaskSet tasks = d2k::tasks::load_tasks(cfg.tasks_dir);
  const d2k::tasks::Task* task = tasks.find("vector_add");
  std::string note;
  auto backend = d2k::env::make_gpu_backend(cfg, tasks, note);
  if (!backend || !task) {
    std::printf("bench_gpu: no usable GPU (%s); nothing measured\n", note.c_str());
    return 0;
  }
  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::printf("bench_gpu %s on %s\n", date, note.c_str());

  // (a) + (b): the evaluator directly, fresh runners each time.
  d2k::runner::EvalConfig ec;
  ec.state_dir = fs::path(state) / "eval";
  ec.compiler.cache_dir = fs::path(state) / "cache";
  ec.compiler.scratch_dir = fs::path(state) / "scratch";
  fs::create_directories(ec.state_dir);
  d2k::runner::Evaluator evaluator(ec);
  fs::path so = evaluator.build_trusted(*task, task->expert_path(3));
  std::vector<double> medians, ready, reference, candidate, compare, total;
  for (int i = 0; i < runs; ++i) {
    d2k::runner::EvalRequest req;
    req.task = task;
    req.so_path = so;
    req.seeds = 1;
    d2k::runner::EvalResult r = evaluator.evaluate(req);
    if (!r.ok()) {
      std::printf("  run %d: %s %s\n", i, std::string(d2k::sandbox::to_string(r.status)).c_str(), r.message.c_str());
      continue;
    }
    for (const auto& w : r.workloads)
      if (w.name == "pow2_64m" && w.timing) medians.push_back(w.timing->median_s * 1e6);
    ready.push_back(r.phases.wait_ready_s);
    reference.push_back(r.phases.reference_s);
    candidate.push_back(r.phases.candidate_s);
    compare.push_back(r.phases.compare_s);
    total.push_back(r.phases.total_s);
  }
  double mean = 0, var = 0;
  for (double m : medians) mean += m;
  mean /= std::max<std::size_t>(1, medians.size());
  for (double m : medians) var += (m - mean) * (m - mean);
  double cv = medians.size() > 1 ? std::sqrt(var / static_cast<double>(medians.size() - 1)) / mean : 0;
  std::printf("(a) timing stability, vector_add L3 on pow2_64m, %zu fresh runners: median of medians %.1f us, "
              "min %.1f, max %.1f, CV of the medians %.2f%%\n",
              medians.size(), median(medians), medians.empty() ? 0 : *std::min_element(medians.begin(), medians.end()),
              medians.empty() ? 0 : *std::max_element(medians.begin(), medians.end()), 100 * cv);
  std::printf("    ncu comparison: not done (see bench/README.md)\n");
  std::printf("(b) one evaluate (visible workloads, 1 seed), median phases: wait for a ready runner %.3f s, "
              "trusted reference %.3f s, candidate %.3f s, compare %.3f s, total %.3f s\n",
              median(ready), median(reference), median(candidate), median(compare), median(total));

  // (c): S sessions evaluating as fast as the server lets them, on one GPU.
  d2k::env::Server server(cfg, d2k::tasks::load_tasks(cfg.tasks_dir), backend);
  server.bind();
  std::thread loop([&] { server.run(); });
  const std::string source = read(task->expert_path(2));
  std::atomic<int> done{0}, failed{0};
  auto stop_at = steady_clock::now() + duration_cast<steady_clock::duration>(duration<double>(seconds));
  std::vector<std::thread> clients;
  auto t0 = steady_clock::now();
  for (int s = 0; s < sessions; ++s)
    clients.emplace_back([&, s] {
      d2k::Client c(server.endpoint());
      std::string id = c.reset("vector_add", 2, static_cast<std::uint64_t>(s),
                               {{"max_evaluations", 100000}, {"max_steps", 100000}})["session"].get<std::string>();
      c.step(id, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", source}});
      while (steady_clock::now() < stop_at) {
        auto r = c.step(id, {{"type", "evaluate"}});
        (r["observation"]["last"]["ok"].get<bool>() ? done : failed)++;
      }
    });
  for (auto& t : clients) t.join();
  double elapsed = duration<double>(steady_clock::now() - t0).count();
  auto stats = d2k::Client(server.endpoint()).stats();
  std::printf("(c) %d sessions on one GPU for %.0f s: %d evaluations ok, %d failed -> %.0f evaluations/hour; "
              "GPU busy fraction %.2f (queue time over server uptime)\n",
              sessions, elapsed, done.load(), failed.load(), 3600.0 * done.load() / elapsed,
              stats["gpus"][0]["busy_fraction"].get<double>());
  server.request_stop();
  loop.join();
  fs::remove_all(state);
  return 0;
}
