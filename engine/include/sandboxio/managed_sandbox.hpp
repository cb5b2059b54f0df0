// ManagedSandbox: what `sandboxio reap` knows of a sandbox it manages, read back from the
// backend's labels or metadata. Every label sandboxio sets starts with "io.sandboxio.".
//
//   for (const sandboxio::ManagedSandbox& s : listed)
//     if (s.expired_at(now_unix)) kill(s.id);
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace sandboxio {

/// Label keys sandboxio sets on everything it creates.
namespace labels {
inline constexpr std::string_view kManaged = "io.sandboxio.managed";    // "true"
inline constexpr std::string_view kOwner = "io.sandboxio.owner";        // host:pid of the creator
inline constexpr std::string_view kSession = "io.sandboxio.session";    // random per process
inline constexpr std::string_view kCreated = "io.sandboxio.created";    // unix seconds
inline constexpr std::string_view kLifetime = "io.sandboxio.lifetime";  // seconds
}  // namespace labels

enum class SandboxState : std::uint8_t { Created, Running, Paused, Stopped, Unknown };

[[nodiscard]] constexpr std::string_view to_string(SandboxState s) noexcept {
  switch (s) {
    case SandboxState::Created:
      return "created";
    case SandboxState::Running:
      return "running";
    case SandboxState::Paused:
      return "paused";
    case SandboxState::Stopped:
      return "stopped";
    case SandboxState::Unknown:
      break;
  }
  return "unknown";
}

struct ManagedSandbox {
  std::string backend{};  // DSN scheme, "docker"
  std::string id{};
  std::string owner{};
  std::string session{};
  std::int64_t created_unix = 0;
  std::chrono::seconds lifetime{0};
  SandboxState state = SandboxState::Unknown;
  std::map<std::string, std::string> labels{};

  /// True once created + lifetime has passed at `now_unix`.
  [[nodiscard]] bool expired_at(std::int64_t now_unix) const noexcept {
    return created_unix + lifetime.count() <= now_unix;
  }

  friend bool operator==(const ManagedSandbox&, const ManagedSandbox&) = default;
};

}  // namespace sandboxio
