// Reward formulas against numbers worked out by hand (the arithmetic is in the comments).
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "catch.hpp"
#include "env/reward.hpp"

using d2k::env::compute_reward;
using d2k::env::geometric_mean;
using d2k::env::RewardConfig;
using d2k::env::RewardInputs;
using d2k::sandbox::Outcome;
using nlohmann::json;

namespace {

constexpr double kEps = 1e-12;

#define CHECK_NEAR(actual, expected) \
  CHECK_THAT((actual), Catch::Matchers::WithinAbs((expected), kEps))

RewardInputs ok_inputs(std::vector<double> agent, std::vector<double> expert,
                       std::vector<double> baseline, int layer = 1) {
  RewardInputs in;
  in.status = Outcome::ok;
  in.compiled = true;
  in.agent_us = std::move(agent);
  in.expert_us = std::move(expert);
  in.baseline_us = std::move(baseline);
  in.layer = layer;
  return in;
}

// By wire name, so each case reads as the status the reply carries.
RewardInputs failed(std::string_view status, bool compiled = true) {
  RewardInputs in;
  in.status = d2k::sandbox::outcome_from_string(status).value();
  in.compiled = compiled;
  in.layer = 2;
  return in;
}

RewardConfig preset(const std::string& name) {
  RewardConfig c;
  c.preset = name;
  return c;
}

// The message of the std::invalid_argument that fn throws; fails the test if it throws nothing.
template <typename Fn>
std::string invalid_argument_message(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("expected std::invalid_argument");
  return {};
}

}  // namespace

TEST_CASE("geometric_mean", "[reward]") {
  CHECK_NEAR(geometric_mean({2.0, 8.0}), 4.0);           // sqrt(16)
  CHECK_NEAR(geometric_mean({1.0, 10.0, 100.0}), 10.0);  // cbrt(1000)
  CHECK_NEAR(geometric_mean({5.0}), 5.0);
  CHECK_THROWS_AS(geometric_mean({}), std::invalid_argument);
  CHECK_THROWS_AS(geometric_mean({1.0, 0.0}), std::invalid_argument);
  CHECK_THROWS_AS(geometric_mean({1.0, -2.0}), std::invalid_argument);
  CHECK_THROWS_AS(geometric_mean({1.0, std::nan("")}), std::invalid_argument);
  CHECK_THROWS_AS(geometric_mean({1.0, std::numeric_limits<double>::infinity()}),
                  std::invalid_argument);
}

TEST_CASE("d2k: parity with the expert gives score 1 and the correctness bonus alone", "[reward]") {
  // t = gm(10, 40) = 20 = t_k; t_base = gm(40, 160) = 80.
  const auto in = ok_inputs({10, 40}, {10, 40}, {40, 160});
  for (const char* transform : {"log", "linear"}) {
    RewardConfig c;
    c.transform = transform;
    const auto r = compute_reward(in, c);
    INFO(transform);
    CHECK_NEAR(r.reward, 0.3);  // 0.3 + 1.0 * transform(1) = 0.3 + 0
    const json& b = r.breakdown;
    CHECK(b["preset"] == "d2k");
    CHECK(b["status"] == "ok");
    CHECK(b["correct"] == true);
    CHECK_NEAR(b["score"].get<double>(), 1.0);
    CHECK_NEAR(b["speedup_vs_baseline"].get<double>(), 4.0);  // 80 / 20
    CHECK_NEAR(b["fraction_of_expert"].get<double>(), 1.0);   // ln(80/20) / ln(80/20)
    CHECK_NEAR(b["t_agent_us"].get<double>(), 20.0);
    CHECK_NEAR(b["t_expert_us"].get<double>(), 20.0);
    CHECK_NEAR(b["t_baseline_us"].get<double>(), 80.0);
    CHECK_NEAR(b["terms"]["correct"].get<double>(), 0.3);
    CHECK_NEAR(b["terms"]["speed"].get<double>(), 0.0);
    CHECK(b["terms"]["clipped"] == false);
    REQUIRE(b["per_workload"].size() == 2);
    CHECK(b["per_workload"][1] == json({{"agent_us", 40.0}, {"expert_us", 40.0},
                                        {"baseline_us", 160.0}}));
  }
}

