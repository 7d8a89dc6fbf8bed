#include "env/cli/verify_tasks.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "sandbox/compiler.hpp"
#include "sandbox/eval/evaluator.hpp"
#include "sandbox/eval/properties.hpp"
#include "sandbox/process.hpp"
#include "env/cli/verify_report.hpp"
#include "env/config.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::cli {
namespace {

namespace fs = std::filesystem;
using runner::KernelVerdict;
using runner::TaskVerdict;

struct Options {
  std::string tasks_dir;
  std::vector<std::string> only;
  int seeds = 3;
  int gpu = 0;
  std::string results_dir;
  std::string state;
  bool gpu_resident = env::Config{}.gpu_resident;  // the path a server evaluates on by default
  int jobs = 0;               // parallel compiles before the evaluations (0: one per CPU, at most 16)
  std::vector<std::string> kernels;  // empty: baseline, L1, L2, L3
  double time_budget_s = 0;          // 0: none
};

constexpr const char* kKernelLabels[] = {"baseline", "L1", "L2", "L3"};

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ';';
  while (!s.empty() && (s.back() == ';' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string tail(const std::string& s, std::size_t n) { return s.size() <= n ? s : "…" + s.substr(s.size() - n); }

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Tools {
  fs::path state;                 // scratch (vendor builds and files)
  fs::path nvcc;
  runner::Evaluator* evaluator = nullptr;
  sandbox::Compiler* compiler = nullptr;
  std::optional<fs::path> cuobjdump;
  runner::DeviceInfo device;
  double copy_bytes_per_s = 0;
  int gpu = 0;
  int seeds = 3;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double budget_s = 0;  // 0: none
  // Seconds left of --time-budget (a large number without one).
  double left_s() const { return budget_s > 0 ? budget_s - since(start) : 1e18; }
};

// A kernel's file in its task folder, by its label (baseline, L1, L2, L3).
fs::path kernel_file(const std::string& label) {
  return label == "baseline" ? fs::path("baseline.cu") : fs::path("experts") / (label + ".cu");
}

// The agents' compile request for one of the task's kernels: the task's main file and flags. Throws
// when the file cannot be read.
sandbox::CompileRequest compile_request(const tasks::Task& task, const fs::path& rel) {
  sandbox::CompileRequest r;
  r.main_file = task.main_file;
  r.flags = task.compile_flags;
  r.files[task.main_file] = tasks::read_task_file(task.dir, rel);
  return r;
}

// One kernel of a task through the agents' path: sandboxed compile with the task's flags, an
// agent-mode evaluation on every workload, then its design properties on its own code.
KernelVerdict verify_kernel(const tasks::Task& task, const std::string& label, const fs::path& rel, Tools& tools,
                            const std::map<std::string, double>& baseline_s) {
  KernelVerdict k;
  k.label = label;
  k.file = rel.string();
  std::printf("  compiling %s/%s ...\n", task.id.c_str(), k.file.c_str());
  std::fflush(stdout);
  sandbox::CompileRequest creq;
  try {
    creq = compile_request(task, rel);
  } catch (const std::exception& e) {
    k.status = "missing";
    k.message = e.what();
    return k;
  }
  const auto tc = std::chrono::steady_clock::now();
  const sandbox::CompileOutcome co = tools.compiler->compile(creq);
  k.compile_s = since(tc);
  if (!co.ok) {
    k.status = "compile_error";
    k.message = one_line(tail(co.log, 600));
    std::printf("    compile_error: %s\n", k.message.c_str());
    return k;
  }

  std::printf("  evaluating %s %s on %zu workloads × %d seeds (agent mode) ...\n", task.id.c_str(), label.c_str(),
              task.workloads.size(), tools.seeds);
  std::fflush(stdout);
  runner::EvalRequest req;
  req.task = &task;
  req.so_path = co.artifact;
  req.workloads = runner::WorkloadSet::all;
  req.gpu = tools.gpu;
  req.seeds = tools.seeds;
  req.timing = true;
  req.trusted = false;
  req.record_launches = true;
  const auto te = std::chrono::steady_clock::now();
  const runner::EvalResult r = tools.evaluator->evaluate(req);
  k.evaluate_s = since(te);
  k.status = sandbox::to_string(r.status);
  k.message = one_line(r.message);
  runner::PropertyInputs in;
  for (const auto& w : r.workloads) {
    k.correct[w.name] = w.correct;
    const tasks::Workload* tw = task.find_workload(w.name);
    if (w.timing && tw && tw->timed) {  // untimed workloads are checked for correctness only
      k.times[w.name] = w.timing->median_s;
      k.throttled[w.name] = w.timing->throttled;
    }
    runner::MeasuredWorkload m;
    m.name = w.name;
    if (w.timing && r.ok()) m.median_s = w.timing->median_s;
    m.flagged = r.status == sandbox::Outcome::flagged;
    m.launches = w.launches;
    in.workloads.push_back(std::move(m));
  }
  std::printf("    %s%s%s (%.1f s: reference %.1f, start %.1f, candidate %.1f, compare %.1f)\n", k.status.c_str(),
              k.message.empty() ? "" : ": ", k.message.c_str(), k.evaluate_s, r.phases.reference_s,
              r.phases.wait_ready_s, r.phases.candidate_s, r.phases.compare_s);
  if (!r.retried_flag.empty())  // a clock flag confirmed (or not) by a fresh run (EvalConfig::clock_flag_retries)
    std::printf("      (a first run was flagged and re-run: %s)\n", one_line(r.retried_flag).c_str());
  for (const auto& [w, t] : k.times) std::printf("      %-24s %10.1f µs%s\n", w.c_str(), t * 1e6, k.correct[w] ? "" : "  WRONG");

  in.launches_missing = r.launches_error.empty() ? (r.ok() ? "" : "evaluation " + std::string(sandbox::to_string(r.status))) : r.launches_error;
  if (!tools.cuobjdump) {
    in.sass_missing = in.resources_missing = "cuobjdump not found beside nvcc or on PATH";
  } else {
    const auto sass = runner::run_cuobjdump(*tools.cuobjdump, "-sass", co.artifact);
    if (sass.ok) in.sass = runner::parse_sass(sass.text);
    else in.sass_missing = sass.error;
    const auto res = runner::run_cuobjdump(*tools.cuobjdump, "-res-usage", co.artifact);
    if (res.ok) in.resources = runner::parse_res_usage(res.text);
    else in.resources_missing = res.error;
  }
  in.sm_count = tools.device.sm_count;
  in.peak_dram_bytes_per_s = tools.device.peak_dram_bytes_per_s();
  in.peak_dram_source = "memory clock × bus width × 2";
  if (!(in.peak_dram_bytes_per_s > 0) && tools.copy_bytes_per_s > 0) {
    in.peak_dram_bytes_per_s = tools.copy_bytes_per_s;
    in.peak_dram_source = "measured copy bandwidth (the device reports no memory clock)";
  }
  // The baseline's speedup over itself is 1 on every workload it timed (so a speedup property
  // judges it instead of reporting "unknown" and failing the "absent below its layer" check).
  in.baseline_s = label == "baseline" ? k.times : baseline_s;
  k.properties = runner::check_properties(task, in);
  for (const auto& p : k.properties)
    std::printf("      property %-24s %-9s %s\n", p.id.c_str(), std::string(runner::to_string(p.state)).c_str(),
                p.detail.c_str());
  std::fflush(stdout);
  return k;
}

struct Command {
  int status = -1;  // exit status; 128 + signal; 124 when killed at the deadline (as timeout(1))
  std::string out;  // stdout and stderr, unless redirected
};
Command run_command(sandbox::RunSpec spec) {
  Command r;
  if (spec.err.kind == sandbox::Stdio::pipe && spec.out.kind == sandbox::Stdio::pipe)
    spec.err = sandbox::Stdio::with_stdout();
  spec.max_output_bytes = 16u << 20;
  try {
    const sandbox::RunResult res = sandbox::run(spec);
    r.out = res.out + res.err;
    r.status = res.timed_out ? 124 : res.exit.exited ? res.exit.status : 128 + res.exit.signal;
    if (res.timed_out) r.out += "\n(killed at the deadline of " + std::to_string(spec.deadline.count() / 1000) + " s)";
  } catch (const std::exception& e) {
    r.status = 127;
    r.out = e.what();
  }
  return r;
}

// The task's vendor implementation, timed in this run: a vendor.cu (trusted task code, built with
// nvcc outside the jail because it links vendor libraries, then evaluated in a trusted runner
// like the reference: correctness checked, timed like every kernel) or a vendor.py (run with
// python3: JSON workloads on stdin, JSON medians on stdout; e.g. PyTorch SDPA).
runner::VendorVerdict verify_vendor(const tasks::Task& task, const tasks::Vendor& vendor, bool gating, Tools& tools) {
  runner::VendorVerdict v;
  v.what = vendor.what;
  v.file = vendor.file;
  v.min_fraction = vendor.min_fraction;
  v.gating = gating;
  const fs::path dir = tools.state / "vendor";
  fs::create_directories(dir);
  const fs::path src = task.dir / vendor.file;
  const bool is_cu = vendor.file.size() > 3 && vendor.file.substr(vendor.file.size() - 3) == ".cu";
  std::printf("  %s %s (%s) ...\n", gating ? "vendor yardstick" : "library yardstick", vendor.file.c_str(),
              vendor.what.empty() ? "named by its output" : vendor.what.c_str());
  std::fflush(stdout);
  if (is_cu) {
    std::string arch = "-arch=sm_90";
    std::vector<std::string> extra;
    for (const auto& f : task.compile_flags) {
      if (f.rfind("-arch=", 0) == 0) arch = f;
      else extra.push_back(f);
    }
    const fs::path lib = tools.nvcc.parent_path().parent_path() / "lib64";
    const fs::path so = dir / (task.id + "-" + task.content_hash.substr(0, 16) + ".so");
    sandbox::RunSpec build;
    build.argv = {tools.nvcc.string(), "-O3", arch, "-shared", "-Xcompiler", "-fPIC"};
    build.argv.insert(build.argv.end(), extra.begin(), extra.end());
    for (const std::string& a : {std::string("-o"), so.string(), src.string(), "-L" + lib.string(), std::string("-Xlinker"),
                                 "-rpath=" + lib.string()})
      build.argv.push_back(a);
    for (const auto& l : vendor.libs) build.argv.push_back("-l" + l);
    const Command b = run_command(build);
    if (b.status != 0) {
      v.status = "build_error";
      v.message = one_line(tail(b.out, 600));
      std::printf("    build_error: %s\n", v.message.c_str());
      return v;
    }
    runner::EvalRequest req;
    req.task = &task;
    req.so_path = so;
    req.workloads = runner::WorkloadSet::all;
    req.gpu = tools.gpu;
    req.seeds = 1;
    req.timing = true;
    req.trusted = true;
    const runner::EvalResult r = tools.evaluator->evaluate(req);
    v.status = sandbox::to_string(r.status);
    v.message = one_line(r.message);
    for (const auto& w : r.workloads) {
      const tasks::Workload* tw = task.find_workload(w.name);
      if (w.timing && tw && tw->timed && w.correct) v.times[w.name] = w.timing->median_s;
    }
  } else {
    // The task's reference (the evaluator's trusted build, already made for the kernels), nvcc
    // and a scratch folder: a vendor.py built on tasks/vendor_torch.py checks its output against
    // the reference with them (a vendor.py may ignore them).
    nlohmann::json in = {{"task", task.id},
                         {"seed", 1},
                         {"nvcc", tools.nvcc.string()},
                         {"scratch", dir.string()},
                         {"workloads", nlohmann::json::array()}};
    try {
      in["reference_so"] = fs::absolute(tools.evaluator->build_trusted(task, task.reference_path())).string();
    } catch (const std::exception& e) {
      std::printf("    (the reference's trusted build failed, the vendor builds its own: %s)\n", one_line(tail(e.what(), 300)).c_str());
    }
    for (const auto& w : task.workloads)
      if (w.timed) in["workloads"].push_back({{"name", w.name}, {"sizes", w.sizes}});
    const fs::path in_file = dir / (task.id + ".in.json");
    const fs::path out_file = dir / (task.id + ".out.json");
    {
      std::ofstream f(in_file);
      f << in.dump();
    }
    sandbox::RunSpec py;
    py.argv = {"python3", src.string()};
    // No __pycache__ beside the tasks (tasks/vendor_torch.py is imported by the vendor.py files).
    py.env_overrides = {{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
                        {"CUDA_VISIBLE_DEVICES", std::to_string(tools.gpu)},
                        {"PYTHONDONTWRITEBYTECODE", "1"}};
    // Dies with verify-tasks: a vendor.py that outlived its killed parent kept timing on the GPU
    // and time-sliced with the next evaluations (H200, 2026-12-02 07:51Z: an honest kernel flagged).
    py.die_with_parent = true;
    py.in = sandbox::Stdio::to_file(in_file);
    py.out = sandbox::Stdio::to_file(out_file);
    // Within --time-budget (at least a minute); a vendor.py killed at its deadline still leaves
    // the workloads it finished (one complete result line after each).
    py.deadline = std::chrono::seconds(static_cast<long>(std::clamp(tools.left_s(), 60.0, 900.0)));
    const Command b = run_command(py);
    std::string text;
    {
      std::ifstream f(out_file);
      std::stringstream ss;
      ss << f.rdbuf();
      text = ss.str();
    }
    if (b.status != 0) {
      // Killed at its deadline (124) or failed part-way: the workloads it finished still count.
      const std::string why = b.status == 124 ? std::string("killed at its deadline")
                                              : "exit " + std::to_string(b.status) + ": " + one_line(tail(b.out, 400));
      try {
        runner::parse_vendor_output(text, v);
        v.partial = true;
        if (v.ok()) {
          v.status = "partial";
          v.message = why + "; " + std::to_string(v.times.size()) + " workload(s) finished";
        }
      } catch (const std::exception&) {
        v.status = "error";
        v.message = why + (b.status == 124 ? ", before a workload finished: " + one_line(tail(b.out, 400)) : "");
      }
    } else {
      try {
        runner::parse_vendor_output(text, v);
      } catch (const std::exception& e) {
        v.status = "error";
        v.message = std::string("unreadable output: ") + e.what();
      }
    }
  }
  std::printf("    %s%s%s\n", v.status.c_str(), v.message.empty() ? "" : ": ", v.message.c_str());
  for (const auto& [w, t] : v.times) std::printf("      %-24s %10.1f µs\n", w.c_str(), t * 1e6);
  for (const auto& [w, why] : v.wrong) std::printf("      %-24s WRONG: %s\n", w.c_str(), why.c_str());
  std::fflush(stdout);
  return v;
}

// Every kernel of the chosen tasks compiled up front, `jobs` at a time, through the same jailed
// Compiler: the evaluations that follow (one at a time, so their timings never share the GPU) then
// find each object in the compile cache. A failed compile is not reported here; verify_kernel
// compiles again (a cache miss: the outcome was not cached) and reports it in its place.
void precompile(const std::vector<const tasks::Task*>& chosen, const std::vector<std::string>& labels,
                sandbox::Compiler& compiler, int jobs) {
  std::vector<sandbox::CompileRequest> work;
  for (const tasks::Task* t : chosen) {
    for (const auto& label : labels) {
      try {
        work.push_back(compile_request(*t, kernel_file(label)));
      } catch (const std::exception&) {
        continue;  // verify_kernel reports the missing file
      }
    }
  }
  if (work.size() < 2 || jobs < 2) return;
  jobs = std::min<int>(jobs, static_cast<int>(work.size()));
  std::printf("compiling %zu kernels, %d at a time ...\n", work.size(), jobs);
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<std::size_t> next{0}, done{0}, failed{0};
  std::mutex print_mu;
  std::vector<std::thread> threads;
  for (int i = 0; i < jobs; ++i)
    threads.emplace_back([&] {
      for (std::size_t k = next++; k < work.size(); k = next++) {
        const bool ok = compiler.compile(work[k]).ok;
        if (!ok) ++failed;
        const std::size_t n = ++done;
        if (n % 10 == 0 || n == work.size()) {
          std::lock_guard<std::mutex> lock(print_mu);
          std::printf("  compiled %zu/%zu (%.0f s)\n", n, work.size(), since(t0));
          std::fflush(stdout);
        }
      }
    });
  for (auto& th : threads) th.join();
  std::printf("  %zu kernels compiled in %.1f s%s\n", work.size(), since(t0),
              failed ? (", " + std::to_string(failed.load()) + " failed (reported with their task)").c_str() : "");
}

// The task's yardstick: the vendor task.json names (a check), else a vendor.py in the task folder
// (a library yardstick: reported against 1.0×, not a check; issue 16).
std::optional<std::pair<tasks::Vendor, bool>> yardstick_of(const tasks::Task& task) {
  if (task.vendor) return std::make_pair(*task.vendor, true);
  std::error_code ec;
  if (!fs::is_regular_file(task.dir / "vendor.py", ec)) return std::nullopt;
  tasks::Vendor v;
  v.file = "vendor.py";
  v.min_fraction = runner::kLibraryTarget;
  return std::make_pair(v, false);
}

TaskVerdict verify_task(const tasks::Task& task, Tools& tools, const std::vector<std::string>& labels) {
  TaskVerdict v;
  v.task = task.id;
  v.title = task.title;
  v.category = task.category;
  for (const auto& w : task.workloads) {
    v.workloads.push_back(w.name);
    v.visible[w.name] = w.visible;
    v.bytes[w.name] = task.bytes_of(w);
  }
  std::printf("== %s (%s): %zu workloads (%zu visible), %zu properties\n", task.id.c_str(), task.title.c_str(),
              task.workloads.size(), task.visible_workloads().size(), task.properties.size());
  if (labels.size() < 4) {
    std::string names;
    for (const auto& l : labels) names += (names.empty() ? "" : ", ") + l;
    v.partial = "only " + names + " (--kernels)";
  }
  std::map<std::string, double> baseline_times;
  for (int layer = 0; layer <= 3; ++layer) {
    const std::string label = kKernelLabels[layer];
    if (std::find(labels.begin(), labels.end(), label) == labels.end()) continue;
    if (tools.left_s() <= 0) {
      v.partial += (v.partial.empty() ? "" : "; ") + std::string("time budget spent before ") + label;
      break;
    }
    v.kernels.push_back(verify_kernel(task, label, kernel_file(label), tools, baseline_times));
    if (layer == 0) baseline_times = v.kernels.back().times;
  }
  // Ladder steps between adjacent layers that both ran.
  for (std::size_t i = 1; i < v.kernels.size(); ++i) {
    const auto pos = [](const std::string& l) {
      return std::find(std::begin(kKernelLabels), std::end(kKernelLabels), l) - std::begin(kKernelLabels);
    };
    if (pos(v.kernels[i].label) == pos(v.kernels[i - 1].label) + 1)
      v.ladder.push_back(runner::ladder_step(v.kernels[i - 1], v.kernels[i]));
  }
  v.is_memory_bound = runner::memory_bound(task);
  const KernelVerdict* l3 = nullptr;
  for (const auto& k : v.kernels)
    if (k.label == "L3") l3 = &k;
  if (l3 != nullptr) {
    v.sol = runner::speed_of_light(task, *l3, tools.copy_bytes_per_s);
    if (const auto y = yardstick_of(task)) {
      if (tools.left_s() <= 0) {
        v.partial += (v.partial.empty() ? "" : "; ") + std::string("time budget spent before the yardstick");
      } else {
        v.vendor = verify_vendor(task, y->first, y->second, tools);
        v.vendor->rows = runner::vendor_rows(task, *l3, *v.vendor);
      }
    }
  }
  runner::derive_checks(v, task, tools.copy_bytes_per_s);
  return v;
}

int verify(const Options& o, const std::string& command) {
  const fs::path root = o.tasks_dir.empty() ? default_tasks_dir() : fs::path(o.tasks_dir);
  tasks::TaskSet set = tasks::load_tasks(root);
  for (const auto& e : set.errors) std::printf("NOT LOADED %s: %s\n", e.file.c_str(), e.what());
  std::vector<const tasks::Task*> chosen;
  for (const auto& name : o.only) {
    const tasks::Task* t = set.find(name);
    if (t == nullptr) {
      std::fprintf(stderr, "verify-tasks: no task '%s' in %s\n", name.c_str(), root.string().c_str());
      return 1;
    }
    chosen.push_back(t);
  }
  if (o.only.empty())
    for (const auto& t : set.tasks) chosen.push_back(&t);
  if (chosen.empty()) {
    std::fprintf(stderr, "verify-tasks: no task to verify in %s\n", root.string().c_str());
    return 1;
  }
  if (o.seeds < 1) {
    std::fprintf(stderr, "verify-tasks: --seeds must be at least 1\n");
    return 1;
  }
  std::vector<std::string> labels;  // in ladder order, whatever order --kernels named them in
  for (const char* l : kKernelLabels)
    if (o.kernels.empty() || std::find(o.kernels.begin(), o.kernels.end(), l) != o.kernels.end()) labels.push_back(l);
  for (const auto& k : o.kernels)
    if (std::find(std::begin(kKernelLabels), std::end(kKernelLabels), k) == std::end(kKernelLabels)) {
      std::fprintf(stderr, "verify-tasks: --kernels takes baseline, L1, L2, L3 (not '%s')\n", k.c_str());
      return 1;
    }

  const bool device_nodes = fs::exists("/dev/nvidiactl") || fs::exists("/dev/nvidia0");
  if (!device_nodes) {
    std::fprintf(stderr, "verify-tasks needs a GPU; none found (no /dev/nvidia* device)\n");
    return 2;
  }
  const fs::path state = o.state.empty() ? fs::temp_directory_path() / ("d2k-verify-" + std::to_string(getuid()))
                                         : fs::path(o.state);
  fs::create_directories(state);
  const fs::path abs_root = fs::absolute(root);

  env::Config server_like;  // hide what a server on these tasks and this state would hide
  server_like.tasks_dir = abs_root;
  server_like.state_dir = state;
  server_like.finalize();
  runner::EvalConfig ec;
  ec.state_dir = state / "eval";
  ec.hidden_paths = server_like.hidden_paths();
  ec.compiler.cache_dir = state / "trusted-cache";
  ec.compiler.scratch_dir = state / "trusted-scratch";
  ec.seeds = o.seeds;
  ec.gpu_resident = o.gpu_resident;
  // verify-tasks compares the task's own kernels with library yardsticks timed one call at a time
  // (flushed, launch included): it keeps the sampled medians, not the train's back-to-back time
  // that a server's rewards use (EvalConfig::train, docs/timing-protocol.md).
  ec.train = false;
  ec.agent_pool_size = 1;
  fs::create_directories(ec.state_dir);
  fs::create_directories(ec.compiler.cache_dir);
  fs::create_directories(ec.compiler.scratch_dir);
  runner::Evaluator evaluator(ec);
  if (evaluator.gpu_count() == 0) {
    std::fprintf(stderr, "verify-tasks needs a GPU; none found (%s)\n", evaluator.probe_error().c_str());
    return 2;
  }
  if (o.gpu < 0 || o.gpu >= evaluator.gpu_count()) {
    std::fprintf(stderr, "verify-tasks: no GPU with index %d (%d found)\n", o.gpu, evaluator.gpu_count());
    return 1;
  }

  // The agents' compiler: same fixed flags, same jail, the task folder and state hidden.
  sandbox::CompilerConfig cc;
  cc.cache_dir = state / "compile-cache";
  cc.scratch_dir = state / "scratch";
  cc.hidden_paths = server_like.hidden_paths();
  fs::create_directories(cc.cache_dir);
  fs::create_directories(cc.scratch_dir);
  sandbox::Compiler compiler(cc);

  Tools tools;
  tools.state = state;
  tools.nvcc = cc.nvcc;
  tools.evaluator = &evaluator;
  tools.compiler = &compiler;
  tools.cuobjdump = runner::find_cuobjdump(cc.nvcc);
  tools.device = evaluator.gpus()[static_cast<std::size_t>(o.gpu)];
  tools.gpu = o.gpu;
  tools.seeds = o.seeds;
  tools.budget_s = o.time_budget_s;

  runner::RunHeader h;
  h.date = now_utc();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  h.host = host;
  h.gpu = tools.device.name + " (" + tools.device.pci_bus_id + ", " + std::to_string(tools.device.sm_count) + " SMs, sm_" +
          std::to_string(tools.device.cc_major) + std::to_string(tools.device.cc_minor) + ")";
  h.driver = tools.device.driver.empty() ? "unknown (no NVML)" : tools.device.driver;
  h.cuda_driver = std::to_string(tools.device.cuda_driver_version / 1000) + "." +
                  std::to_string(tools.device.cuda_driver_version % 1000 / 10);
  h.toolchain = one_line(compiler.toolchain_version());
  h.cuobjdump = tools.cuobjdump ? tools.cuobjdump->string() : "missing (sass and res-usage properties unchecked)";
  h.peak_dram_bytes_per_s = tools.device.peak_dram_bytes_per_s();
  h.seeds = o.seeds;
  h.command = command;
  std::printf("verify-tasks on %s, driver %s, %s\n", h.gpu.c_str(), h.driver.c_str(), h.toolchain.c_str());
  std::printf("cuobjdump: %s\n", h.cuobjdump.c_str());
  std::printf("measuring the device-to-device copy bandwidth ...\n");
  std::fflush(stdout);
  const runner::CopyBandwidth bw = evaluator.measure_copy_bandwidth(o.gpu);
  if (bw.ok) {
    tools.copy_bytes_per_s = bw.bytes_per_s;
    h.copy_bytes_per_s = bw.bytes_per_s;
    h.copy_bytes = bw.copy_bytes;
    h.copy_samples = bw.samples;
    std::printf("  copy bandwidth: %.0f GB/s (read + write; %.2f GiB copies, median of %d: %.3f ms); peak (clock × bus × 2): %.0f GB/s\n",
                bw.bytes_per_s / 1e9, static_cast<double>(bw.copy_bytes) / (1 << 30), bw.samples, bw.median_s * 1e3,
                h.peak_dram_bytes_per_s / 1e9);
  } else {
    h.copy_error = bw.error;
    std::printf("  copy bandwidth NOT measured: %s\n", bw.error.c_str());
  }

  precompile(chosen, labels, compiler,
             o.jobs > 0 ? o.jobs : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 16));

  // Each task's report beside the task (tasks/<task>/RESULTS.md), or under --results-dir in the
  // same layout, and its row of the suite table (<results dir>/RESULTS.md), written as soon as the
  // task is done: a run stopped by --time-budget or killed still leaves the tasks it finished. A
  // partial verdict (--kernels, budget spent inside the task) updates the suite table only: it
  // does not replace a complete report.
  const fs::path results_dir = o.results_dir.empty() ? root : fs::path(o.results_dir);
  std::vector<TaskVerdict> verdicts;
  std::vector<fs::path> written;
  std::vector<std::string> skipped;
  bool write_failed = false;
  for (const tasks::Task* t : chosen) {
    if (tools.left_s() <= 0) {
      skipped.push_back(t->id);
      continue;
    }
    verdicts.push_back(verify_task(*t, tools, labels));
    const TaskVerdict& v = verdicts.back();
    std::printf("  %s\n", runner::summary_line(v).c_str());
    try {
      if (v.partial.empty()) {
        const auto paths = runner::write_task_results(results_dir, h, {v});
        written.insert(written.end(), paths.begin(), paths.end());
      }
      const fs::path suite = runner::write_suite_table(results_dir, h, {v});
      if (std::find(written.begin(), written.end(), suite) == written.end()) written.push_back(suite);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "verify-tasks: %s\n", e.what());
      write_failed = true;
    }
    std::fflush(stdout);
  }

  // The whole run on stdout too: a log of the run carries it even when the files stay behind.
  std::printf("\n======== report ========\n%s======== end of report ========\n\n",
              runner::render_markdown(h, verdicts).c_str());
  int failed = 0, partial = 0;
  for (const auto& v : verdicts) {
    const std::string r = runner::result_word(v);
    std::printf("%-24s %s%s%s\n", v.task.c_str(), r.c_str(), v.partial.empty() ? "" : ": ", v.partial.c_str());
    for (const auto& c : v.checks)
      if (!c.passed) std::printf("    FAIL %s: %s\n", c.name.c_str(), c.detail.c_str());
    failed += r == "FAIL" ? 1 : 0;
    partial += r == "PARTIAL" ? 1 : 0;
  }
  for (const auto& id : skipped) std::printf("%-24s NOT RUN (time budget of %.0f s spent)\n", id.c_str(), o.time_budget_s);
  std::printf("\nsummary (L3 vs speed of light and vs library, large workloads):\n");
  for (const auto& v : verdicts) std::printf("  %s\n", runner::summary_line(v).c_str());
  for (const auto& p : written) std::printf("wrote %s\n", p.string().c_str());
  std::printf("%zu task(s) run, %d failed, %d partial, %zu not run\n", verdicts.size(), failed, partial, skipped.size());
  if (failed > 0 || !bw.ok || write_failed) return 1;
  return partial > 0 || !skipped.empty() ? 3 : 0;
}

}  // namespace

void add_verify_tasks(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand(
      "verify-tasks",
      "On a GPU machine: compile and evaluate every task's baseline and experts through the agents' sandboxed path, "
      "check correctness, the L1<L2<L3 ladder, the speed of light and the design properties; write each task's "
      "report beside it, tasks/<task>/RESULTS.md, and its row of the suite table, tasks/RESULTS.md (L3 against the "
      "speed of light and the task's library yardstick, vendor.py). "
      "Exit 1 on any failed check, 2 without a GPU, 3 when the run was partial (--kernels, --time-budget) and "
      "nothing failed");
  auto o = std::make_shared<Options>();
  cmd->add_option("--tasks", o->tasks_dir, "Tasks folder (default: the built-in tasks)");
  cmd->add_option("--task", o->only, "Verify only this task (repeatable)");
  cmd->add_option("--seeds", o->seeds, "Input seeds per workload for correctness (default 3)")->check(CLI::Range(1, 100));
  cmd->add_option("--gpu", o->gpu, "GPU index (PCI bus order; default 0)");
  cmd->add_option("--results-dir", o->results_dir,
                  "Folder for the reports, one <task>/RESULTS.md each, and the suite table, RESULTS.md (default: the "
                  "tasks folder: each report lands beside its task)");
  cmd->add_option("--state", o->state, "Scratch and cache folder (default: $TMPDIR/d2k-verify-<uid>)");
  cmd->add_option("--jobs", o->jobs,
                  "Kernels compiled in parallel before the evaluations, which run one at a time (default: one per "
                  "CPU, at most 16)")
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--gpu-resident,!--host-path", o->gpu_resident,
                std::string("Evaluate on the GPU-resident path (outputs stay on the GPU and are compared there) or, with "
                            "--host-path, through host memory with the compare on the CPU (docs/timing-protocol.md); "
                            "default: the server's default, ") +
                    (env::Config{}.gpu_resident ? "the GPU-resident path" : "the host path"));
  cmd->add_option("--kernels", o->kernels,
                  "Only these kernels (comma-separated from baseline, L1, L2, L3; e.g. L3 for the speed-of-light "
                  "and library yardstick rows alone). A partial run updates the suite table, not the tasks' reports; "
                  "exit 3 when nothing failed")
      ->delimiter(',');
  cmd->add_option("--time-budget", o->time_budget_s,
                  "Seconds for the whole run: no task or kernel starts after it (those left are listed as not run; "
                  "exit 3 when nothing failed); each finished task's rows are already written")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([&run, o, cmd] {
    std::string command = "d2k verify-tasks";
    for (const auto& a : cmd->remaining()) command += " " + a;
    if (!o->tasks_dir.empty()) command += " --tasks " + o->tasks_dir;
    for (const auto& t : o->only) command += " --task " + t;
    command += " --seeds " + std::to_string(o->seeds);
    command += o->gpu_resident ? " --gpu-resident" : " --host-path";
    if (!o->kernels.empty()) {
      command += " --kernels ";
      for (std::size_t i = 0; i < o->kernels.size(); ++i) command += (i ? "," : "") + o->kernels[i];
    }
    if (o->time_budget_s > 0) command += " --time-budget " + std::to_string(static_cast<long>(o->time_budget_s));
    run = [o, command] { return verify(*o, command); };
  });
}

}  // namespace d2k::cli
