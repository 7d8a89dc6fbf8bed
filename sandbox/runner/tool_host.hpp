// `d2k-runner --mode tool-host -- TOOL ARGS...`: the host of a GPU tool (ncu, compute-sanitizer)
// that starts a confined agent runner under it (sandbox/tools, issue 20). It enters, while still
// single-threaded, the namespaces the agent runner would enter itself under evaluate: user
// (kInsideUid/kInsideGid mapped to the caller's ids: no privilege beyond the caller's), mount
// (private) and network (only loopback, brought up here: the tool's front end and the injection
// library in the runner talk over it, which a network namespace of the runner's own would cut);
// no_new_privs. No PID namespace: CUDA start-up fails in one under both tools (the H200,
// 2026-12-02: cudaErrorOperatingSystem, also with `unshare -p -f ncu` and a plain CUDA program);
// the server kills what is left of the tool's tree by this network namespace instead
// (gpu_tool.cpp). The runner does not enter its namespaces itself under a tool: a preloaded
// injection library may start threads before its main, and unshare(CLONE_NEWUSER) refuses a
// multi-threaded process (EINVAL). CAP_SYS_ADMIN and CAP_SETPCAP of this user namespace (no other
// capability) are passed down as ambient capabilities, so the runner under the tool (`--isolate
// --keep-net`, confine.hpp adopt_tool_host_namespaces) can mount its masks and drop its bounding
// set; it drops them with every other capability before agent code loads, as under evaluate.
#pragma once

namespace d2k::runner {

// Under ncu the runner brackets each call of the agent's entry point in an NVTX push/pop range of
// this name, and ncu profiles only kernels inside it (`--nvtx --nvtx-include "d2k_agent/"`): the
// runner's own kernels (the L2 flush, input generation, poison) stay out of the reply.
inline constexpr const char* kAgentNvtxRange = "d2k_agent";
// The one place the profiled runner may create files: ncu's lock folder. The injection library in
// the runner opens (O_CREAT) <TMPDIR>/nvidia/nsight_compute/lock for every kernel it profiles; the
// agent runner's seccomp layer refuses every O_CREAT and its Landlock view every write, so under
// ncu the profile failed ("Failed to open/create lock file", the H200, 2026-12-02). The server names
// <TMPDIR>/nvidia (an empty folder of the run's own) in this variable; the tool host mounts a tmpfs
// of kToolScratchBytes there (in its private mount namespace, which the front end and the runner
// share); the runner, only under a tool host (--keep-net) and only when that folder is a tmpfs,
// adds it to its Landlock view with create/write/remove rights and drops the seccomp rules against
// creating files, which Landlock then confines to that tmpfs (nowhere else grants them). Agent code
// gets the same: at most kToolScratchBytes of memory in a mount that ends with the run.
inline constexpr const char* kToolScratchEnv = "D2K_TOOL_SCRATCH_DIR";
inline constexpr unsigned long kToolScratchBytes = 1ul << 20;

// argv: the tool's path and arguments (after "--"). Returns the tool's exit status (128 + signal
// when killed), or 70..73 when a step failed (the reason on stderr).
int tool_host_main(int argc, char** argv);

}  // namespace d2k::runner
