#include "sandboxio/trace.hpp"

#include <algorithm>

#include "sandboxio/errors.hpp"

namespace sandboxio {
namespace {

bool lower_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool all_zero(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == '0'; });
}

Problem bad_traceparent(const std::string& why) {
  return Problem{errc::InvalidOption, "traceparent: " + why,
                 "A traceparent is 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, "
                 "lowercase, neither id all zeros (W3C Trace Context)."};
}

// splitmix64's finaliser: a bijection of 64-bit values, so distinct inputs give distinct ids.
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

Result<TraceContext> TraceContext::from_traceparent(std::string_view h) {
  // version "-" trace-id "-" parent-id "-" flags; a later version may append "-" fields.
  if (h.size() < 55) return bad_traceparent("too short (" + std::to_string(h.size()) + " bytes)");
  if (h[2] != '-' || h[35] != '-' || h[52] != '-')
    return bad_traceparent("the fields are not separated by '-' where expected");
  const std::string_view version = h.substr(0, 2), trace = h.substr(3, 32),
                         parent = h.substr(36, 16), flags = h.substr(53, 2);
  if (!lower_hex(version) || version == "ff") return bad_traceparent("bad version");
  if (version == "00" && h.size() != 55) return bad_traceparent("version 00 is 55 bytes long");
  if (version != "00" && h.size() > 55 && h[55] != '-')
    return bad_traceparent("a later version's extra fields must follow a '-'");
  if (!lower_hex(trace) || all_zero(trace))
    return bad_traceparent("the trace id is not 32 lowercase hex digits, not all zero");
  if (!lower_hex(parent) || all_zero(parent))
    return bad_traceparent("the parent id is not 16 lowercase hex digits, not all zero");
  if (!lower_hex(flags)) return bad_traceparent("the flags are not 2 lowercase hex digits");
  TraceContext ctx;
  ctx.trace_id = std::string(trace);
  ctx.parent_span_id = std::string(parent);
  const int f = (flags[1] >= 'a' ? flags[1] - 'a' + 10 : flags[1] - '0');
  ctx.sampled = (f & 1) != 0;
  return ctx;
}

std::string TraceContext::traceparent(std::string_view span_id) const {
  return "00-" + trace_id + "-" + std::string(span_id) + (sampled ? "-01" : "-00");
}

void SpanIds::assign(std::string_view trace_hex, std::string_view span_hex,
                     std::string_view parent_hex) {
  auto put = [](auto& into, std::string_view hex) {
    if (hex.size() == into.size()) std::copy(hex.begin(), hex.end(), into.begin());
  };
  put(trace, trace_hex);
  put(span, span_hex);
  put(parent, parent_hex);
}

std::array<char, 16> span_id_for(std::uint64_t seed, std::uint64_t sequence) {
  std::uint64_t id = mix(seed ^ mix(sequence));
  if (id == 0) id = 1;  // one value in 2^64; never the invalid all-zero id
  static constexpr char kHex[] = "0123456789abcdef";
  std::array<char, 16> out{};
  for (int i = 15; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = kHex[id & 0xf];
    id >>= 4;
  }
  return out;
}

}  // namespace sandboxio
