// The phases of one `evaluate` (compile-cache hit: the candidate is built once beforehand), on the
// host path and on the GPU-resident path (EvalConfig::gpu_resident), for tasks' L3 experts, and
// how tight the parent's bound is for each timed workload. Prints figures; asserts nothing.
//   CUDA_VISIBLE_DEVICES=0 build/bin/bench_eval_phases [--runs 5] [--seeds 3] [--modes host,resident]
//                                                      [--tasks vector_add,softmax|all] [--rel-slack X]
//                                                      [--builds DIR [--build-only]]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_args.hpp"
#include "bench/bench_stats.hpp"
#include "sandbox/compiler.hpp"
#include "sandbox/eval/evaluator.hpp"
#include "tasks/loader/task.hpp"

namespace fs = std::filesystem;

namespace {

using d2k::bench::median;

// The newest modification time of any file under dir (a task's sources and headers).
fs::file_time_type newest_under(const fs::path& dir) {
  fs::file_time_type t = fs::last_write_time(dir);
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) t = std::max(t, e.last_write_time());
  return t;
}

// Builds cu into dir/name.so. A build already there is reused when it is newer than every file of
// the task's folder (--builds DIR: made on a machine without a GPU with --build-only and carried).
// The server's fixed nvcc flags and the task's own after them (sandbox/compiler's rule: conv2d and
// the other Hopper tasks name -arch=sm_90a, which replaces the base sm_90; an sm_90 build of their
// experts traps at launch).
fs::path nvcc_build(const fs::path& cu, const fs::path& dir, const std::string& name,
                    const std::vector<std::string>& task_flags, const fs::path& task_dir) {
  fs::create_directories(dir);
  const fs::path so = dir / (name + ".so");
  std::error_code ec;
  if (fs::exists(so, ec) && fs::last_write_time(so, ec) > newest_under(task_dir)) return so;
  std::string cmd = "/usr/local/cuda/bin/nvcc";
  for (const auto& f : d2k::sandbox::base_flags_for(d2k::sandbox::CompilerConfig{}.base_flags, task_flags)) cmd += " '" + f + "'";
  for (const auto& f : task_flags) cmd += " '" + f + "'";
  cmd += " -o '" + so.string() + "' '" + cu.string() + "' 2>&1";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("nvcc failed: " + cmd);
  return so;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5, seeds = 3, owner_reuse = -1;
  double rel_slack = -1, train_job_gib = 0;  // --rel-slack: the tight bound's overhead_rel_slack (default: EvalConfig's)
  std::vector<std::string> modes = {"host", "resident"}, task_names = {"vector_add", "softmax"};
  bool all_workloads = false, no_train = false, no_oracle = false;
  d2k::bench::Args args("bench_eval_phases",
                        "The phases of one `evaluate` (compile-cache hit) on the host path and the GPU-resident path, for\n"
                        "tasks' L3 experts, and how tight the parent's bound is per timed workload. Needs a GPU\n"
                        "(CUDA_VISIBLE_DEVICES=0). Prints figures; asserts nothing.");
  args.option("--runs", &runs, "evaluations per task and mode (the figures are their medians)");
  args.option("--seeds", &seeds, "input seeds per workload");
  args.option("--modes", &modes, "host and/or resident");
  args.option("--tasks", &task_names, "task ids, or all (every task of the catalogue)");
  args.option("--rel-slack", &rel_slack, "the bound's overhead_rel_slack (negative: EvalConfig's default)");
  args.option("--train-job-gib", &train_job_gib, "the job's GPU memory for its trains (EvalConfig::train_job_bytes; 0: train_job_fraction of the GPU's)");
  args.flag("--no-oracle", &no_oracle, "the owner replays timed calls with the reference, not the task's L3 expert (EvalConfig::replay_oracle off)");
  args.flag("--no-train", &no_train, "the runner's sampled medians, as without EvalConfig::train (verify-tasks' measure)");
  args.option("--owner-reuse", &owner_reuse, "evaluations a warm owner serves (EvalConfig::owner_reuse; 1: a fresh owner each, as before; negative: the default)");
  args.flag("--all-workloads", &all_workloads, "every workload, hidden ones too (as `submit` and calibration), not only the visible");
  std::string builds_arg;
  bool build_only = false;
  args.option("--builds", &builds_arg, "where the reference and L3 builds go; one there newer than its task's files is reused (default: a temporary folder)");
  args.flag("--build-only", &build_only, "build each task's reference and L3 expert (as the candidate and as the replay oracle) into --builds and exit (no GPU needed)");
  if (const int rc = args.parse(argc, argv); rc >= 0) return rc;
  for (const auto& m : modes)
    if (m != "host" && m != "resident") {
      std::fprintf(stderr, "bench_eval_phases: --modes '%s': host or resident\n", m.c_str());
      return 2;
    }
  if (runs < 1 || seeds < 1) {
    std::fprintf(stderr, "bench_eval_phases: --runs and --seeds must be at least 1\n");
    return 2;
  }
  const fs::path state = fs::temp_directory_path() / "d2k-bench-eval-phases";
  const fs::path builds = builds_arg.empty() ? state : fs::absolute(builds_arg);
  if (task_names.size() == 1 && task_names[0] == "all") {
    task_names.clear();
    for (const auto& t : d2k::tasks::load_tasks(D2K_TASKS_DIR).tasks) task_names.push_back(t.id);
  }
  if (build_only) {
    for (const std::string& name : task_names) {
      const d2k::tasks::Task task = d2k::tasks::load_task(fs::path(D2K_TASKS_DIR) / name);
      const auto t0 = std::chrono::steady_clock::now();
      nvcc_build(task.reference_path(), builds / "trusted", name + "_reference", task.compile_flags, task.dir);
      const fs::path l3 = nvcc_build(task.expert_path(3), builds / "candidate", name + "_L3", task.compile_flags, task.dir);
      // The owner's replay oracle (EvalConfig::replay_oracle) is the same build, as a trusted one.
      fs::copy_file(l3, builds / "trusted" / (name + "_L3.so"), fs::copy_options::overwrite_existing);
      std::printf("bench_eval_phases: built %s (reference, L3) in %.1f s\n", name.c_str(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      std::fflush(stdout);
    }
    return 0;
  }
  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  for (const std::string& mode : modes) {
    d2k::runner::EvalConfig cfg;
    cfg.state_dir = state / mode;
    cfg.build_trusted = [&](const d2k::tasks::Task& t, const fs::path& cu) {
      return nvcc_build(cu, builds / "trusted", t.id + "_" + cu.stem().string(), t.compile_flags, t.dir);
    };
    cfg.toolchain = "nvcc-bench";
    cfg.gpu_resident = mode == "resident";
    if (rel_slack >= 0) cfg.bound.overhead_rel_slack = rel_slack;
    if (no_train) cfg.train = false;
    if (no_oracle) cfg.replay_oracle = false;
    if (owner_reuse >= 0) cfg.owner_reuse = owner_reuse;
    if (train_job_gib > 0) cfg.train_job_bytes = static_cast<std::uint64_t>(train_job_gib * double(1ull << 30));
    d2k::runner::Evaluator ev(cfg);
    if (ev.gpu_count() == 0) {
      std::printf("bench_eval_phases: no GPU (%s); nothing measured\n", ev.probe_error().c_str());
      return 0;
    }
    std::printf("bench_eval_phases %s on %s (%s path, %s workloads, %d seeds, L3 expert, %d runs, bound slack %.2f x overhead)\n",
                date, ev.gpus()[0].name.c_str(), mode.c_str(), all_workloads ? "all" : "visible", seeds, runs, cfg.bound.overhead_rel_slack);
    for (const std::string& name : task_names) {
      const d2k::tasks::Task task = d2k::tasks::load_task(fs::path(D2K_TASKS_DIR) / name);
      const fs::path so = nvcc_build(task.expert_path(3), builds / "candidate", name + "_L3", task.compile_flags, task.dir);
      std::map<std::string, std::vector<double>> ph;
      std::map<std::string, std::vector<double>> med, outside, over, frac, samples, batch, window, own_batch, cmed;
      std::map<std::string, std::map<std::string, std::vector<double>>> replay;  // the owner replay's parts
      int ok = 0;
      std::string replayed_with;
      std::pair<std::vector<std::pair<std::string, double>>, std::vector<std::pair<std::string, double>>> last_frames;
      for (int r = 0; r <= runs; ++r) {  // run 0 warms the pools and the task's GPU budget
        d2k::runner::EvalRequest req;
        req.task = &task;
        req.so_path = so;
        req.seeds = seeds;
        if (all_workloads) req.workloads = d2k::runner::WorkloadSet::all;
        const auto t0 = std::chrono::steady_clock::now();
        const d2k::runner::EvalResult e = ev.evaluate(req);
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!e.ok()) {
          std::printf("  %s run %d: %s %s\n", name.c_str(), r, std::string(d2k::sandbox::to_string(e.status)).c_str(),
                      e.message.c_str());
          continue;
        }
        if (r == 0) continue;
        ++ok;
        replayed_with = e.replayed_with;
        {
          // Per run: where its time went.
          double owner_result = -1;
          for (const auto& [f, t] : e.phases.reference_frames)
            if (f == "result") owner_result = t;
          std::printf("    run %d: total %.3f  owner export %.3f  candidate %.3f  reference %.3f  start waits %.3f  "
                      "owner result at %.3f (since its job; owner's job %d)  tail %.3f (allowed %.3f)\n",
                      r, e.phases.total_s, e.phases.owner_export_s, e.phases.candidate_s, e.phases.reference_s,
                      e.phases.start_wait_s, owner_result, e.phases.owner_job, e.phases.candidate_tail_s,
                      e.phases.tail_allowed_s);
        }
        ph["wait_ready"].push_back(e.phases.wait_ready_s);
        ph["candidate"].push_back(e.phases.candidate_s);
        ph["reference"].push_back(e.phases.reference_s);
        ph["compare"].push_back(e.phases.compare_s);
        ph["total"].push_back(e.phases.total_s);
        ph["wall"].push_back(wall);
        ph["tail"].push_back(e.phases.candidate_tail_s);
        ph["snapshot"].push_back(e.phases.snapshot_s);
        ph["owner_export"].push_back(e.phases.owner_export_s);
        ph["fill"].push_back(e.phases.fill_s);
        ph["snap"].push_back(e.phases.snap_s);
        last_frames = {e.phases.candidate_frames, e.phases.reference_frames};
        for (const auto& w : e.workloads) {
          if (!w.timing) continue;
          med[w.name].push_back(w.timing->median_s);
          outside[w.name].push_back(w.parent_call_s);  // signed: below 0 the trusted overheads exceed the window
          batch[w.name].push_back(w.batch_s);
          window[w.name].push_back(w.window_s);
          own_batch[w.name].push_back(w.runner_batch_s);  // the candidate's own figure (untrusted)
          cmed[w.name].push_back(w.claimed_median_s);
          over[w.name].push_back(w.call_overhead_s);
          frac[w.name].push_back(w.flag_below_fraction);
          samples[w.name].push_back(w.timing->samples);
          for (const auto& [part, t] : w.replay_parts) replay[w.name][part].push_back(t);
        }
      }
      std::printf("  %-10s %-8s ok %d/%d  median phases [s]: wait_ready %.3f  candidate %.3f  reference %.3f  compare %.3f  total %.3f  (wall %.3f; last timing_end to exit %.3f; outputs taken at phase ends %.3f; replayed with %s)\n",
                  name.c_str(), mode.c_str(), ok, runs, median(ph["wait_ready"]), median(ph["candidate"]),
                  median(ph["reference"]), median(ph["compare"]), median(ph["total"]), median(ph["wall"]), median(ph["tail"]),
                  median(ph["snapshot"]), replayed_with.empty() ? "-" : replayed_with.c_str());
      // The last run's frames, each at its arrival on the parent's clock (ms since the job was sent).
      for (int side = 0; side < 2; ++side) {
        const auto& fr = side == 0 ? last_frames.first : last_frames.second;
        std::string line;
        for (const auto& [f, t] : fr) line += " " + f + "@" + std::to_string(static_cast<int>(t * 1e3 + 0.5));
        std::printf("      %s frames (ms):%s\n", side == 0 ? "candidate" : "reference", line.c_str());
      }
      if (mode == "resident")
        std::printf("      resident: owner start to export %.3f  input fills %.3f  output snapshots %.3f (parent round trips, all phases)\n",
                    median(ph["owner_export"]), median(ph["fill"]), median(ph["snap"]));
      for (const auto& [w, v] : med)
        std::printf("      %-18s kernel %.1f us (claimed %.1f)  parent per call %.1f us  trusted overhead/call %.1f us  "
                    "window %.1f us  trusted batch %.1f us (candidate's own %.1f us)  samples %.0f  flags a claim below "
                    "%.1f %% of the parent's call time\n",
                    w.c_str(), median(v) * 1e6, median(cmed[w]) * 1e6, median(outside[w]) * 1e6, median(over[w]) * 1e6,
                    median(window[w]) * 1e6, median(batch[w]) * 1e6, median(own_batch[w]) * 1e6, median(samples[w]),
                    100 * median(frac[w]));
      for (const auto& [w, parts] : replay) {
        std::string line;
        char buf[64];
        for (const auto& [part, v] : parts) {
          std::snprintf(buf, sizeof buf, "  %s %.1f", part.c_str(), median(v) * 1e3);
          line += buf;
        }
        std::printf("      %-18s owner replay (ms):%s\n", w.c_str(), line.c_str());
      }
    }
  }
  return 0;
}
