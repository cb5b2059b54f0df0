// Records as OTLP spans (sandboxio/telemetry.hpp): the span of a record, with its GenAI and
// sandboxio attributes, and the ExportTraceServiceRequest holding a batch of them.
//
// The message layout follows opentelemetry-proto (collector/trace/v1, trace/v1, common/v1,
// resource/v1); tests/otel decodes what this writes with the official definitions.
#include <algorithm>

#include "sandboxio/codec/protobuf.hpp"
#include "sandboxio/telemetry.hpp"
#include "span_attributes.hpp"

namespace sandboxio::telemetry {
namespace {

std::string from_hex(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    out.push_back(static_cast<char>((nib(hex[i]) << 4) | nib(hex[i + 1])));
  }
  return out;
}

// ---- spans ----

bool is_tool(Operation op) {
  return op == Operation::Run || op == Operation::Stream || op == Operation::RunCode;
}

void add(Span& s, std::string_view key, std::string value) {
  s.attributes.push_back({std::string(key), std::move(value)});
}
void add(Span& s, std::string_view key, std::string_view value) {
  add(s, key, std::string(value));
}
void add(Span& s, std::string_view key, std::int64_t value) {
  s.attributes.push_back({std::string(key), value});
}
void add(Span& s, std::string_view key, bool value) {
  s.attributes.push_back({std::string(key), value});
}
void add(Span& s, std::string_view key, const char* value) = delete;  // would become a bool

}  // namespace

const Span::Attribute* Span::find(std::string_view key) const {
  for (const auto& a : attributes)
    if (a.key == key) return &a;
  return nullptr;
}

Span to_span(const OperationRecord& r) {
  Span s;
  const std::string op(to_string(r.operation));
  if (is_tool(r.operation)) {
    s.name = std::string(attr::kExecuteTool) + " sandboxio." + op;
    s.kind = 1;  // INTERNAL, as GenAI's execute_tool spans are
    add(s, attr::kGenAiOperationName, attr::kExecuteTool);
    add(s, attr::kGenAiToolName, "sandboxio." + op);
    add(s, attr::kGenAiToolType, attr::kToolTypeFunction);
  } else {
    s.name = "sandboxio." + op;
    s.kind = 3;  // CLIENT: a call to the sandbox's backend
  }
  add(s, attr::kOperation, op);
  add(s, attr::kBackend, r.backend);
  if (!r.sandbox_id.empty()) add(s, attr::kSandboxId, r.sandbox_id);
  add(s, attr::kSequence, static_cast<std::int64_t>(r.sequence));
  add(s, attr::kOutcome, to_string(r.outcome));
  add(s, attr::kIsolation, r.tier.name());
  add(s, attr::kNetworkPolicy, r.network_policy);
  if (r.command) add(s, attr::kCommand, *r.command);  // captured on request, redacted
  if (r.exit_code) add(s, attr::kProcessExitCode, static_cast<std::int64_t>(*r.exit_code));
  if (r.termination) add(s, attr::kTermination, to_string(*r.termination));
  if (r.possible_orphan) add(s, attr::kPossibleOrphan, true);
  if (r.bytes_in != 0) add(s, attr::kBytesIn, static_cast<std::int64_t>(r.bytes_in));
  if (r.bytes_out != 0) add(s, attr::kBytesOut, static_cast<std::int64_t>(r.bytes_out));
  if (r.egress) {
    const EgressAttempt& e = *r.egress;
    add(s, attr::kServerAddress, e.host);
    add(s, attr::kServerPort, static_cast<std::int64_t>(e.port));
    add(s, attr::kEgressMethod, e.method);
    add(s, attr::kEgressAllowed, e.allowed);
    if (!e.reason.empty()) add(s, attr::kEgressReason, e.reason);
    add(s, attr::kEgressBytesOut, static_cast<std::int64_t>(e.bytes_out));
    add(s, attr::kEgressBytesIn, static_cast<std::int64_t>(e.bytes_in));
  }
  if (r.error_code) {
    const ErrorInfo* info = find_error(*r.error_code);
    const std::string id(info != nullptr ? info->id : std::string_view("SBX_E?"));
    add(s, attr::kErrorCode, id);
  }
  // Failed and timed-out operations are errors; a cancelled one is not (the caller chose it),
  // nor is a command that exited non-zero (its exit code says so).
  if (r.outcome == Outcome::Failed || r.outcome == Outcome::Timeout) {
    s.status = 2;
    const ErrorInfo* info = r.error_code ? find_error(*r.error_code) : nullptr;
    add(s, attr::kErrorType,
        info != nullptr ? std::string(info->id)
                        : std::string(r.outcome == Outcome::Timeout ? "timeout" : "_OTHER"));
    s.status_message = r.error_detail;
  }
  return s;
}

namespace {

void encode_attributes(protobuf::Writer& into, std::uint32_t field,
                       const std::vector<Span::Attribute>& attributes) {
  for (const auto& a : attributes) {
    protobuf::Writer kv;
    kv.string(1, a.key);
    // AnyValue's members are a oneof: each is written even when it holds its default.
    protobuf::Writer any;
    if (const auto* str = std::get_if<std::string>(&a.value)) {
      any.string_present(1, *str);
    } else if (const auto* b = std::get_if<bool>(&a.value)) {
      any.varint_present(2, *b ? 1 : 0);
    } else {
      any.varint_present(3, static_cast<std::uint64_t>(std::get<std::int64_t>(a.value)));
    }
    kv.message(2, any);
    into.message(field, kv);
  }
}

std::uint64_t unix_nanos(std::chrono::system_clock::time_point t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
  return ns.count() > 0 ? static_cast<std::uint64_t>(ns.count()) : 0;
}

}  // namespace

std::string encode_export(const std::vector<OperationRecord>& records, const KeyValues& resource) {
  protobuf::Writer res;
  std::vector<Span::Attribute> resource_attrs;
  for (const auto& [k, v] : resource)
    resource_attrs.push_back({k, v});
  encode_attributes(res, 1, resource_attrs);

  protobuf::Writer scope;
  scope.string(1, "sandboxio");
  scope.string(2, kSdkVersion);

  protobuf::Writer scope_spans;
  scope_spans.message(1, scope);
  for (const OperationRecord& r : records) {
    const Span s = to_span(r);
    protobuf::Writer span;
    span.string(1, from_hex(r.trace.trace_id()));
    span.string(2, from_hex(r.trace.span_id()));
    span.string(4, from_hex(r.trace.parent_span_id()));
    span.string(5, s.name);
    span.varint(6, static_cast<std::uint64_t>(s.kind));
    const std::uint64_t start = unix_nanos(r.started);
    span.fixed64(7, start);
    span.fixed64(8,
                 start + static_cast<std::uint64_t>(std::max<std::int64_t>(0, r.duration.count())));
    encode_attributes(span, 9, s.attributes);
    protobuf::Writer status;
    status.string(2, s.status_message);
    status.varint(3, static_cast<std::uint64_t>(s.status));
    span.message(15, status);
    // flags (16): the trace flags' sampled bit, and "the parent's remoteness is known".
    span.fixed32(16, 0x100u | (r.trace.parent_span_id().empty() ? 0u : 0x200u) | 0x1u);
    scope_spans.message(2, span);
  }

  protobuf::Writer resource_spans;
  resource_spans.message(1, res);
  resource_spans.message(2, scope_spans);
  protobuf::Writer request;
  request.message(1, resource_spans);
  return std::move(request).bytes();
}

}  // namespace sandboxio::telemetry