TEST_CASE("d2k log transform", "[reward]") {
  const RewardConfig c;  // log, bonus 0.3, weight 1, clip [-1, 2]
  // Twice as slow as the expert: score = 10/20 = 0.5, log2 0.5 = -1 -> 0.3 - 1 = -0.7.
  auto r = compute_reward(ok_inputs({20}, {10}, {80}), c);
  CHECK_NEAR(r.reward, -0.7);
  CHECK_NEAR(r.breakdown["score"].get<double>(), 0.5);
  CHECK_NEAR(r.breakdown["speedup_vs_baseline"].get<double>(), 4.0);  // 80/20
  // ln(80/20) / ln(80/10) = ln 4 / ln 8 = 2/3 of the way from the baseline to the expert.
  CHECK_NEAR(r.breakdown["fraction_of_expert"].get<double>(), 2.0 / 3.0);

  // Twice as fast as the expert: score 2, log2 2 = 1 -> 0.3 + 1 = 1.3.
  r = compute_reward(ok_inputs({5}, {10}, {80}), c);
  CHECK_NEAR(r.reward, 1.3);
  CHECK_NEAR(r.breakdown["terms"]["speed"].get<double>(), 1.0);
}

TEST_CASE("d2k clipping", "[reward]") {
  const RewardConfig c;
  // score = 10/0.5 = 20, log2 20 = 4.32 -> clipped to 2 -> 0.3 + 2 = 2.3.
  auto r = compute_reward(ok_inputs({0.5}, {10}, {80}), c);
  CHECK_NEAR(r.reward, 2.3);
  CHECK(r.breakdown["terms"]["clipped"] == true);
  CHECK_NEAR(r.breakdown["terms"]["transformed_score"].get<double>(), std::log2(20.0));
  // score = 10/100 = 0.1, log2 0.1 = -3.32 -> clipped to -1 -> 0.3 - 1 = -0.7.
  r = compute_reward(ok_inputs({100}, {10}, {80}), c);
  CHECK_NEAR(r.reward, -0.7);
  CHECK(r.breakdown["terms"]["clipped"] == true);

  RewardConfig lin;
  lin.transform = "linear";
  // score 20 -> 20 - 1 = 19 -> clipped to 2 -> 2.3.
  CHECK_NEAR(compute_reward(ok_inputs({0.5}, {10}, {80}), lin).reward, 2.3);
  // Custom bounds: clip [0, 0.5], score 2 -> log2 2 = 1 -> 0.5 -> 0.3 + 0.5 = 0.8.
  RewardConfig tight;
  tight.clip_min = 0.0;
  tight.clip_max = 0.5;
  CHECK_NEAR(compute_reward(ok_inputs({5}, {10}, {80}), tight).reward, 0.8);
  // score 0.5 -> log2 = -1 -> clipped up to 0 -> 0.3.
  CHECK_NEAR(compute_reward(ok_inputs({20}, {10}, {80}), tight).reward, 0.3);
}

TEST_CASE("d2k linear transform and weights", "[reward]") {
  RewardConfig c;
  c.transform = "linear";
  // score = 10/8 = 1.25 -> 1.25 - 1 = 0.25 -> 0.3 + 0.25 = 0.55.
  CHECK_NEAR(compute_reward(ok_inputs({8}, {10}, {80}), c).reward, 0.55);
  c.speed_weight = 2.0;
  c.correct_bonus = 0.1;
  // 0.1 + 2 * 0.25 = 0.6.
  CHECK_NEAR(compute_reward(ok_inputs({8}, {10}, {80}), c).reward, 0.6);
  // score 0.8 (10/12.5) -> -0.2 -> 0.1 + 2 * -0.2 = -0.3.
  CHECK_NEAR(compute_reward(ok_inputs({12.5}, {10}, {80}), c).reward, -0.3);
}

