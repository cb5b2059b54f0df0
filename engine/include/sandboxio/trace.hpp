// W3C trace context for operation records: the trace a sandbox's records belong to, the
// caller's span they are children of, and the span id of each record, derived from a seed so
// that the engine needs no randomness of its own (the driver draws the seed).
//
//   auto ctx = sandboxio::TraceContext::from_traceparent(
//       "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
//   opts.trace = ctx.value();                 // this sandbox's spans continue the caller's
//   // a command then sees TRACEPARENT=00-4bf9...-<its own span id>-01
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "sandboxio/result.hpp"

namespace sandboxio {

struct TraceContext {
  /// 32 lowercase hex digits, not all zero. Empty: the driver draws one.
  std::string trace_id{};
  /// The caller's span, 16 lowercase hex digits; empty: the records' spans are roots.
  std::string parent_span_id{};
  bool sampled = true;
  /// Span ids derive from it and the record's sequence (span_id_for); 0: the driver draws one.
  std::uint64_t span_seed = 0;

  /// Parses a W3C `traceparent` header ("00-TRACE-SPAN-FLAGS"). Later versions are read as
  /// version 00 is, as the W3C text asks. InvalidOption with a hint on anything else.
  [[nodiscard]] static Result<TraceContext> from_traceparent(std::string_view header);
  /// The `traceparent` a child of `span_id` in this trace carries.
  [[nodiscard]] std::string traceparent(std::string_view span_id) const;

  friend bool operator==(const TraceContext&, const TraceContext&) = default;
};

/// The span id (16 hex digits, never all zero) of record `sequence` under `seed`: distinct for
/// distinct sequences of one seed.
[[nodiscard]] std::array<char, 16> span_id_for(std::uint64_t seed, std::uint64_t sequence);

/// Where a record sits in a W3C trace, as lowercase hex digits in fixed arrays (records are
/// copied on every hop: no allocation). The views are empty when the record is not traced.
struct SpanIds {
  std::array<char, 32> trace{};
  std::array<char, 16> span{};
  std::array<char, 16> parent{};  // the caller's span; all '\0': a root span
  /// The trace's sampled flag (W3C trace-flags bit 0): false when the caller's traceparent
  /// said not to record, and then no span is exported (the record still goes to the sinks).
  bool sampled = true;

  [[nodiscard]] bool traced() const noexcept { return trace[0] != '\0'; }
  [[nodiscard]] std::string_view trace_id() const noexcept { return view(trace); }
  [[nodiscard]] std::string_view span_id() const noexcept { return view(span); }
  [[nodiscard]] std::string_view parent_span_id() const noexcept { return view(parent); }
  /// Copies ids of the right length (32, 16, 16 hex digits); an empty one is left unset.
  void assign(std::string_view trace_hex, std::string_view span_hex, std::string_view parent_hex);

  friend bool operator==(const SpanIds&, const SpanIds&) = default;

 private:
  template <std::size_t N>
  static std::string_view view(const std::array<char, N>& a) noexcept {
    return a[0] == '\0' ? std::string_view() : std::string_view(a.data(), N);
  }
};

}  // namespace sandboxio
