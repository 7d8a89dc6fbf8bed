// Passing one file descriptor over a unix socket (SCM_RIGHTS): how the GPU-resident evaluation
// (docs/timing-protocol.md, "GPU-resident outputs") hands the trusted runner's exported output
// slots (a CUDA VMM POSIX fd) to the parent, and the parent hands them to the agent runner.
// Legacy cudaIpc* handles do not work across PID namespaces; a VMM fd does.
#pragma once

#include <string>

namespace d2k::runner {

// Sends `fd` with a one-byte payload. Returns "" or why not.
std::string send_fd(int sock, int fd);
// Receives one descriptor (waits at most timeout_ms; -1 forever). Returns the fd (O_CLOEXEC), or
// -1 with `error` set. Any extra descriptors in the message are closed.
int recv_fd(int sock, int timeout_ms, std::string& error);

}  // namespace d2k::runner
