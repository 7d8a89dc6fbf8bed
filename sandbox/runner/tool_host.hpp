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

// argv: the tool's path and arguments (after "--"). Returns the tool's exit status (128 + signal
// when killed), or 70..73 when a step failed (the reason on stderr).
int tool_host_main(int argc, char** argv);

}  // namespace d2k::runner
