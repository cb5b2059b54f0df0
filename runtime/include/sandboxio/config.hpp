// Process-wide settings read from SBX_* environment variables, and the default backend
// registry.
//
//   auto grace = sandboxio::teardown_grace();      // SBX_TEARDOWN_GRACE, default 5 s
//   sandboxio::registry().add({.scheme = "mybox", .factory = make_mybox});
#pragma once

#include <chrono>

#include "sandboxio/registry.hpp"
#include "sandboxio/result.hpp"

namespace sandboxio {

inline constexpr std::chrono::milliseconds kDefaultTeardownGrace{5000};
inline constexpr std::chrono::milliseconds kDefaultAuditTimeout{1000};

/// SBX_TEARDOWN_GRACE (default 5 s): how long teardown may run after a cancellation.
/// SBX_E1003 InvalidEnvironment when set to something that is not a duration.
[[nodiscard]] Result<std::chrono::milliseconds> teardown_grace();
/// SBX_AUDIT_TIMEOUT (default 1 s): how long one audit sink call may take.
[[nodiscard]] Result<std::chrono::milliseconds> audit_timeout();

/// The process's backend registry, with every first-party scheme registered (those not built
/// in are listed with the build option that enables them). Not thread-safe to modify: add your
/// own backends at start-up, before creating sandboxes.
[[nodiscard]] BackendRegistry& registry();

}  // namespace sandboxio
