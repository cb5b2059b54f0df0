// Resources: limits asked of the backend. An unset field means "the backend's default".
//
//   sandboxio::Resources r{.cpus = 1.5, .memory_bytes = 512ull << 20, .pids = 256};
//
// A backend refuses a limit it cannot enforce (SBX_E1404) instead of ignoring it; Docker, for
// example, refuses disk_bytes because overlay2 cannot enforce it.
#pragma once

#include <cstdint>
#include <optional>

#include "sandboxio/result.hpp"

namespace sandboxio {

struct Resources {
  std::optional<double> cpus{};
  std::optional<std::uint64_t> memory_bytes{};
  std::optional<std::uint32_t> pids{};
  std::optional<std::uint64_t> disk_bytes{};

  [[nodiscard]] bool empty() const noexcept {
    return !cpus && !memory_bytes && !pids && !disk_bytes;
  }
  /// Positive, finite, and large enough to start a process (memory >= 6 MiB, pids >= 8).
  [[nodiscard]] Result<void> validate() const;

  friend bool operator==(const Resources&, const Resources&) = default;
};

}  // namespace sandboxio
