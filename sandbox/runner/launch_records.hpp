// Kernel launch records for the runner (CUPTI activity API, loaded with dlopen so a machine without
// CUPTI still runs every other job). Used only when a job asks for them (d2k verify-tasks: the
// `resource` design properties of docs/task-format.md need every launch's grid, block, registers,
// shared and local memory).
#pragma once

#include <string>
#include <vector>

#include "sandbox/runner/wire.hpp"

namespace d2k::runner {

class LaunchRecorder {
 public:
  // Loads libcupti and registers the buffer callbacks. False (and `error`) when unavailable.
  bool open(std::string& error);
  // Starts recording kernel launches (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL).
  bool begin(std::string& error);
  // The caller has synchronised the device: flushes, stops recording and returns the launches
  // recorded since begin().
  bool end(std::vector<LaunchRecord>& out, std::string& error);
  // Inside a timed phase (class 13): stop() right after the recorded call only disables recording
  // (no flush inside the parent's window); collect(), once the phase is over and the device
  // synchronised, flushes and returns the launches recorded between begin() and stop().
  bool stop(std::string& error);
  bool collect(std::vector<LaunchRecord>& out, std::string& error);
  bool is_open() const { return open_; }

 private:
  bool take(std::vector<LaunchRecord>& out, std::string& error);  // the records delivered so far
  bool open_ = false;
};

}  // namespace d2k::runner
