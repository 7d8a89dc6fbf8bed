// The tools through a real server (CPU): a scripted GPU backend stands in for the runner, so the
// step pipeline is what is tested: compile first, the GPU queue, the options handed over, the
// result in observation.last, per-tool step costs, budget_exhausted, tool_unavailable, no_gpu.
#include <functional>
#include <mutex>

#include "../env/server_fixture.hpp"
#include "catch.hpp"
#include "protocol/client.hpp"

using namespace d2k;
using nlohmann::json;
using protocol::ErrorCode;

namespace {

class ScriptedTools final : public env::GpuBackend {
 public:
  std::vector<env::GpuInfo> gpus() const override { return {{0, "Scripted GPU", 1024}}; }
  env::EvaluationReport evaluate(const env::EvaluationJob&) override { return {}; }
  void cancel_all() override {}
  env::ToolReport run_tool(const env::ToolJob& job) override {
    std::lock_guard lock(mu);
    jobs.push_back(job);
    env::ToolReport r;
    if (unavailable) {
      r.unavailable = true;
      r.message = "counters restricted";
      return r;
    }
    r.outcome = sandbox::Outcome::ok;
    r.result = {{"workload", job.workload.empty() ? "pow2_64m" : job.workload}, {"kernel_status", "ok"}};
    return r;
  }
  std::mutex mu;
  std::vector<env::ToolJob> jobs;
  bool unavailable = false;
};

const char* kKernel = R"(#include <cstdint>
#include <cuda_runtime.h>
__global__ void add_kernel(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
}
extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
  add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(a, b, y, n);
  return (int)cudaGetLastError();
}
)";

ErrorCode error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ClientError& e) {
    return e.code;
  }
  FAIL("expected an error reply");
  return ErrorCode::internal;
}

}  // namespace

TEST_CASE("profile and sanitize steps: compiled, queued, options handed over, costs counted", "[tools][server]") {
  auto gpu = std::make_shared<ScriptedTools>();
  env::Config config = test::test_config();
  config.tools.profile_steps = 3;
  config.tools.sanitize_steps = 2;
  test::TestServer server(config, gpu);
  Client c(server.endpoint);
  const std::string s = c.reset("vector_add", 1, 7, {{"max_steps", 8}})["session"].get<std::string>();
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", kKernel}});

  json r = c.step(s, {{"type", "profile"}, {"workload", "odd_1m"}, {"sections", {"memory"}}});
  json last = r["observation"]["last"];
  INFO(last.dump(2));
  CHECK(last["action"] == "profile");
  CHECK(last["ok"] == true);
  CHECK(last["compile"]["ok"] == true);
  CHECK(last["profile"]["workload"] == "odd_1m");
  CHECK(r["observation"]["budget"]["steps_used"] == 1 + 3);
  {
    std::lock_guard lock(gpu->mu);
    REQUIRE(gpu->jobs.size() == 1);
    CHECK(gpu->jobs[0].kind == env::ToolJob::Kind::profile);
    CHECK(gpu->jobs[0].sections == std::vector<std::string>{"memory"});
    CHECK(gpu->jobs[0].deadline_s == config.tools.deadline_s);
    CHECK_FALSE(gpu->jobs[0].kernel_so.empty());
  }
  r = c.step(s, {{"type", "sanitize"}, {"tool", "racecheck"}});
  CHECK(r["observation"]["last"]["sanitize"]["kernel_status"] == "ok");
  CHECK(r["observation"]["budget"]["steps_used"] == 4 + 2);
  {
    std::lock_guard lock(gpu->mu);
    CHECK(gpu->jobs.back().sanitizer_tool == "racecheck");
  }
  // 2 steps left: a profile (3) does not fit; it is a failed step of its own (1 step), nothing queued.
  r = c.step(s, {{"type", "profile"}});
  CHECK(r["observation"]["last"]["error"]["code"] == "budget_exhausted");
  {
    std::lock_guard lock(gpu->mu);
    CHECK(gpu->jobs.size() == 2);
  }
  CHECK(r["observation"]["budget"]["steps_used"] == 7);
  // A tool that cannot run here: typed in the step, not an error reply.
  gpu->unavailable = true;
  const std::string s2 = c.reset("vector_add", 1, 7)["session"].get<std::string>();
  r = c.step(s2, {{"type", "sanitize"}});
  last = r["observation"]["last"];
  CHECK(last["ok"] == false);
  CHECK(last["error"]["code"] == "tool_unavailable");
  CHECK(last["error"]["message"] == "counters restricted");
}

TEST_CASE("tools without a GPU: profile and sanitize are no_gpu, disassemble runs; a broken kernel is compile_error", "[tools][server]") {
  test::TestServer server;
  Client c(server.endpoint);
  const std::string s = c.reset("vector_add", 1, 7)["session"].get<std::string>();
  CHECK(error_of([&] { c.step(s, {{"type", "profile"}}); }) == ErrorCode::no_gpu);
  CHECK(error_of([&] { c.step(s, {{"type", "sanitize"}}); }) == ErrorCode::no_gpu);
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", "this does not compile"}});
  json r = c.step(s, {{"type", "disassemble"}});
  CHECK(r["observation"]["last"]["error"]["code"] == "compile_error");
  CHECK(r["observation"]["last"]["compile"]["ok"] == false);
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", kKernel}});
  r = c.step(s, {{"type", "disassemble"}, {"kernel", "add_kernel"}});
  const json last = r["observation"]["last"];
  INFO(last.dump(2));
  CHECK(last["ok"] == true);
  CHECK(last["disassembly"]["filter"] == "add_kernel");
}
