// A step's outcome travels typed from the GPU backend to the reply: `last.error.code` is the
// outcome's wire name (sandbox/outcome.hpp), a backend failure is `internal`. The backend here is
// scripted, so these run without a GPU (the compile is real).
#include <deque>
#include <mutex>
#include <stdexcept>

#include "catch.hpp"
#include "server_fixture.hpp"

using d2k::Client;
using d2k::protocol::Value;
using d2k::sandbox::Outcome;
using d2k::test::TestServer;

namespace {

class ScriptedBackend final : public d2k::env::GpuBackend {
 public:
  std::vector<d2k::env::GpuInfo> gpus() const override { return {{0, "Scripted GPU", 1024}}; }
  d2k::env::EvaluationReport evaluate(const d2k::env::EvaluationJob& job) override {
    std::lock_guard<std::mutex> lock(mu_);
    REQUIRE_FALSE(script_.empty());
    auto next = script_.front();
    script_.pop_front();
    CHECK(std::filesystem::exists(job.kernel_so));
    if (!next) throw std::runtime_error("the backend broke");
    return *next;
  }
  void cancel_all() override {}
  void push(std::optional<d2k::env::EvaluationReport> r) {
    std::lock_guard<std::mutex> lock(mu_);
    script_.push_back(std::move(r));
  }

 private:
  std::mutex mu_;
  std::deque<std::optional<d2k::env::EvaluationReport>> script_;
};

d2k::env::EvaluationReport report(Outcome outcome, std::string message, double reward) {
  d2k::env::EvaluationReport r;
  r.outcome = outcome;
  r.message = std::move(message);
  r.evaluation = {{"status", std::string(d2k::sandbox::to_string(outcome))}, {"message", r.message}};
  r.reward = reward;
  return r;
}

}  // namespace

TEST_CASE("evaluate failures reach last.error.code as the outcome's name", "[server][slow]") {
  auto gpu = std::make_shared<ScriptedBackend>();
  TestServer srv(d2k::test::test_config(), gpu);
  Client c(srv.endpoint);
  const std::string s = c.reset("vector_add", 1, 7)["session"].get<std::string>();
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", d2k::test::kGoodKernel}});

  gpu->push(report(Outcome::incorrect, "outputs differ from the reference on: small", -0.25));
  Value r = c.step(s, {{"type", "evaluate"}});
  CHECK(r["observation"]["last"]["ok"] == false);
  CHECK(r["observation"]["last"]["error"]["code"] == "incorrect");
  CHECK(r["observation"]["last"]["error"]["message"] == "outputs differ from the reference on: small");
  CHECK(r["observation"]["last"]["evaluation"]["status"] == "incorrect");
  CHECK(r["reward"] == -0.25);

  for (Outcome o : {Outcome::runtime_error, Outcome::timeout, Outcome::sandbox_violation, Outcome::flagged}) {
    gpu->push(report(o, "because", -1.0));
    r = c.step(s, {{"type", "evaluate"}});
    CHECK(r["observation"]["last"]["error"]["code"] == std::string(d2k::sandbox::to_string(o)));
  }

  gpu->push(std::nullopt);  // the backend throws: the server's own failure
  r = c.step(s, {{"type", "evaluate"}});
  CHECK(r["observation"]["last"]["ok"] == false);
  CHECK(r["observation"]["last"]["error"]["code"] == "internal");
  CHECK(r["observation"]["last"]["error"]["message"] == "evaluation failed: the backend broke");

  gpu->push(report(Outcome::ok, "", 0.5));
  r = c.step(s, {{"type", "submit"}});
  CHECK(r["observation"]["last"]["ok"] == true);
  CHECK_FALSE(r["observation"]["last"].contains("error"));
  CHECK(r["reward"] == 0.5);
  CHECK(r["terminated"] == true);
}

TEST_CASE("a kernel that does not compile is compile_error for compile and evaluate alike", "[server][slow]") {
  auto gpu = std::make_shared<ScriptedBackend>();
  TestServer srv(d2k::test::test_config(), gpu);
  Client c(srv.endpoint);
  const std::string s = c.reset("vector_add", 1, 7)["session"].get<std::string>();
  c.step(s, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", "this is not CUDA\n"}});
  Value r = c.step(s, {{"type", "compile"}});
  CHECK(r["observation"]["last"]["error"]["code"] == "compile_error");
  CHECK(r["observation"]["last"]["compile"]["ok"] == false);
  r = c.step(s, {{"type", "evaluate"}});  // never reaches the backend (its script is empty)
  CHECK(r["observation"]["last"]["error"]["code"] == "compile_error");
  CHECK(r["observation"]["last"]["error"]["message"] == "the kernel did not compile");
}
