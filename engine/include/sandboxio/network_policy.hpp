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
#include <map>
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
  /// Learning mode: everything is still denied, and every attempt is recorded (host, port),
  /// so that a run shows which hosts it needs (egress_allow_list() turns the records into an
  /// allow list). Needs a backend that declares network_allow_list; the allow list stays empty.
  bool learn = false;
  /// Host names the host side connects to at a fixed address instead of resolving them, like
  /// curl's --resolve ("canary.test" -> "127.0.0.1"). The allow list is checked on the name,
  /// before this applies; backends that cannot pin names refuse a non-empty map.
  std::map<std::string, std::string> pinned{};

  [[nodiscard]] static NetworkPolicy deny_all() { return {}; }
  [[nodiscard]] static NetworkPolicy allowing(std::vector<std::string> hosts) {
    NetworkPolicy p;
    p.allow = std::move(hosts);
    return p;
  }
  [[nodiscard]] static NetworkPolicy learning() {
    NetworkPolicy p;
    p.learn = true;
    return p;
  }

  /// Nothing leaves the sandbox (learning mode too: it records what it refuses).
  [[nodiscard]] bool denies_all() const noexcept { return allow.empty(); }
  /// The sandbox needs an egress path that decides per connection: an allow list, or learning.
  [[nodiscard]] bool needs_proxy() const noexcept { return !allow.empty() || learn; }
  /// True when `host` (case-insensitive) matches an entry of the allow list, on some port.
  [[nodiscard]] bool allows(std::string_view host) const noexcept;
  /// True when `host` on `port` matches an entry: what an enforcing proxy asks. An address
  /// is allowed only when it is listed itself.
  [[nodiscard]] bool allows(std::string_view host, std::uint16_t port) const noexcept;
  /// "deny-all", "learn" or "allow: a, b".
  [[nodiscard]] std::string describe() const;
  /// Checks every entry is a valid host pattern (SBX_E1004 otherwise).
  [[nodiscard]] Result<void> validate() const;

  friend bool operator==(const NetworkPolicy&, const NetworkPolicy&) = default;
};

}  // namespace sandboxio
