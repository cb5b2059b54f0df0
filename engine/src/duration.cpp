#include "sandboxio/duration.hpp"

#include <charconv>
#include <cstdint>

namespace sandboxio {

Result<std::chrono::milliseconds> parse_duration(std::string_view text, std::string_view what) {
  auto bad = [&](std::string why) {
    return Problem{
        errc::InvalidOption, std::string(what) + ": " + why,
        "Write a duration as a number and a unit: 500ms, 30s, 2m or 1h (at most 30 days)."};
  };
  if (text.empty()) return bad("the duration is empty");
  if (text.size() > 32) return bad("the duration is too long");
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9')
    ++digits;
  if (digits == 0) return bad("a duration starts with digits");
  std::uint64_t number = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, number);
  if (ec != std::errc{} || ptr != text.data() + digits) return bad("the number is out of range");
  const std::string_view unit = text.substr(digits);
  std::uint64_t ms_per_unit = 0;
  if (unit.empty() || unit == "s") {
    ms_per_unit = 1000;
  } else if (unit == "ms") {
    ms_per_unit = 1;
  } else if (unit == "m") {
    ms_per_unit = 60'000;
  } else if (unit == "h") {
    ms_per_unit = 3'600'000;
  } else {
    return bad("unknown unit \"" + std::string(unit) + "\"");
  }
  constexpr std::uint64_t kMaxMs = 30ULL * 24 * 3'600'000;
  if (number > kMaxMs / ms_per_unit) return bad("more than 30 days");
  return std::chrono::milliseconds(static_cast<std::int64_t>(number * ms_per_unit));
}

std::string format_duration(std::chrono::nanoseconds d) {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(d).count();
  auto with_decimal = [](long long value, long long unit, const char* suffix) {
    const long long whole = value / unit;
    const long long tenth = (value % unit) * 10 / unit;
    std::string s = std::to_string(whole);
    if (tenth != 0) s += "." + std::to_string(tenth);
    return s + suffix;
  };
  if (ms < 1000) return std::to_string(ms) + "ms";
  if (ms < 60'000) return with_decimal(ms, 1000, "s");
  if (ms < 3'600'000) return with_decimal(ms, 60'000, "m");
  return with_decimal(ms, 3'600'000, "h");
}

}  // namespace sandboxio
