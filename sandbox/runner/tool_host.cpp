#include "sandbox/runner/tool_host.hpp"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

namespace d2k::runner {
namespace {

bool write_file(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

int fail(int code, const char* step) {
  std::fprintf(stderr, "d2k-runner tool-host: %s: %s\n", step, std::strerror(errno));
  return code;
}

}  // namespace

int tool_host_main(int argc, char** argv) {
  if (argc < 1 || argv[0] == nullptr) {
    std::fprintf(stderr, "usage: d2k-runner --mode tool-host -- TOOL [ARGS...]\n");
    return 64;
  }
  const uid_t uid = ::getuid();
  const gid_t gid = ::getgid();
  // A PID namespace too: the tool is its init, so when the tool dies (or this host, through the
  // tool's parent-death signal) the kernel kills everything left in it, the runner included,
  // whatever process group the tool put it in.
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID) != 0) return fail(70, "unshare(user, net, pid)");
  if (!write_file("/proc/self/setgroups", "deny") ||
      !write_file("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1") ||
      !write_file("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"))
    return fail(71, "id maps");
  // The new namespace's loopback starts down; the tool's front end listens on it.
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return fail(72, "socket");
  struct ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(s, SIOCGIFFLAGS, &ifr) != 0) return fail(72, "SIOCGIFFLAGS lo");
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
  if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) return fail(72, "SIOCSIFFLAGS lo");
  ::close(s);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail(73, "no_new_privs");
  const pid_t child = ::fork();
  if (child < 0) return fail(73, "fork");
  if (child == 0) {
    // Dies with this host; the host dies with the server (the spawn's parent-death signal) and by
    // the parent's kill of its process group.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) _exit(73);
    ::execv(argv[0], argv);
    std::fprintf(stderr, "d2k-runner tool-host: execv %s: %s\n", argv[0], std::strerror(errno));
    _exit(73);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0)
    if (errno != EINTR) return fail(73, "waitpid");
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace d2k::runner
