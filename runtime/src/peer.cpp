#include "sandboxio/peer.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace sandboxio {

std::optional<Problem> check_peer(int fd, const Endpoint& endpoint) {
  if (endpoint.kind != Endpoint::Kind::Unix || endpoint.peer_pid == 0) return std::nullopt;
  ucred cred{};
  socklen_t size = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0) {
    return Problem{errc::ConnectionFailed,
                   "asking who listens at " + endpoint.address + ": " + std::strerror(errno),
                   {}};
  }
  if (cred.pid == endpoint.peer_pid) return std::nullopt;
  return Problem{errc::ConnectionFailed,
                 endpoint.address + " is served by process " + std::to_string(cred.pid) +
                     ", not the expected " + std::to_string(endpoint.peer_pid),
                 {}};
}

ssize_t send_with_descriptor(int socket, std::string_view data, int fd) {
  iovec iov{const_cast<char*>(data.data()), data.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
  return ::sendmsg(socket, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace sandboxio
