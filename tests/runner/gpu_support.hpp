// Shared by the GPU tests: one Evaluator per test binary, the vector_add task (full and trimmed to
// small workloads), a plain-nvcc trusted build, and the no-GPU skip.
#pragma once

#include <filesystem>
#include <string>

#include "sandbox/eval/evaluator.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::test {

// The process-wide evaluator (plain nvcc for trusted builds, state under the build dir), with the
// default EvalConfig::gpu_resident (on); D2K_GPU_RESIDENT=0 in the environment runs every GPU test
// (exploits included) on the host path instead (D2K_GPU_RESIDENT=1: the GPU-resident path).
runner::Evaluator& evaluator();
// Evaluators of the same configuration with gpu_resident on / off (their own runner pools).
runner::Evaluator& evaluator_resident();
// GPU-resident with the train, where every split train of long calls is disturbed
// (EvalConfig::train_retry_band -1) and made again twice (train_retries 2): the retry's machinery
// on every such workload.
runner::Evaluator& evaluator_resident_retrying();
runner::Evaluator& evaluator_host();
// True when a GPU is present; otherwise prints a clear SKIP line naming the test.
bool have_gpu(const char* test_name);
const tasks::Task& vector_add();
// vector_add with small workloads: visible odd_1m (1000003), hidden odd_49k (49153) and single (1).
const tasks::Task& vector_add_small();
// Builds a .cu with the flags the sandboxed compiler uses (no jail: test fixtures only).
std::filesystem::path nvcc_build(const std::filesystem::path& cu, const std::filesystem::path& out_dir);

}  // namespace d2k::test
