// `d2k-runner --mode tool-host -- TOOL ARGS...`: the host of a GPU tool (ncu, compute-sanitizer)
// that starts a confined agent runner under it (sandbox/tools, issue 20). Own user namespace
// (identity-mapped: no privilege beyond the caller's), own network namespace with only the
// loopback interface up (the tool's front end and its injection library in the runner talk over
// 127.0.0.1; nothing else is reachable), own PID namespace whose init is the tool (when it ends,
// everything under it ends); no_new_privs. The runner under the tool keeps this network namespace
// (`--keep-net`) and takes every other confinement step as for evaluate.
#pragma once

namespace d2k::runner {

// argv: the tool's path and arguments (after "--"). Returns the tool's exit status (128 + signal
// when killed), or 70..73 when a step failed (the reason on stderr).
int tool_host_main(int argc, char** argv);

}  // namespace d2k::runner
