// `d2k-runner --mode tool-host -- TOOL ARGS...`: the host of a GPU tool (ncu, compute-sanitizer)
// that starts a confined agent runner under it (sandbox/tools, issue 20). Own user namespace
// (identity-mapped: no privilege beyond the caller's) and own network namespace with only the
// loopback interface up, so the tool's front end and its injection library in the runner can
// talk over 127.0.0.1 while nothing else is reachable; no_new_privs; then exec of the tool. The
// runner under it keeps this network namespace (`--keep-net`) and confines itself as for evaluate.
#pragma once

namespace d2k::runner {

// argv: the tool's path and arguments (after "--"). Returns only on failure (exit status 70..73,
// the reason on stderr).
int tool_host_main(int argc, char** argv);

}  // namespace d2k::runner
