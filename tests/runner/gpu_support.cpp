#include "gpu_support.hpp"

#include "skip.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace d2k::test {

std::filesystem::path nvcc_build(const std::filesystem::path& cu, const std::filesystem::path& out_dir) {
  std::filesystem::create_directories(out_dir);
  const auto so = out_dir / (cu.parent_path().filename().string() + "_" + cu.stem().string() + ".so");
  if (std::filesystem::exists(so) && std::filesystem::last_write_time(so) >= std::filesystem::last_write_time(cu))
    return so;
  const std::string cmd = "/usr/local/cuda/bin/nvcc -O3 -arch=sm_90 -shared -Xcompiler -fPIC -lineinfo -o '" +
                          so.string() + "' '" + cu.string() + "' 2>&1";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("nvcc failed: " + cmd);
  return so;
}

namespace {
runner::EvalConfig test_config() {
    runner::EvalConfig cfg;
    cfg.state_dir = std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "runner";
    // A folder per task content: every task's expert is experts/L3.cu, the owner's replay oracle
    // (EvalConfig::replay_oracle) is the task's own, and a test's altered copy of a task (same id)
    // must not hand its kernels to the real one.
    cfg.build_trusted = [](const tasks::Task& task, const std::filesystem::path& cu) {
      return nvcc_build(cu, std::filesystem::path(D2K_BINARY_DIR) / "test-state" / "runner" / "trusted-so" /
                                (task.id + "-" + task.content_hash.substr(0, 16)));
    };
    cfg.toolchain = "nvcc-test";
    cfg.seeds = 2;
    cfg.timing.time_cap_s = 1.0;
    cfg.call_timeout_s = 8;
    return cfg;
}
}  // namespace

namespace {
// One evaluator per variant, made on its first use: the test config with `tweak` applied.
runner::Evaluator& made_once(std::once_flag& once, std::unique_ptr<runner::Evaluator>& ev,
                             const std::function<void(runner::EvalConfig&)>& tweak) {
  std::call_once(once, [&] {
    runner::EvalConfig cfg = test_config();
    tweak(cfg);
    ev = std::make_unique<runner::Evaluator>(cfg);
  });
  return *ev;
}
}  // namespace

runner::Evaluator& evaluator() {
  static std::once_flag once;
  static std::unique_ptr<runner::Evaluator> ev;
  return made_once(once, ev, [](runner::EvalConfig& cfg) {
    if (const char* e = std::getenv("D2K_GPU_RESIDENT"); e != nullptr) cfg.gpu_resident = std::string(e) == "1";
    if (const char* e = std::getenv("D2K_TRAIN"); e != nullptr) cfg.train = std::string(e) != "0";
    if (const char* e = std::getenv("D2K_TRAINS"); e != nullptr) cfg.train_count = std::clamp(std::atoi(e), 1, 16);
    // D2K_TRAIN_RETRY_BAND=-1: every split train of long calls is disturbed and made again
    // (D2K_TRAIN_RETRIES times, else the default): the whole suite through the retry's path.
    if (const char* e = std::getenv("D2K_TRAIN_RETRY_BAND"); e != nullptr) cfg.train_retry_band = std::atof(e);
    if (const char* e = std::getenv("D2K_TRAIN_RETRIES"); e != nullptr) cfg.train_retries = std::clamp(std::atoi(e), 0, 16);
    std::printf("GPU tests on the %s path, train %s (D2K_TRAIN), %d train(s) per phase (D2K_TRAINS), disturbed trains "
                "made again up to %d times (D2K_TRAIN_RETRIES) beyond a band of %g (D2K_TRAIN_RETRY_BAND)\n",
                cfg.gpu_resident ? "GPU-resident (D2K_GPU_RESIDENT=1)" : "host", cfg.train && cfg.gpu_resident ? "on" : "off",
                cfg.train_count, cfg.train_retries, cfg.train_retry_band);
  });
}

runner::Evaluator& evaluator_host() {
  static std::once_flag once;
  static std::unique_ptr<runner::Evaluator> ev;
  return made_once(once, ev, [](runner::EvalConfig& cfg) {
    cfg.gpu_resident = false;
    cfg.agent_pool_size = 1;
  });
}

runner::Evaluator& evaluator_resident_retrying() {
  static std::once_flag once;
  static std::unique_ptr<runner::Evaluator> ev;
  return made_once(once, ev, [](runner::EvalConfig& cfg) {
    cfg.gpu_resident = true;
    cfg.agent_pool_size = 1;
    cfg.train_retry_band = -1;
    cfg.train_retries = 2;
  });
}

runner::Evaluator& evaluator_resident() {
  static std::once_flag once;
  static std::unique_ptr<runner::Evaluator> ev;
  return made_once(once, ev, [](runner::EvalConfig& cfg) {
    cfg.gpu_resident = true;
    cfg.agent_pool_size = 1;
  });
}

bool have_gpu(const char* test_name) {
  if (evaluator().gpu_count() > 0) return true;
  skip(std::string(test_name) + ": no CUDA GPU on this machine (" + evaluator().probe_error() +
       "); runs in full on the H200 (scripts/gpu-check.sh)");
  return false;
}

const tasks::Task& vector_add() {
  static const tasks::Task t = tasks::load_task(std::filesystem::path(D2K_TASKS_DIR) / "vector_add");
  return t;
}

const tasks::Task& vector_add_small() {
  static const tasks::Task t = [] {
    tasks::Task s = vector_add();
    s.workloads.clear();
    s.workloads.push_back({"odd_1m", true, {{"n", 1000003}}, {}});
    s.workloads.push_back({"odd_49k", false, {{"n", 49153}}, {}});
    s.workloads.push_back({"single", false, {{"n", 1}}, {}});
    return s;
  }();
  return t;
}

}  // namespace d2k::test
