#include "sandbox/runner/fd_pass.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace d2k::runner {

std::string send_fd(int sock, int fd) {
  char byte = 'F';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  for (;;) {
    const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n == 1) return "";
    if (n < 0 && errno == EINTR) continue;
    return std::string("sendmsg: ") + (n < 0 ? std::strerror(errno) : "short write");
  }
}

int recv_fd(int sock, int timeout_ms, std::string& error) {
  pollfd p{sock, POLLIN, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      error = "no descriptor arrived in time";
      return -1;
    }
    if (r < 0) {
      error = std::string("poll: ") + std::strerror(errno);
      return -1;
    }
    break;
  }
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    error = n < 0 ? std::string("recvmsg: ") + std::strerror(errno) : "the peer closed the socket";
    return -1;
  }
  int got = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (got < 0) got = fd;
      else ::close(fd);  // one descriptor per message: any other is refused
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0 || got < 0) {
    if (got >= 0) ::close(got);
    error = (msg.msg_flags & MSG_CTRUNC) != 0 ? "descriptor message truncated" : "a message without a descriptor";
    return -1;
  }
  return got;
}

}  // namespace d2k::runner
