// Speed of light and the implementation score of an evaluation (sandbox/tools/speed_of_light.hpp)
// on the model task vector_add.
#include "catch.hpp"
#include "sandbox/tools/disassemble.hpp"
#include "sandbox/tools/gpu_tool.hpp"
#include "sandbox/tools/speed_of_light.hpp"
#include "tasks/loader/task.hpp"

using namespace d2k;
using nlohmann::json;

TEST_CASE("speed of light: achieved bandwidth from task.json's bytes over the median, against the copy bandwidth and the expert", "[tools][sol]") {
  const tasks::Task task = tasks::load_task(std::string(D2K_TASKS_DIR) + "/vector_add");
  tools::SolInputs in;
  in.copy_bytes_per_s = 4.0e12;
  in.copy_source = "measured";
  in.peak = tools::peak_flops_for("NVIDIA H200", task);
  in.expert_layer = 2;
  in.expert_s = {{"pow2_64m", 250e-6}};
  // 12 bytes per element over 2^26 elements in 268.4 µs: 3.0 TB/s.
  const double median = 12.0 * 67108864 / 3.0e12;
  const json s = tools::speed_of_light(task, {{"pow2_64m", median}, {"nonexistent", 1.0}, {"odd_1m", 0}}, in);
  INFO(s.dump(2));
  REQUIRE(s["workloads"].size() == 1);
  const json& w = s["workloads"][0];
  CHECK(w["bytes"] == 12.0 * 67108864);
  CHECK(w["achieved_bytes_per_s"].get<double>() == Approx(3.0e12));
  CHECK(w["bandwidth_fraction"].get<double>() == Approx(0.75));
  CHECK(w["time_vs_expert"].get<double>() == Approx(median / 250e-6));
  CHECK(w["flops_fraction"].get<double>() == Approx(67108864 / median / 66.9e12));
  CHECK(s["nearest_roof"] == "memory");
  CHECK(s["reference"]["peak_source"].get<std::string>().find("fp32") != std::string::npos);
  CHECK(tools::peak_flops_for("Tesla T4", task).flops_per_s == 0);

  in.copy_bytes_per_s = 0;  // unknown: no fraction rather than a made-up one
  const json u = tools::speed_of_light(task, {{"pow2_64m", median}}, in);
  CHECK_FALSE(u["workloads"][0].contains("bandwidth_fraction"));
}

TEST_CASE("implementation score: the active layer's properties held, lacking, undetermined", "[tools][sol]") {
  const json props = {{"coalesced", {{"state", "holds"}, {"layer", 1}}},
                      {"vectorised", {{"state", "fails"}, {"layer", 2}}},
                      {"tma", {{"state", "unchecked"}, {"layer", 2}}},
                      {"persistent", {{"state", "holds"}, {"layer", 3}}}};
  const json l2 = tools::implementation_score(props, 2);
  CHECK(l2["held"] == json::array({"coalesced"}));
  CHECK(l2["lacking"] == json::array({"vectorised"}));
  CHECK(l2["undetermined"] == json::array({"tma"}));
  CHECK(l2["score"].get<double>() == Approx(1.0 / 3));
  CHECK(tools::implementation_score(props, 0)["held"].size() == 2);  // layer 0: every property
  CHECK(tools::implementation_score(json::object(), 1)["score"].is_null());
}

TEST_CASE("the tools' workload choice: profile the largest visible, sanitize the smallest; hidden ones refused", "[tools]") {
  const tasks::Task task = tasks::load_task(std::string(D2K_TASKS_DIR) + "/vector_add");
  CHECK(tools::pick_workload(task, "", tools::GpuToolKind::profile).name == "pow2_64m");
  CHECK(tools::pick_workload(task, "", tools::GpuToolKind::sanitize).name == "odd_1m");
  CHECK(tools::pick_workload(task, "odd_1m", tools::GpuToolKind::profile).name == "odd_1m");
  CHECK_THROWS_WITH(tools::pick_workload(task, "odd_48m", tools::GpuToolKind::profile),
                    Catch::Contains("no visible workload 'odd_48m'"));
}
