// Capabilities a backend declares. A declared capability must work; using an undeclared one
// fails with SBX_E1401 CapabilityNotSupported. The contract suite checks both directions.
//
//   sandboxio::CapabilitySet caps{sandboxio::Capability::Filesystem,
//   sandboxio::Capability::Streaming}; if (!caps.contains(sandboxio::Capability::StatefulCode)) {
//   /* run_code without a context */ }
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace sandboxio {

enum class Capability : std::uint8_t {
  NetworkPolicy,     // enforces deny-all egress
  NetworkAllowList,  // enforces a non-empty allow list
  Filesystem,        // write_file, read_file, list_files, remove_file
  Streaming,         // stream() with live OutputChunks
  StatefulCode,      // run_code in a context whose variables survive between calls
  RichOutput,        // run_code returns RichOutput values (images, HTML, ...)
  ResourceCaps,      // enforces cpus, memory and pids limits
  DiskLimit,         // enforces a disk size limit
  Reattach,          // connect(dsn, id) to a sandbox made by another process
  Stdin,             // send bytes to a running process
};

inline constexpr std::array kAllCapabilities{
    Capability::NetworkPolicy, Capability::NetworkAllowList, Capability::Filesystem,
    Capability::Streaming,     Capability::StatefulCode,     Capability::RichOutput,
    Capability::ResourceCaps,  Capability::DiskLimit,        Capability::Reattach,
    Capability::Stdin,
};

/// "network_policy", "filesystem", ...: stable names used in docs, JSON and error messages.
[[nodiscard]] constexpr std::string_view to_string(Capability c) noexcept {
  switch (c) {
    case Capability::NetworkPolicy:
      return "network_policy";
    case Capability::NetworkAllowList:
      return "network_allow_list";
    case Capability::Filesystem:
      return "filesystem";
    case Capability::Streaming:
      return "streaming";
    case Capability::StatefulCode:
      return "stateful_code";
    case Capability::RichOutput:
      return "rich_output";
    case Capability::ResourceCaps:
      return "resource_caps";
    case Capability::DiskLimit:
      return "disk_limit";
    case Capability::Reattach:
      return "reattach";
    case Capability::Stdin:
      return "stdin";
  }
  return "unknown";
}

[[nodiscard]] constexpr std::optional<Capability> parse_capability(std::string_view name) noexcept {
  for (Capability c : kAllCapabilities) {
    if (to_string(c) == name) return c;
  }
  return std::nullopt;
}

/// A small value set of capabilities.
class CapabilitySet {
 public:
  constexpr CapabilitySet() noexcept = default;
  constexpr CapabilitySet(std::initializer_list<Capability> caps) noexcept {
    for (Capability c : caps)
      insert(c);
  }
  [[nodiscard]] static constexpr CapabilitySet all() noexcept {
    CapabilitySet s{};
    for (Capability c : kAllCapabilities)
      s.insert(c);
    return s;
  }

  constexpr void insert(Capability c) noexcept { bits_ |= bit(c); }
  constexpr void erase(Capability c) noexcept { bits_ &= ~bit(c); }
  [[nodiscard]] constexpr bool contains(Capability c) const noexcept {
    return (bits_ & bit(c)) != 0;
  }
  [[nodiscard]] constexpr bool empty() const noexcept { return bits_ == 0; }
  [[nodiscard]] constexpr std::uint32_t bits() const noexcept { return bits_; }

  friend constexpr bool operator==(CapabilitySet, CapabilitySet) noexcept = default;

 private:
  static constexpr std::uint32_t bit(Capability c) noexcept {
    return std::uint32_t{1} << static_cast<unsigned>(c);
  }
  std::uint32_t bits_ = 0;
};

}  // namespace sandboxio
