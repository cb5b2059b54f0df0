// DSN: the name of a sandbox backend and its target, "scheme://target?option=value&...".
//
//   auto dsn = sandboxio::parse_dsn("docker://python:3.12-slim?pull=never").value();
//   dsn.scheme;   // "docker"
//   dsn.target;   // "python:3.12-slim"
//   auto opts = dsn.typed({{"pull", sandboxio::OptionType::String}}).value();
//
// Rules: the scheme is [a-z][a-z0-9+.-]*; target and option values are percent-decoded
// (%XX; "+" stays "+"); after decoding no NUL or control byte and only valid UTF-8 is
// allowed; option names are [a-z0-9_.-]+ and may appear once; no fragment ("#"). Every
// violation is SBX_E1001 InvalidDsn (or SBX_E1002 InvalidOption for options) with the byte
// offset and a hint.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/result.hpp"

namespace sandboxio {

inline constexpr std::size_t kMaxDsnLength = 4096;
inline constexpr std::size_t kMaxDsnOptions = 32;

enum class OptionType : std::uint8_t { String, Bool, Int, Duration };

/// One option a backend accepts in its DSN.
struct OptionSpec {
  std::string_view name{};
  OptionType type = OptionType::String;
  std::string_view help = {};
};

/// Options checked against a backend's specs and converted to their types.
class TypedOptions {
 public:
  [[nodiscard]] bool has(std::string_view name) const { return raw_.count(std::string(name)) != 0; }
  [[nodiscard]] std::string string(std::string_view name, std::string fallback = {}) const;
  [[nodiscard]] bool boolean(std::string_view name, bool fallback = false) const;
  [[nodiscard]] std::int64_t integer(std::string_view name, std::int64_t fallback = 0) const;
  [[nodiscard]] std::chrono::milliseconds duration(std::string_view name,
                                                   std::chrono::milliseconds fallback = {}) const;

 private:
  friend class Dsn;
  std::map<std::string, std::string, std::less<>> raw_{};
  std::map<std::string, bool, std::less<>> bools_{};
  std::map<std::string, std::int64_t, std::less<>> ints_{};
  std::map<std::string, std::chrono::milliseconds, std::less<>> durations_{};
};

class Dsn {
 public:
  struct Option {
    std::string name{};
    std::string value{};
    friend bool operator==(const Option&, const Option&) = default;
  };

  std::string scheme{};
  std::string target{};           // percent-decoded
  std::vector<Option> options{};  // decoded, in the order written, names unique

  /// The value of an option, or nullptr.
  [[nodiscard]] const std::string* option(std::string_view name) const noexcept;
  /// Checks the options against `specs` (unknown names and badly typed values are SBX_E1002,
  /// whose message lists the known names) and returns them typed.
  [[nodiscard]] Result<TypedOptions> typed(std::span<const OptionSpec> specs) const;
  [[nodiscard]] Result<TypedOptions> typed(std::initializer_list<OptionSpec> specs) const {
    return typed(std::span<const OptionSpec>(specs.begin(), specs.size()));
  }
  /// The canonical text: scheme://target?name=value with reserved bytes percent-encoded.
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const Dsn&, const Dsn&) = default;
};

/// Parses a DSN; never throws. Input longer than kMaxDsnLength is refused before any work.
[[nodiscard]] Result<Dsn> parse_dsn(std::string_view text);

/// Percent-encodes everything but unreserved characters and the ones in `keep`.
[[nodiscard]] std::string percent_encode(std::string_view text, std::string_view keep = {});

/// True when `text` is well-formed UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
[[nodiscard]] bool is_valid_utf8(std::string_view text) noexcept;

}  // namespace sandboxio
