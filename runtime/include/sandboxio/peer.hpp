// The transports' check of who listens at the other end of a Unix socket (Endpoint::peer_pid).
#pragma once

#include <optional>

#include "sandboxio/machine.hpp"

namespace sandboxio {

/// Nothing when `endpoint` asks for no particular peer, or when the process that listens at
/// the other end of the connected Unix socket `fd` is `endpoint.peer_pid` (SO_PEERCRED);
/// otherwise the ConnectionFailed problem that ends the connection.
[[nodiscard]] std::optional<Problem> check_peer(int fd, const Endpoint& endpoint);

}  // namespace sandboxio
