// The docker:// session the replay tests record and replay: create (with the owner lease), a
// run with both streams and an exit code, a stream, a command killed at its timeout, a file
// round trip, a failure reply (a missing file), a run after the kill, and kill. Returns a
// transcript of everything the caller saw, the operation records included.
#pragma once

#include <memory>
#include <string>

#include "sandboxio/link.hpp"

namespace sandboxio::replay {

/// The identity the replayed machine is configured with (the recording's, not this process's).
void set_identity(std::string session, std::string owner);
[[nodiscard]] std::string docker_scenario(std::unique_ptr<Link> link);

}  // namespace sandboxio::replay