TEST_CASE("times are combined by geometric mean over workloads", "[reward]") {
  const RewardConfig c;
  // t = gm(10, 40) = 20, t_k = gm(10, 10) = 10, t_base = gm(40, 40) = 40.
  // score = 10/20 = 0.5 -> 0.3 - 1 = -0.7. (The arithmetic mean of per-workload scores,
  // (1 + 0.25)/2 = 0.625, would give 0.3 + log2 0.625 = -0.378.)
  const auto r = compute_reward(ok_inputs({10, 40}, {10, 10}, {40, 40}), c);
  CHECK_NEAR(r.breakdown["t_agent_us"].get<double>(), 20.0);
  CHECK_NEAR(r.breakdown["score"].get<double>(), 0.5);
  CHECK_NEAR(r.breakdown["speedup_vs_baseline"].get<double>(), 2.0);
  CHECK_NEAR(r.reward, -0.7);
  // Three workloads: t = gm(1, 10, 100) = 10, t_k = gm(2, 2, 2) = 2 -> score 0.2,
  // log2 0.2 = -2.32 -> clipped to -1 -> -0.7; speedup = gm(10,100,1000)/10 = 100/10 = 10.
  const auto r3 = compute_reward(ok_inputs({1, 10, 100}, {2, 2, 2}, {10, 100, 1000}), c);
  CHECK_NEAR(r3.breakdown["t_agent_us"].get<double>(), 10.0);
  CHECK_NEAR(r3.breakdown["speedup_vs_baseline"].get<double>(), 10.0);
  CHECK_NEAR(r3.reward, -0.7);
}

TEST_CASE("d2k failures get their configured constants", "[reward]") {
  const RewardConfig c;
  CHECK_NEAR(compute_reward(failed("compile_error", false), c).reward, -0.1);
  CHECK_NEAR(compute_reward(failed("incorrect"), c).reward, 0.0);
  CHECK_NEAR(compute_reward(failed("runtime_error"), c).reward, -0.1);
  CHECK_NEAR(compute_reward(failed("timeout"), c).reward, -0.1);
  CHECK_NEAR(compute_reward(failed("sandbox_violation"), c).reward, -1.0);
  CHECK_NEAR(compute_reward(failed("flagged"), c).reward, -1.0);

  const auto custom = RewardConfig::from_json({{"compile_error", -0.2},
                                               {"incorrect", -0.05},
                                               {"runtime_error", -0.3},
                                               {"timeout", -0.4},
                                               {"sandbox_violation", -2.0},
                                               {"flagged", -3.0}});
  CHECK_NEAR(compute_reward(failed("compile_error", false), custom).reward, -0.2);
  CHECK_NEAR(compute_reward(failed("incorrect"), custom).reward, -0.05);
  CHECK_NEAR(compute_reward(failed("runtime_error"), custom).reward, -0.3);
  CHECK_NEAR(compute_reward(failed("timeout"), custom).reward, -0.4);
  CHECK_NEAR(compute_reward(failed("sandbox_violation"), custom).reward, -2.0);
  CHECK_NEAR(compute_reward(failed("flagged"), custom).reward, -3.0);

  // A failure without times has null time fields and no workloads.
  const auto r = compute_reward(failed("incorrect"), c);
  CHECK(r.breakdown["correct"] == false);
  CHECK(r.breakdown["score"].is_null());
  CHECK(r.breakdown["speedup_vs_baseline"].is_null());
  CHECK(r.breakdown["t_agent_us"].is_null());
  CHECK(r.breakdown["per_workload"] == json::array());
  CHECK_NEAR(r.breakdown["terms"]["failure"].get<double>(), 0.0);

  // A flagged kernel earns the flag's constant however fast it claims to be.
  auto fast_but_flagged = ok_inputs({0.001}, {10}, {80});
  fast_but_flagged.status = Outcome::flagged;
  const auto f = compute_reward(fast_but_flagged, c);
  CHECK_NEAR(f.reward, -1.0);
  CHECK_NEAR(f.breakdown["score"].get<double>(), 10000.0);  // reported, not rewarded
}

