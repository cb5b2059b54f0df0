// libFuzzer harness: the trace-context inputs read from the environment and the caller: a W3C
// traceparent, and the "k=v,k=v" lists of OTEL_RESOURCE_ATTRIBUTES and OTEL_EXPORTER_OTLP_HEADERS.
// Properties: never crashes; a traceparent it accepts prints back (as version 00) to one that
// parses to the same context; an accepted key=value list has no empty key.
#include <cstdlib>

#include "sandboxio/telemetry.hpp"
#include "sandboxio/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto ctx = sandboxio::TraceContext::from_traceparent(text)) {
    const auto& c = ctx.value();
    if (c.trace_id.size() != 32 || c.parent_span_id.size() != 16) std::abort();
    auto again = sandboxio::TraceContext::from_traceparent(c.traceparent(c.parent_span_id));
    if (!again || !(again.value() == c)) std::abort();  // the round trip must hold
  }
  if (auto kv = sandboxio::telemetry::parse_key_values(text, "FUZZ")) {
    for (const auto& [k, v] : kv.value())
      if (k.empty()) std::abort();
  }
  return 0;
}
