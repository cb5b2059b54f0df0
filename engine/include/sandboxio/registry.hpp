// BackendRegistry: maps a DSN scheme to the factory of its backend. First-party backends are
// registered by the runtime (sandboxio::registry()); third parties add their own the same way.
//
//   registry.add({.scheme = "mybox", .summary = "My sandbox", .factory = make_mybox});
//   auto entry = registry.resolve(dsn);   // SBX_E1100 / SBX_E1101 when it cannot
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/dsn.hpp"
#include "sandboxio/result.hpp"

namespace sandboxio {

class Machine;

/// Makes a backend machine for a parsed DSN, or a Problem (bad target, bad options...).
using MachineFactory = std::function<Result<std::unique_ptr<Machine>>(const Dsn&)>;

struct BackendEntry {
  std::string scheme{};
  std::string summary{};
  /// Empty when the backend is known but not built in; then enable_hint says how to get it.
  MachineFactory factory{};
  std::string enable_hint{};
  std::vector<OptionSpec> options{};

  /// Makes the machine for `dsn` behind the admission guard: whatever the backend does, its
  /// create() is refused when its declared tier does not satisfy require_isolation, when it
  /// declares no network policy, or when the policy, resources or disk limit asked for are
  /// beyond what it declares (see admit_create in sandboxio/machine.hpp). Every driver makes
  /// machines through this, never through `factory` directly.
  [[nodiscard]] Result<std::unique_ptr<Machine>> make(const Dsn& dsn) const;
};

class BackendRegistry {
 public:
  /// Adds or replaces the entry for entry.scheme. The scheme must be a valid DSN scheme.
  Result<void> add(BackendEntry entry);
  /// The entry that can make a machine for `dsn`: SBX_E1100 BackendNotFound (listing the known
  /// schemes) when none is registered; SBX_E1101 BackendNotInstalled when it has no factory.
  [[nodiscard]] Result<const BackendEntry*> resolve(const Dsn& dsn) const;
  [[nodiscard]] const BackendEntry* find(std::string_view scheme) const noexcept;
  /// Registered schemes in alphabetical order.
  [[nodiscard]] std::vector<std::string> schemes() const;

 private:
  std::vector<BackendEntry> entries_{};
};

}  // namespace sandboxio
