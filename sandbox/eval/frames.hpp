// The parent's check of a runner's frames (issue 23, class 4). Agent code shares the runner's
// address space and can write well-formed frames on the result pipe; the parent therefore accepts
// only the one sequence the protocol allows: every frame carries the next sequence number
// ("seq", 0 for "ready"), and each event must be the one the job makes due next. Anything else
// (a duplicate, a gap, a frame out of order, an event the job does not call for, data after the
// result) ends the evaluation as `flagged`.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "sandbox/runner/wire.hpp"

namespace d2k::runner {

class FrameChecker {
 public:
  explicit FrameChecker(const Job& job);

  // The "ready" frame (sent before the job): "" when it is frame 0, else why not.
  std::string ready(const nlohmann::json& frame);
  // Every later frame, in arrival order: "" when it is the frame due next, else why not.
  std::string accept(const nlohmann::json& frame);

  // The parent discarded the train whose train_end it just accepted (EvalConfig::train_retries):
  // one more train of this workload is due (its prime, train_half and train_end), the same room.
  // False (nothing changes) when no train_end of the current workload's phase was accepted.
  bool train_again();
  bool result_seen() const { return result_; }
  // Every call and timing frame of the job arrived (what an `ok` result must follow).
  bool all_done() const { return w_ >= workloads_.size(); }
  std::size_t calls() const { return calls_; }
  // The sample count the runner announced in workload w's "timing_end" (-1: none).
  int announced_samples(std::size_t w) const;

 private:
  enum class Phase { calls, after_calls, train, timing };
  void next_workload();
  struct Wl {
    bool timed = false;
    int slots = 0;  // most samples a timing_end may announce (every one is handed over)
    int train = 0;  // the train's calls: a train_end with this count is due before timing_end
    int trains = 1;  // that many train_end frames (each after its own optional "primed")
    int split = 0;   // > 0: each train's "train_half" (1..split calls) is due before its train_end
  };
  std::vector<Wl> workloads_;
  std::size_t seeds_ = 0;
  bool slots_due_ = false;      // a GPU-resident owner: "slots" is due before any call
  std::uint64_t seq_ = 0;       // the number the next frame must carry
  std::size_t w_ = 0, s_ = 0;   // the next call due: workload, seed index
  Phase phase_ = Phase::calls;
  std::size_t calls_ = 0;
  bool result_ = false;
  bool primed_ = false;  // this train's "primed" arrived (at most one, before train_end)
  int half_ = -1;        // this train's "train_half" count (-1: not yet)
  int trains_done_ = 0;  // train_end frames of this workload's phase so far
  std::map<std::size_t, int> samples_;
};

}  // namespace d2k::runner
