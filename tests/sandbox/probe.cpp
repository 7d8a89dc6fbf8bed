// d2k_sandbox_probe: runs inside a jail and tries one thing the sandbox must stop (or, for the
// process tests, reports what it was given: fds, argv, env).
// Prints what happened and exits 0 when the attempt was refused as expected, 1 when it was not.
// (Being killed by the filter is the third outcome; the test reads it from the JailOutcome.)
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "sandbox/seccomp.hpp"

namespace {

int report(bool refused, const std::string& what) {
  std::printf("%s: %s\n", refused ? "refused" : "allowed", what.c_str());
  std::fflush(stdout);
  return refused ? 0 : 1;
}

std::string err(int e) { return std::string("errno=") + std::to_string(e) + " (" + strerror(e) + ")"; }

void runner_profile() {
  std::string why = d2k::sandbox::load_seccomp(d2k::sandbox::SeccompProfile::runner, {getpid(), true});
  if (!why.empty()) {
    std::printf("cannot load runner profile: %s\n", why.c_str());
    std::exit(3);
  }
}

// The agent-mode runner's filters: the runner profile, then the agent layer stacked on it.
void agent_filters() {
  runner_profile();
  std::string why = d2k::sandbox::load_seccomp(d2k::sandbox::SeccompProfile::runner_agent_layer, {getpid(), true});
  if (!why.empty()) {
    std::printf("cannot load the agent layer: %s\n", why.c_str());
    std::exit(3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string what = argv[1];
  if (what == "socket_inet") {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    return report(fd < 0, "socket(AF_INET) " + (fd < 0 ? err(errno) : "fd"));
  }
  if (what == "socket_unix") {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    return report(fd < 0, "socket(AF_UNIX) " + (fd < 0 ? err(errno) : "fd"));
  }
  if (what == "ptrace") {
    long r = ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
    return report(r < 0, "ptrace " + (r < 0 ? err(errno) : "ok"));
  }
  if (what == "int80") {  // getpid through the 32-bit entry
    long r;
    asm volatile("int $0x80" : "=a"(r) : "a"(20) : "memory");
    return report(false, "int 0x80 returned " + std::to_string(r));
  }
  if (what == "x32") {
    long r = syscall(0x40000000L | SYS_getpid);
    return report(false, "x32 getpid returned " + std::to_string(r));
  }
  if (what == "unshare") {
    int r = unshare(CLONE_NEWUSER);
    return report(r < 0, "unshare " + (r < 0 ? err(errno) : "ok"));
  }
  if (what == "io_uring") {
    char params[120] = {};
    long r = syscall(SYS_io_uring_setup, 1, params);
    return report(r < 0, "io_uring_setup " + (r < 0 ? err(errno) : "ok"));
  }
  if (what == "connect" && argc > 2) {  // TCP to 127.0.0.1:port, no seccomp expected
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return report(true, "socket " + err(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[2])));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int r = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    return report(r < 0, "connect " + (r < 0 ? err(errno) : "connected"));
  }
  if (what == "forks" && argc > 2) {  // fork up to N sleeping children; count until refused
    int n = std::atoi(argv[2]), made = 0, e = 0;
    for (; made < n; ++made) {
      pid_t p = fork();
      if (p < 0) {
        e = errno;
        break;
      }
      if (p == 0) {
        pause();
        _exit(0);
      }
    }
    std::printf("forked %d %s\n", made, e ? err(e).c_str() : "");
    return report(made < n, "fork");
  }
  if (what == "runner_fork") {
    runner_profile();
    pid_t p = fork();
    if (p == 0) _exit(0);
    return report(p < 0, "fork " + (p < 0 ? err(errno) : "ok"));
  }
  if (what == "runner_exec") {
    runner_profile();
    char* args[] = {const_cast<char*>("/bin/true"), nullptr};
    execv("/bin/true", args);
    return report(true, "execve " + err(errno));
  }
  if (what == "runner_threads") {  // what the runner needs keeps working
    runner_profile();
    int value = 0;
    std::thread t([&] { value = 42; });
    t.join();
    int k = kill(getpid(), 0);
    int other = kill(getpid() + 1, 0);
    int other_errno = errno;
    std::printf("thread=%d self_kill=%d other_kill=%d %s\n", value, k, other, err(other_errno).c_str());
    return value == 42 && k == 0 && other < 0 && other_errno == EPERM ? 0 : 1;
  }
  if (what.rfind("agent_", 0) == 0) {  // under the agent-mode runner's filters
    agent_filters();
    if (what == "agent_mkdir") {
      int r = mkdir("/tmp/d2k-made", 0755);
      return report(r < 0 && errno == EPERM, "mkdir " + (r < 0 ? err(errno) : "ok"));
    }
    if (what == "agent_creat") {
      int fd = open("/tmp/d2k-created", O_WRONLY | O_CREAT, 0644);
      return report(fd < 0 && errno == EPERM, "open(O_CREAT) " + (fd < 0 ? err(errno) : "fd"));
    }
    if (what == "agent_socket_unix") {
      int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      return report(fd < 0 && errno == EPERM, "socket(AF_UNIX) " + (fd < 0 ? err(errno) : "fd"));
    }
    if (what == "agent_socket_inet") {  // the layer kills
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      return report(fd < 0, "socket(AF_INET) " + (fd < 0 ? err(errno) : "fd"));
    }
    if (what == "agent_fork") {  // the layer kills (the runner profile alone answers EPERM)
      pid_t p = fork();
      if (p == 0) _exit(0);
      return report(p < 0, "fork " + (p < 0 ? err(errno) : "ok"));
    }
    if (what == "agent_thread_name") {
      int r = prctl(PR_SET_NAME, "renamed", 0, 0, 0);
      return report(r < 0 && errno == EPERM, "prctl(PR_SET_NAME) " + (r < 0 ? err(errno) : "ok"));
    }
    if (what == "agent_threads") {  // what the runner needs keeps working
      int value = 0;
      std::thread t([&] { value = 42; });
      t.join();
      int fd = open("/proc/self/status", O_RDONLY);
      std::printf("thread=%d self_kill=%d open=%d\n", value, kill(getpid(), 0), fd);
      return value == 42 && fd >= 0 ? 0 : 1;
    }
    return 2;
  }
  if (what == "fds") {  // the open descriptors, one line, e.g. "0 1 2" (the listing's own left out)
    DIR* d = opendir("/proc/self/fd");
    if (d == nullptr) return 2;
    std::string line;
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] == '.' || std::atoi(e->d_name) == dirfd(d)) continue;
      line += (line.empty() ? "" : " ") + std::string(e->d_name);
    }
    closedir(d);
    std::printf("%s\n", line.c_str());
    return 0;
  }
  if (what == "argv") {  // every further argument in brackets, one a line
    for (int i = 2; i < argc; ++i) std::printf("[%s]\n", argv[i]);
    return 0;
  }
  if (what == "env") {  // the environment, one a line
    extern char** environ;
    for (char** e = environ; *e != nullptr; ++e) std::printf("%s\n", *e);
    return 0;
  }
  return 2;
}