TEST_CASE("kevin preset: 0.3*1{correct} + speedup*1{correct}", "[reward]") {
  const auto c = preset("kevin");
  // speedup = t_base/t = 100/25 = 4 -> 0.3 + 4 = 4.3 (unclipped, as published).
  auto r = compute_reward(ok_inputs({25}, {10}, {100}), c);
  CHECK_NEAR(r.reward, 4.3);
  CHECK_NEAR(r.breakdown["terms"]["correct"].get<double>(), 0.3);
  CHECK_NEAR(r.breakdown["terms"]["speedup"].get<double>(), 4.0);
  CHECK_NEAR(r.breakdown["score"].get<double>(), 0.4);  // t_k/t = 10/25, reported beside
  // Slower than the baseline: 100/200 = 0.5 -> 0.3 + 0.5 = 0.8.
  CHECK_NEAR(compute_reward(ok_inputs({200}, {10}, {100}), c).reward, 0.8);
  // Two workloads: speedup = gm(100, 400)/gm(50, 50) = 200/50 = 4 -> 4.3.
  CHECK_NEAR(compute_reward(ok_inputs({50, 50}, {10, 10}, {100, 400}), c).reward, 4.3);
  // Not correct -> 0 for every evaluation failure.
  for (const char* s : {"compile_error", "incorrect", "runtime_error", "timeout"}) {
    INFO(s);
    CHECK_NEAR(compute_reward(failed(s), c).reward, 0.0);
  }
  // The sandbox and anti-cheat verdicts take the config's constants.
  CHECK_NEAR(compute_reward(failed("sandbox_violation"), c).reward, -1.0);
  CHECK_NEAR(compute_reward(failed("flagged"),
                            RewardConfig::from_json({{"preset", "kevin"}, {"flagged", 0.0}}))
                 .reward,
             0.0);
}

TEST_CASE("kernelgym preset: 0.5*correct + 0.5*min(speedup, 3)", "[reward]") {
  const auto c = preset("kernelgym");
  // speedup 100/50 = 2 -> 0.5 + 0.5*2 = 1.5.
  auto r = compute_reward(ok_inputs({50}, {10}, {100}), c);
  CHECK_NEAR(r.reward, 1.5);
  CHECK_NEAR(r.breakdown["terms"]["correct"].get<double>(), 0.5);
  CHECK_NEAR(r.breakdown["terms"]["performance"].get<double>(), 1.0);
  // speedup 100/20 = 5 -> clipped to 3 -> 0.5 + 1.5 = 2.0.
  CHECK_NEAR(compute_reward(ok_inputs({20}, {10}, {100}), c).reward, 2.0);
  // speedup 100/200 = 0.5 -> 0.5 + 0.25 = 0.75.
  CHECK_NEAR(compute_reward(ok_inputs({200}, {10}, {100}), c).reward, 0.75);
  for (const char* s : {"compile_error", "incorrect", "runtime_error", "timeout"}) {
    INFO(s);
    CHECK_NEAR(compute_reward(failed(s), c).reward, 0.0);  // penalty_score
  }
  CHECK_NEAR(compute_reward(failed("flagged"), c).reward, -1.0);
}

TEST_CASE("kernrl preset: min(speedup-1, 2) when faster, (speedup-1)/2 when slower", "[reward]") {
  const auto c = preset("kernrl");
  // 100/80 = 1.25 -> 0.25.
  CHECK_NEAR(compute_reward(ok_inputs({80}, {10}, {100}), c).reward, 0.25);
  // 100/25 = 4 -> min(3, 2) = 2.
  CHECK_NEAR(compute_reward(ok_inputs({25}, {10}, {100}), c).reward, 2.0);
  // 100/125 = 0.8 -> (0.8 - 1) * 0.5 = -0.1.
  const auto slow = compute_reward(ok_inputs({125}, {10}, {100}), c);
  CHECK_NEAR(slow.reward, -0.1);
  CHECK_NEAR(slow.breakdown["terms"]["speed"].get<double>(), -0.1);
  // Parity with the baseline earns nothing: correctness alone is not rewarded.
  CHECK_NEAR(compute_reward(ok_inputs({100}, {10}, {100}), c).reward, 0.0);
  CHECK_NEAR(compute_reward(failed("compile_error", false), c).reward, -0.5);
  for (const char* s : {"incorrect", "runtime_error", "timeout"}) {
    INFO(s);
    CHECK_NEAR(compute_reward(failed(s), c).reward, -0.25);
  }
  CHECK_NEAR(compute_reward(failed("sandbox_violation"), c).reward, -1.0);
}

