#include "sandbox/runner/tool_host.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sandbox/runner/confine.hpp"

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
  // The agent runner's own namespaces (confine.hpp enter_namespaces), entered here because the
  // runner under the tool may be multi-threaded from its start. No PID namespace: under ncu and
  // compute-sanitizer CUDA start-up fails in one (cudaErrorOperatingSystem; the H200, 2026-12-02,
  // also with `unshare -p -f ncu` alone). What is left of the tool's tree when it ends, or when it
  // is killed at the deadline, is found by this network namespace and killed by the server
  // (gpu_tool.cpp kill_namespace_members).
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) != 0) return fail(70, "unshare(user, mount, net)");
  if (!write_file("/proc/self/setgroups", "deny") ||
      !write_file("/proc/self/uid_map", std::to_string(kInsideUid) + " " + std::to_string(uid) + " 1") ||
      !write_file("/proc/self/gid_map", std::to_string(kInsideGid) + " " + std::to_string(gid) + " 1"))
    return fail(71, "id maps");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return fail(71, "mount private");
  // ncu's lock folder as a small tmpfs (tool_host.hpp kToolScratchEnv), seen by the tool and the runner.
  if (const char* scratch = std::getenv(kToolScratchEnv); scratch != nullptr && scratch[0] == '/') {
    const std::string options = "size=" + std::to_string(kToolScratchBytes) + ",nr_inodes=64,mode=0700";
    if (::mount("d2k-tool-scratch", scratch, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str()) != 0)
      return fail(71, "mount tmpfs on the tool's scratch folder");
  }
  // The new namespace's loopback starts down; the tool's front end listens on it.
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return fail(72, "socket");
  struct ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(s, SIOCGIFFLAGS, &ifr) != 0) return fail(72, "SIOCGIFFLAGS lo");
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
  if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) return fail(72, "SIOCSIFFLAGS lo");
  ::close(s);
  // CAP_SYS_ADMIN (the runner's mounts) and CAP_SETPCAP (its drop of the bounding set) of this user
  // namespace, and nothing else, survive the execs down to the runner (uid kInsideUid is not root
  // here: without ambient capabilities execve clears them all).
  constexpr int kKept[] = {CAP_SYS_ADMIN, CAP_SETPCAP};
  for (int cap = 0; cap <= 63; ++cap)
    if (cap != CAP_SYS_ADMIN && cap != CAP_SETPCAP && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
      return fail(73, "capability bounding set");
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2] = {};
  if (::syscall(SYS_capget, &header, caps) != 0) return fail(73, "capget");
  for (int cap : kKept) caps[CAP_TO_INDEX(cap)].inheritable |= CAP_TO_MASK(cap);
  if (::syscall(SYS_capset, &header, caps) != 0) return fail(73, "capset");
  for (int cap : kKept)
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) return fail(73, "ambient capabilities");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail(73, "no_new_privs");
  const pid_t child = ::fork();
  if (child < 0) return fail(73, "fork");
  if (child == 0) {
    // Dies with this host; the host dies with the server (the spawn's parent-death signal) and by
    // the parent's kill of its process group; the rest of the tree by the namespace sweep.
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
