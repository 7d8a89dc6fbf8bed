// The one vocabulary of outcomes: what a compile, a runner and an evaluation can end in. Every
// room carries the enum; strings exist only at the edges (the runner's wire, the evaluation JSON,
// the step reply's `last.error.code`), and they are the names in kOutcomeNames below.
// Header-only, so the runner binary, the evaluator and the server share it without a library.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

namespace d2k::sandbox {

enum class Outcome : std::uint8_t {
  // A step's outcome (the reward's failure kinds; PROTOCOL.md sections 8 and 9).
  ok,
  compile_error,      // the compiler reported errors (the compiler's, before any evaluation)
  incorrect,          // outputs differ from the reference
  runtime_error,      // the kernel failed while running (a CUDA error, a bad return, a crash)
  timeout,            // the compile or the evaluation ran past its deadline
  sandbox_violation,  // the jail or the seccomp filter stopped the compiler or the kernel
  flagged,            // an anti-cheat check refused the result
  // The evaluator's verdicts that are not the kernel's fault (the reply says runtime_error and
  // keeps the verdict in `evaluation.evaluator_status`).
  no_gpu,
  bad_request,
  internal_error,
  // The runner's finer kinds on its wire; the evaluator folds them into the ones above
  // (entry_error, load_error → runtime_error; setup_error, bad_job → internal_error).
  entry_error,  // the entry point returned non-zero
  load_error,   // the kernel's shared object did not load or lacks the entry symbol
  setup_error,  // the runner could not set itself up (CUDA init, files, namespaces)
  bad_job,      // the runner's job was malformed
};

inline constexpr std::array<std::pair<Outcome, std::string_view>, 14> kOutcomeNames{{
    {Outcome::ok, "ok"},
    {Outcome::compile_error, "compile_error"},
    {Outcome::incorrect, "incorrect"},
    {Outcome::runtime_error, "runtime_error"},
    {Outcome::timeout, "timeout"},
    {Outcome::sandbox_violation, "sandbox_violation"},
    {Outcome::flagged, "flagged"},
    {Outcome::no_gpu, "no_gpu"},
    {Outcome::bad_request, "bad_request"},
    {Outcome::internal_error, "internal_error"},
    {Outcome::entry_error, "entry_error"},
    {Outcome::load_error, "load_error"},
    {Outcome::setup_error, "setup_error"},
    {Outcome::bad_job, "bad_job"},
}};

constexpr std::string_view to_string(Outcome o) {
  for (const auto& [value, name] : kOutcomeNames)
    if (value == o) return name;
  return "internal_error";  // unreachable: every enumerator is in the table (outcome_test checks)
}

constexpr std::optional<Outcome> outcome_from_string(std::string_view name) {
  for (const auto& [value, name_of] : kOutcomeNames)
    if (name_of == name) return value;
  return std::nullopt;
}

// The outcomes a step can report (the reward's statuses and `last.evaluation.status`).
constexpr bool is_step_outcome(Outcome o) { return o <= Outcome::flagged; }

// What the evaluator makes of a runner's own failure kind.
constexpr Outcome evaluator_outcome_of_runner(Outcome runner) {
  switch (runner) {
    case Outcome::entry_error:
    case Outcome::load_error: return Outcome::runtime_error;
    case Outcome::setup_error:
    case Outcome::bad_job: return Outcome::internal_error;
    default: return runner;
  }
}

// What a step reports for an evaluator verdict: the evaluator's own failures (no_gpu,
// bad_request, internal_error) reach the agent as runtime_error.
constexpr Outcome step_outcome_of_evaluation(Outcome evaluation) {
  return is_step_outcome(evaluation) ? evaluation : Outcome::runtime_error;
}

}  // namespace d2k::sandbox
