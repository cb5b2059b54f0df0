// What the transports do with the peer of a Unix socket: check who listens there
// (Endpoint::peer_pid), and hand it a descriptor (request::Pass).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string_view>

#include "sandboxio/machine.hpp"

namespace sandboxio {

/// Nothing when `endpoint` asks for no particular peer, or when the process that listens at
/// the other end of the connected Unix socket `fd` is `endpoint.peer_pid` (SO_PEERCRED);
/// otherwise the ConnectionFailed problem that ends the connection.
[[nodiscard]] std::optional<Problem> check_peer(int fd, const Endpoint& endpoint);

/// send(2) of `data` on the Unix socket `socket`, without blocking, with the descriptor `fd`
/// riding on its first byte (SCM_RIGHTS): what send() returns. The caller keeps `fd` (the peer
/// has its own once this returned more than 0) and sends any rest as usual.
[[nodiscard]] ssize_t send_with_descriptor(int socket, std::string_view data, int fd);

}  // namespace sandboxio
