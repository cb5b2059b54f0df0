// NetworkPolicy: egress is denied unless allowed. The default value denies everything.
//
//   sandboxio::NetworkPolicy policy;                       // deny all
//   auto pypi = sandboxio::NetworkPolicy::allowing({"pypi.org", "*.pythonhosted.org"});
//   pypi.allows("files.pythonhosted.org");                 // true
//
// A backend that cannot enforce the policy asked for refuses to create (SBX_E1403); it never
// grants more than was asked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/result.hpp"

namespace sandboxio {

struct NetworkPolicy {
  /// Hosts the sandbox may reach: exact names ("pypi.org"), one leading wildcard label
  /// ("*.pythonhosted.org" matches sub-domains only, never an address) or IPv4 addresses, each
  /// on any port or on the one it names ("pypi.org:443"). Empty means deny all.
  std::vector<std::string> allow{};

  [[nodiscard]] static NetworkPolicy deny_all() { return {}; }
  [[nodiscard]] static NetworkPolicy allowing(std::vector<std::string> hosts) {
    return NetworkPolicy{std::move(hosts)};
  }

  [[nodiscard]] bool denies_all() const noexcept { return allow.empty(); }
  /// True when `host` (case-insensitive) matches an entry of the allow list, on some port.
  [[nodiscard]] bool allows(std::string_view host) const noexcept;
  /// True when `host` on `port` matches an entry: what an enforcing proxy asks. An address
  /// is allowed only when it is listed itself.
  [[nodiscard]] bool allows(std::string_view host, std::uint16_t port) const noexcept;
  /// "deny-all" or "allow: a, b".
  [[nodiscard]] std::string describe() const;
  /// Checks every entry is a valid host pattern (SBX_E1004 otherwise).
  [[nodiscard]] Result<void> validate() const;

  friend bool operator==(const NetworkPolicy&, const NetworkPolicy&) = default;
};

}  // namespace sandboxio
