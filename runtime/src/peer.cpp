#include "sandboxio/peer.hpp"

#include <sys/socket.h>

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

}  // namespace sandboxio
