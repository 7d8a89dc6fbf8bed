#include "sandbox/runner/runner_seccomp.hpp"

#include <unistd.h>

#include <stdexcept>
#include <string>

#include "sandbox/seccomp.hpp"

namespace d2k::runner {

void install_agent_filter() {
  // Both profiles are tables in sandbox/seccomp.cpp. The shared `runner` profile first (no exec,
  // threads only, signals to itself only, AF_UNIX only, no kernel-admin calls), then the stricter
  // agent layer stacked on it (the strictest answer wins); both on every thread of the process.
  sandbox::FilterOptions options;
  options.self_pid = getpid();
  options.all_threads = true;
  if (const std::string err = sandbox::load_seccomp(sandbox::SeccompProfile::runner, options); !err.empty())
    throw std::runtime_error("runner seccomp profile: " + err);
  if (const std::string err = sandbox::load_seccomp(sandbox::SeccompProfile::runner_agent_layer, options); !err.empty())
    throw std::runtime_error("runner agent seccomp layer: " + err);
  // Last: the gate (prctl allowlist, no filters of the agent's own); after it no filter can be added.
  if (const std::string err = sandbox::load_seccomp(sandbox::SeccompProfile::runner_agent_gate, options); !err.empty())
    throw std::runtime_error("runner agent seccomp gate: " + err);
}

}  // namespace d2k::runner
