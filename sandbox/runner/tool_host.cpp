#include "sandbox/runner/tool_host.hpp"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
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
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) return fail(70, "unshare(user, net)");
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
  ::execv(argv[0], argv);
  return fail(73, "execv");
}

}  // namespace d2k::runner
