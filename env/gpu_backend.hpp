// What the server needs from GPU evaluation, so env/ does not depend on how runners work.
// The server never initialises CUDA itself (DESIGN.md: GPU work happens only in runner processes).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/outcome.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::env {

struct GpuInfo {
  int index = 0;
  std::string name;
  std::uint64_t memory_mib = 0;
};

struct EvaluationJob {
  const tasks::Task* task = nullptr;
  std::filesystem::path kernel_so;  // the agent's compiled kernel
  bool include_hidden = false;      // submit: visible + hidden workloads
  int layer = 0;                    // for the reward's expert target
  int gpu = 0;
  std::uint64_t seed = 0;           // episode seed mixed with the request id; the runner backend does
                                    // not read it: sandbox/eval draws fresh secret input seeds for
                                    // every evaluation (std::random_device)
};

struct EvaluationReport {
  sandbox::Outcome outcome = sandbox::Outcome::internal_error;  // the step's outcome (a step outcome)
  std::string message;        // why it failed ("" when ok)
  nlohmann::json evaluation;  // observation.last.evaluation (status, per-workload results, flags)
  double reward = 0;          // the step's reward
  nlohmann::json breakdown;   // info.reward: how the reward came about
  // What this evaluation cost the GPU (stats: the real busy fraction, not queue occupancy):
  double gpu_phase_s = 0;     // wall time of its runner jobs on the GPU (trusted reference + candidate)
  double timed_s = 0;         // of which timed sample loops (the runners' own clock)
};

// The GPU part of an evaluation and what finishes it (GpuBackend::evaluate_gpu).
struct GpuStage {
  double gpu_phase_s = 0;  // as EvaluationReport::gpu_phase_s, known when the GPU part ends
  double timed_s = 0;      // as EvaluationReport::timed_s
  // The rest of the evaluation, none of it GPU work (design-property checks with cuobjdump, speed of
  // light, reward): the server runs it on a CPU pool while the GPU's queue starts its next run.
  std::function<EvaluationReport()> finish;
};

// Reports a preparation's stage ("trusted builds", "calibration") as it starts.
using PrepareProgress = std::function<void(const std::string& stage)>;

// profile / sanitize (sandbox/tools/gpu_tool.hpp): one run on the GPU's queue.
struct ToolJob {
  enum class Kind { profile, sanitize } kind = Kind::profile;
  const tasks::Task* task = nullptr;
  std::filesystem::path kernel_so;
  int gpu = 0;
  std::string workload;               // empty: the tool's default
  std::vector<std::string> sections;  // profile
  std::string sanitizer_tool = "memcheck";
  std::size_t max_items = 20;         // launches / findings in the result
  double deadline_s = 300;
};

struct ToolReport {
  sandbox::Outcome outcome = sandbox::Outcome::internal_error;
  bool unavailable = false;           // the tool cannot run on this server (last.error tool_unavailable)
  std::string message;
  nlohmann::json result;              // observation.last.profile / .sanitize
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  // Blocking, from the GPU's queue thread like evaluate. A backend without tools says so.
  virtual ToolReport run_tool(const ToolJob& job) {
    (void)job;
    ToolReport r;
    r.unavailable = true;
    r.message = "this server's GPU backend runs no tools";
    return r;
  }
  virtual std::vector<GpuInfo> gpus() const = 0;
  // Blocking, called from that GPU's queue thread (one timed run at a time per GPU).
  virtual EvaluationReport evaluate(const EvaluationJob& job) = 0;
  // What the server calls (issue 15 item 6): the GPU part, from that GPU's queue thread, and a
  // `finish` that does no GPU work, called later from another thread. A backend that does not split
  // its work keeps this default: all of it here, `finish` only hands the report over.
  virtual GpuStage evaluate_gpu(const EvaluationJob& job) {
    auto report = std::make_shared<EvaluationReport>(evaluate(job));
    GpuStage stage;
    stage.gpu_phase_s = report->gpu_phase_s;
    stage.timed_s = report->timed_s;
    stage.finish = [report] { return *report; };
    return stage;
  }
  // Called from the compile worker once an evaluation's kernel is built, before it waits for its
  // task's preparation or its GPU's queue: CPU work the evaluation will need may start here (the
  // runner backend starts the property checks' cuobjdump runs). Must not block.
  virtual void prefetch(const EvaluationJob& job) { (void)job; }
  // Readies `task` on `gpu` ahead of its evaluations (docs/pipeline.md): trusted builds and the
  // calibration of baseline and experts, read from the persisted caches when they hold them.
  // Blocking, called from that GPU's preparation thread while evaluations of ready tasks go on;
  // throws with the reason when it cannot. A backend with nothing to prepare keeps this default.
  virtual void prepare(const tasks::Task& task, int gpu, const PrepareProgress& progress) {
    (void)task, (void)gpu, (void)progress;
  }
  // Cancels work in flight (server shutdown).
  virtual void cancel_all() = 0;
};

}  // namespace d2k::env