TEST_CASE("layer is recorded, with the L3 expert as the target at L0", "[reward]") {
  const RewardConfig c;
  CHECK(compute_reward(ok_inputs({10}, {10}, {40}, 0), c).breakdown["expert_layer"] == 3);
  CHECK(compute_reward(ok_inputs({10}, {10}, {40}, 2), c).breakdown["expert_layer"] == 2);
  CHECK(compute_reward(ok_inputs({10}, {10}, {40}, 0), c).breakdown["layer"] == 0);
  // The expert no faster than the baseline: fraction_of_expert is undefined.
  CHECK(compute_reward(ok_inputs({10}, {40}, {40}), c).breakdown["fraction_of_expert"].is_null());
}

TEST_CASE("invalid inputs throw std::invalid_argument", "[reward]") {
  const RewardConfig c;
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(compute_reward(ok_inputs({}, {10}, {40}), c), std::invalid_argument);
  CHECK_THROWS_AS(compute_reward(ok_inputs({10}, {}, {40}), c), std::invalid_argument);
  CHECK_THROWS_AS(compute_reward(ok_inputs({10}, {10}, {}), c), std::invalid_argument);
  CHECK_THROWS_AS(compute_reward(ok_inputs({10, 20}, {10}, {40}), c), std::invalid_argument);
  CHECK_THROWS_AS(compute_reward(ok_inputs({nan}, {10}, {40}), c), std::invalid_argument);
  CHECK_THROWS_AS(compute_reward(ok_inputs({10}, {inf}, {40}), c), std::invalid_argument);
  CHECK_THROWS_AS(compute_reward(ok_inputs({0}, {10}, {40}), c), std::invalid_argument);
  CHECK_THROWS_AS(compute_reward(ok_inputs({10}, {10}, {-40}), c), std::invalid_argument);
  const auto msg =
      invalid_argument_message([&] { compute_reward(ok_inputs({10, 20}, {10}, {40}), c); });
  CHECK(msg.find("sizes 2, 1, 1") != std::string::npos);

  auto not_compiled = ok_inputs({10}, {10}, {40});
  not_compiled.compiled = false;
  CHECK_THROWS_AS(compute_reward(not_compiled, c), std::invalid_argument);

  auto unknown = ok_inputs({10}, {10}, {40});
  unknown.status = Outcome::internal_error;  // the evaluator's own failure is no reward status
  CHECK(invalid_argument_message([&] { compute_reward(unknown, c); }).find("internal_error") !=
        std::string::npos);
  for (Outcome runner_only : {Outcome::no_gpu, Outcome::bad_request, Outcome::entry_error, Outcome::load_error,
                              Outcome::setup_error, Outcome::bad_job}) {
    unknown.status = runner_only;
    CHECK_THROWS_AS(compute_reward(unknown, c), std::invalid_argument);
  }

  CHECK_THROWS_AS(compute_reward(ok_inputs({10}, {10}, {40}, 4), c), std::invalid_argument);
  CHECK_THROWS_AS(compute_reward(ok_inputs({10}, {10}, {40}, -1), c), std::invalid_argument);
  CHECK_THROWS_AS(compute_reward(ok_inputs({10}, {10}, {40}), preset("fast")),
                  std::invalid_argument);

  // Failures do not need times, and bad times on a failure do not throw.
  auto failed_with_nan = failed("runtime_error");
  failed_with_nan.agent_us = {nan};
  failed_with_nan.expert_us = {10};
  failed_with_nan.baseline_us = {40};
  CHECK_NEAR(compute_reward(failed_with_nan, c).reward, -0.1);
}

