#include "sandbox/eval/frames.hpp"

#include <algorithm>

namespace d2k::runner {

using nlohmann::json;

namespace {

// A non-negative integer field, or -1 (absent, wrong type, negative).
long long index_field(const json& j, const char* key) {
  if (!j.contains(key) || !j.at(key).is_number_integer()) return -1;
  const long long v = j.at(key).get<long long>();
  return v < 0 ? -1 : v;
}

}  // namespace

FrameChecker::FrameChecker(const Job& job)
    : seeds_(job.seeds.size()), slots_due_(job.gpu_slots == SlotsRole::owner) {
  // A GPU-resident owner (trusted) never times: its job keeps the candidate's timing spec only so
  // that both ends compute the same slot layout.
  const bool owner = job.gpu_slots == SlotsRole::owner;
  for (std::size_t w = 0; w < job.workloads.size(); ++w)
    workloads_.push_back({!owner && job.timing.enabled && job.workloads[w].time, timed_slots(job, w), job.workloads[w].train,
                          std::max(1, job.workloads[w].trains), job.workloads[w].split});
}

void FrameChecker::next_workload() {
  ++w_;
  s_ = 0;
  phase_ = Phase::calls;
}

bool FrameChecker::train_again() {
  if (trains_done_ < 1 || (phase_ != Phase::train && phase_ != Phase::timing) || w_ >= workloads_.size()) return false;
  --trains_done_;
  phase_ = Phase::train;
  primed_ = false;
  half_ = -1;
  return true;
}

int FrameChecker::announced_samples(std::size_t w) const {
  const auto it = samples_.find(w);
  return it == samples_.end() ? -1 : it->second;
}

std::string FrameChecker::ready(const json& frame) {
  if (index_field(frame, "seq") != 0) return "the ready frame does not carry sequence number 0";
  seq_ = 1;
  return "";
}

std::string FrameChecker::accept(const json& frame) {
  if (result_) return "data after the result";
  if (!frame.is_object() || !frame.contains("event") || !frame.at("event").is_string()) return "a frame without an event";
  const std::string ev = frame.at("event").get<std::string>();
  const long long seq = index_field(frame, "seq");
  if (seq < 0) return "a '" + ev.substr(0, 32) + "' frame without a sequence number";
  if (static_cast<std::uint64_t>(seq) != seq_)
    return "frame '" + ev.substr(0, 32) + "' carries sequence number " + std::to_string(seq) + ", expected " +
           std::to_string(seq_) + (static_cast<std::uint64_t>(seq) < seq_ ? " (a duplicate or replay)" : " (a gap)");
  ++seq_;
  if (ev == "heartbeat") return "";
  if (slots_due_) {  // a GPU-resident owner's first frame after ready: its slots are exported
    if (ev != "slots" && ev != "result") return "frame '" + ev.substr(0, 32) + "' before the owner's slots";
    slots_due_ = false;
    if (ev == "slots") return "";
  }
  if (ev == "result") {
    result_ = true;
    return "";
  }
  const long long w = index_field(frame, "workload");
  if (w_ >= workloads_.size()) return "frame '" + ev.substr(0, 32) + "' after the last workload";
  if (w != static_cast<long long>(w_))
    return "frame '" + ev.substr(0, 32) + "' for workload " + std::to_string(w) + " while workload " +
           std::to_string(w_) + " is due";
  if (ev == "call") {
    const long long s = index_field(frame, "seed");
    if (phase_ != Phase::calls || s != static_cast<long long>(s_))
      return "call frame for seed " + std::to_string(s) + " out of order";
    ++calls_;
    if (++s_ == seeds_) {
      if (workloads_[w_].timed)
        phase_ = Phase::after_calls;
      else
        next_workload();
    }
    return "";
  }
  if (ev == "timing_ready") {
    if (phase_ != Phase::after_calls) return "timing_ready before the workload's calls, twice, or for an untimed workload";
    phase_ = workloads_[w_].train > 0 ? Phase::train : Phase::timing;
    primed_ = false;
    half_ = -1;
    trains_done_ = 0;
    return "";
  }
  if (ev == "primed") {  // the runner's answer to the parent's prime line (the parent checks it asked)
    if (phase_ != Phase::train || primed_) return "primed outside a train's start, or twice";
    primed_ = true;
    return "";
  }
  if (ev == "train_half") {  // a split train's first half ended
    if (phase_ != Phase::train || workloads_[w_].split <= 0 || half_ >= 0)
      return "train_half outside a split train, or twice in one train";
    const long long n = index_field(frame, "calls");
    if (n < 1 || n > workloads_[w_].split) return "train_half without a call count in the first half";
    half_ = static_cast<int>(n);
    return "";
  }
  if (ev == "train_end") {
    if (phase_ != Phase::train) return "train_end without timing_ready, twice, or for a workload without a train";
    const long long n = index_field(frame, "calls");
    if (n < 1 || n > workloads_[w_].train) return "train_end without a call count in the train's room";
    if (workloads_[w_].split > 0 && (half_ < 0 || n <= half_))
      return "a split train's train_end without its train_half, or with no call after it";
    half_ = -1;
    primed_ = false;  // the next train (trains > 1) has its own prime
    if (++trains_done_ >= workloads_[w_].trains) phase_ = Phase::timing;
    return "";
  }
  if (ev == "timing_end") {
    if (phase_ == Phase::train) return "timing_end before the train's train_end";
    if (phase_ != Phase::timing) return "timing_end without timing_ready";
    const long long n = index_field(frame, "samples");
    if (n < 1 || n > workloads_[w_].slots) return "timing_end without a sample count the job allows";
    samples_[w_] = static_cast<int>(n);
    next_workload();
    return "";
  }
  return "unexpected frame '" + ev.substr(0, 32) + "'";
}

}  // namespace d2k::runner
