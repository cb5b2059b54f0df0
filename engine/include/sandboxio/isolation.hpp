// IsolationTier: how hard it is for code in the sandbox to escape to the host.
//
//   sandboxio::IsolationTier tier = sandboxio::IsolationTier::Container;
//   tier.satisfies(sandboxio::IsolationTier::Microvm);   // false
//   tier.satisfies(sandboxio::IsolationTier::Container); // true
//
// Ranks are spaced 10 apart (Unknown 0, Container 10, Gvisor 20, Microvm 30) so that a tier can
// later be added between two others without renumbering. The rank orders escape resistance
// only, not security in general. Unknown satisfies no requirement, and creating on it warns.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sandboxio {

class IsolationTier {
 public:
  enum Value : std::uint8_t { Unknown, Container, Gvisor, Microvm };

  constexpr IsolationTier() noexcept = default;
  constexpr IsolationTier(Value value) noexcept : value_(value) {}  // NOLINT: implicit by design

  [[nodiscard]] constexpr Value value() const noexcept { return value_; }

  /// 0, 10, 20, 30 for Unknown, Container, Gvisor, Microvm.
  [[nodiscard]] constexpr int rank() const noexcept {
    switch (value_) {
      case Container:
        return 10;
      case Gvisor:
        return 20;
      case Microvm:
        return 30;
      case Unknown:
        break;
    }
    return 0;
  }

  /// True when this tier meets `minimum`. Unknown satisfies nothing; any known tier satisfies
  /// a minimum of Unknown (which means "no requirement").
  [[nodiscard]] constexpr bool satisfies(IsolationTier minimum) const noexcept {
    if (value_ == Unknown) return false;
    return rank() >= minimum.rank();
  }

  /// "unknown", "container", "gvisor", "microvm".
  [[nodiscard]] constexpr std::string_view name() const noexcept {
    switch (value_) {
      case Container:
        return "container";
      case Gvisor:
        return "gvisor";
      case Microvm:
        return "microvm";
      case Unknown:
        break;
    }
    return "unknown";
  }

  /// Parses a name() back; case-sensitive, nullopt for anything else.
  [[nodiscard]] static constexpr std::optional<IsolationTier> parse(
      std::string_view text) noexcept {
    for (Value v : {Unknown, Container, Gvisor, Microvm}) {
      if (IsolationTier(v).name() == text) return IsolationTier(v);
    }
    return std::nullopt;
  }

  friend constexpr bool operator==(IsolationTier a, IsolationTier b) noexcept {
    return a.value_ == b.value_;
  }
  friend constexpr std::strong_ordering operator<=>(IsolationTier a, IsolationTier b) noexcept {
    return a.rank() <=> b.rank();
  }

 private:
  Value value_ = Unknown;
};

}  // namespace sandboxio