TEST_CASE("RewardConfig JSON round trip", "[reward]") {
  const RewardConfig defaults;
  CHECK(defaults.to_json() == json({{"preset", "d2k"},
                                    {"transform", "log"},
                                    {"correct_bonus", 0.3},
                                    {"speed_weight", 1.0},
                                    {"clip_min", -1.0},
                                    {"clip_max", 2.0},
                                    {"compile_error", -0.1},
                                    {"incorrect", 0.0},
                                    {"runtime_error", -0.1},
                                    {"timeout", -0.1},
                                    {"sandbox_violation", -1.0},
                                    {"flagged", -1.0}}));
  CHECK(RewardConfig::from_json(json::object()).to_json() == defaults.to_json());

  RewardConfig c;
  c.transform = "linear";
  c.correct_bonus = 0.2;
  c.speed_weight = 1.5;
  c.clip_min = -0.5;
  c.clip_max = 3.0;
  c.compile_error = -0.25;
  c.incorrect = -0.05;
  c.runtime_error = -0.2;
  c.timeout = -0.3;
  c.sandbox_violation = -2.0;
  c.flagged = -4.0;
  const auto back = RewardConfig::from_json(c.to_json());
  CHECK(back.to_json() == c.to_json());
  CHECK(back.transform == "linear");
  CHECK(back.clip_max == 3.0);
  CHECK(back.flagged == -4.0);

  for (const char* name : {"kevin", "kernelgym", "kernrl"}) {
    INFO(name);
    RewardConfig p = preset(name);
    p.flagged = 0.0;
    const json j = p.to_json();
    CHECK(j == json({{"preset", name}, {"sandbox_violation", -1.0}, {"flagged", 0.0}}));
    const auto q = RewardConfig::from_json(j);
    CHECK(q.preset == name);
    CHECK(q.flagged == 0.0);
    CHECK(q.to_json() == j);
  }
  // Integers are numbers too.
  CHECK(RewardConfig::from_json({{"clip_max", 3}}).clip_max == 3.0);
}

TEST_CASE("RewardConfig::from_json errors name the key", "[reward]") {
  auto message_for = [](const json& j) {
    return invalid_argument_message([&] { RewardConfig::from_json(j); });
  };
  auto mentions = [](const std::string& msg, const std::string& what) {
    INFO(msg);
    return msg.find(what) != std::string::npos;
  };
  CHECK(mentions(message_for({{"bogus", 1}}), "bogus"));
  CHECK(mentions(message_for({{"preset", "fast"}}), "preset"));
  CHECK(mentions(message_for({{"preset", 3}}), "preset"));
  CHECK(mentions(message_for({{"transform", "sqrt"}}), "transform"));
  CHECK(mentions(message_for({{"transform", 1}}), "transform"));
  CHECK(mentions(message_for({{"correct_bonus", "high"}}), "correct_bonus"));
  CHECK(mentions(message_for({{"flagged", nullptr}}), "flagged"));
  CHECK(mentions(message_for({{"clip_min", 3.0}, {"clip_max", 2.0}}), "clip_min"));
  CHECK(mentions(message_for({{"speed_weight", std::nan("")}}), "speed_weight"));
  // A d2k-only key under an anchor preset would silently do nothing, so it is refused.
  CHECK(mentions(message_for({{"preset", "kevin"}, {"correct_bonus", 0.5}}), "correct_bonus"));
  CHECK(mentions(message_for({{"preset", "kernrl"}, {"compile_error", -1}}), "compile_error"));
  CHECK_THROWS_AS(RewardConfig::from_json(json::array()), std::invalid_argument);
  CHECK_THROWS_AS(RewardConfig::from_json(json("d2k")), std::invalid_argument);
}
