// `d2k-runner --mode tool-host -- TOOL ARGS...`: the host of a GPU tool (ncu, compute-sanitizer)
// that starts a confined agent runner under it (sandbox/tools, issue 20). It enters, while still
// single-threaded, the namespaces the agent runner would enter itself under evaluate: user
// (kInsideUid/kInsideGid mapped to the caller's ids: no privilege beyond the caller's), mount
// (private), network (only loopback, brought up here: the tool's front end and its injection
// library in the runner talk over an abstract unix socket, which is per network namespace) and
// PID (the tool is its init: when it ends, everything under it ends); no_new_privs. The runner
// cannot enter them under the tool: the tool's injection library, preloaded into it, has started
// threads before its main, and unshare(CLONE_NEWUSER) refuses a multi-threaded process (EINVAL;
// the H200, 2026-12-01: exit code 2). CAP_SYS_ADMIN in this user namespace (and no other
// capability) is passed down as an ambient capability, so the runner under the tool (`--isolate
// --keep-net`, confine.hpp adopt_tool_host_namespaces) can mount its masks; it drops it with every
// other capability before agent code loads, as under evaluate.
#pragma once

namespace d2k::runner {

// argv: the tool's path and arguments (after "--"). Returns the tool's exit status (128 + signal
// when killed), or 70..73 when a step failed (the reason on stderr).
int tool_host_main(int argc, char** argv);

}  // namespace d2k::runner
