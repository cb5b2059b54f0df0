// Durations as people write them: "500ms", "5s", "2m", "1h", or a bare number of seconds.
//
//   auto d = sandboxio::parse_duration("1500ms");   // Result<std::chrono::milliseconds>
//   std::string s = sandboxio::format_duration(d.value());   // "1.5s"
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "sandboxio/result.hpp"

namespace sandboxio {

/// Parses a non-negative duration of at most 30 days. Units: ms, s, m, h; no unit means
/// seconds. Fails with SBX_E1002 InvalidOption naming `what` (the option or variable).
[[nodiscard]] Result<std::chrono::milliseconds> parse_duration(std::string_view text,
                                                               std::string_view what = "duration");

/// Short human form: "250ms", "1.5s", "2m", "3h".
[[nodiscard]] std::string format_duration(std::chrono::nanoseconds d);

}  // namespace sandboxio
