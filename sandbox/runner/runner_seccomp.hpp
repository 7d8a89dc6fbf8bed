// The agent-mode runner's seccomp filters, installed in-process after CUDA start-up and before the
// agent's shared object is loaded (a filter installed before cuInit breaks it: GPU-MACHINE.md):
// the sandbox's `runner` profile and the `runner_agent_layer` stacked on it, both tables in
// sandbox/seccomp.cpp. Allow by default (the CUDA driver needs ioctl/mmap freely); deny what an
// honest kernel launcher never needs. Violations that can only be an attack kill the process
// (SIGSYS → the parent reports sandbox_violation); calls that libraries may probe get an errno.
#pragma once

namespace d2k::runner {

// Throws std::runtime_error when a filter cannot be built or loaded. `tool_mode`: under a tool host
// (tool_host.hpp; sandbox/seccomp.hpp FilterOptions::tool_mode): file creation (Landlock confines
// it to the tool's tmpfs) and loopback connections are let through, and what would kill traps
// instead: a SIGSYS handler (installed here) writes "d2k-runner: refused system call N" to stderr
// and makes the call fail with EPERM, so the tool's report names what the sandbox refused.
void install_agent_filter(bool tool_mode = false);

}  // namespace d2k::runner
