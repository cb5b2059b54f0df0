// OpenTelemetry traces from operation records: every closed record becomes one span (its start
// is the record's open, its end the close), exported as OTLP/HTTP protobuf by a bounded,
// batching background exporter that never blocks an operation.
//
// Zero code: set OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) and every sandbox
// of the process exports; TRACEPARENT in the environment, or CreateOptions::trace, makes its
// spans children of the caller's. Explicitly:
//
//   auto exporter = std::make_shared<sandboxio::telemetry::OtlpExporter>(settings);
//   opts.audit.sink = exporter;                 // this sandbox's spans, to `settings.endpoint`
//   ...
//   exporter->flush(std::chrono::seconds(2));
//
// See docs/how-to/observability.md for the spans, their attributes and the OTEL_* variables.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "sandboxio/create_options.hpp"
#include "sandboxio/record.hpp"
#include "sandboxio/result.hpp"

namespace sandboxio::telemetry {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

/// The version sandboxio reports as `telemetry.sdk.version` and as its spans' scope version.
inline constexpr std::string_view kSdkVersion = "0.1.0";

struct OtlpSettings {
  /// The traces endpoint, the whole URL: "http://127.0.0.1:4318/v1/traces" (http or https).
  std::string endpoint = "http://localhost:4318/v1/traces";
  KeyValues headers{};   // sent with every export ("authorization", "x-honeycomb-team"...)
  KeyValues resource{};  // resource attributes; service.name is always among them
  std::chrono::milliseconds timeout{10'000};        // one export, connect to reply
  std::chrono::milliseconds schedule_delay{5'000};  // a batch waits at most this long
  std::size_t max_queue = 2048;                     // spans waiting; more are dropped and counted
  std::size_t max_batch = 512;                      // spans per export
  std::string ca_file{};  // PEM trust anchors for https; empty: the system store
};

/// The exporter the OTEL_* variables ask for: nullopt when traces are off
/// (OTEL_SDK_DISABLED=true, OTEL_TRACES_EXPORTER=none, or neither OTEL_TRACES_EXPORTER=otlp
/// nor an OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set). SBX_E1003 InvalidEnvironment for a
/// value it cannot use (a protocol other than http/protobuf, a bad URL or number).
[[nodiscard]] Result<std::optional<OtlpSettings>> settings_from_env();

struct ExporterStats {
  std::uint64_t exported = 0;  // spans the endpoint accepted
  std::uint64_t dropped = 0;   // spans lost: the queue was full, or their export failed
  std::uint64_t failed_exports = 0;
  std::string last_error{};  // why the last failed export failed
};

/// A sink that turns records into spans and exports them from a thread of its own. write()
/// only queues (a full queue drops the span and counts it): an operation never waits for the
/// endpoint. A failed export is not retried; its spans count as dropped.
class OtlpExporter final : public AuditSink {
 public:
  explicit OtlpExporter(OtlpSettings settings);
  /// Flushes what is queued, waiting at most the export timeout (at most 3 s).
  ~OtlpExporter() override;
  OtlpExporter(const OtlpExporter&) = delete;
  OtlpExporter& operator=(const OtlpExporter&) = delete;

  Result<void> write(const OperationRecord& record) override;
  /// Exports everything queued now; true when it all went out (or was dropped) within `within`.
  bool flush(std::chrono::milliseconds within);
  [[nodiscard]] ExporterStats stats() const;
  [[nodiscard]] const OtlpSettings& settings() const noexcept { return settings_; }

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
  OtlpSettings settings_;
};

/// Posts an empty export to `settings.endpoint` and waits for the answer (at most the export
/// timeout): whether the collector is there and accepts OTLP/HTTP protobuf.
[[nodiscard]] Result<void> probe(const OtlpSettings& settings);

/// The process's exporter, made from the OTEL_* variables on first use: null when traces are
/// off or the variables are unusable (then `problem` says why, once). It flushes at exit.
[[nodiscard]] std::shared_ptr<OtlpExporter> process_exporter(
    std::optional<Problem>* problem = nullptr);

/// Makes `exporter` the process's from now on, for the sandboxes opened after this call
/// (null: traces off). For programs that configure telemetry in code, not with OTEL_*.
void install_process_exporter(std::shared_ptr<OtlpExporter> exporter);

/// Gives `options` its trace: the caller's CreateOptions::trace (ids it left empty are drawn
/// now), else TRACEPARENT from the environment, else a new trace when `exporting`. Otherwise it
/// stays unset and nothing is traced. An unusable TRACEPARENT is ignored, as W3C asks, and
/// returned as a warning (SBX_E1003).
[[nodiscard]] std::optional<Problem> prepare_trace(CreateOptions& options, bool exporting);

/// What a transport does for each sandbox it opens: prepares its trace and returns the
/// process's exporter (null when traces are off). Unusable OTEL_* variables or TRACEPARENT
/// become warnings through `warn`: telemetry never fails a sandbox.
[[nodiscard]] std::shared_ptr<OtlpExporter> attach(CreateOptions& options,
                                                   const std::function<void(const Problem&)>& warn);

/// One span as exported (for tests and custom exporters).
struct Span {
  struct Attribute {
    std::string key{};
    std::variant<std::string, std::int64_t, bool> value{};
    friend bool operator==(const Attribute&, const Attribute&) = default;
  };
  std::string name{};
  int kind = 1;  // OTLP SpanKind: 1 internal, 3 client
  std::vector<Attribute> attributes{};
  int status = 0;  // OTLP StatusCode: 0 unset, 2 error
  std::string status_message{};
  [[nodiscard]] const Attribute* find(std::string_view key) const;
};
[[nodiscard]] Span to_span(const OperationRecord& record);

/// An OTLP ExportTraceServiceRequest (protobuf) holding `records` as spans, under `resource`.
[[nodiscard]] std::string encode_export(const std::vector<OperationRecord>& records,
                                        const KeyValues& resource);

/// "k1=v1,k2=v2" as OTEL_RESOURCE_ATTRIBUTES and OTEL_EXPORTER_OTLP_HEADERS write it (values
/// percent-decoded, blanks around keys and values trimmed). InvalidEnvironment on a bad pair;
/// with `secret_values` (headers: credentials) its message shows the key, never the value.
[[nodiscard]] Result<KeyValues> parse_key_values(std::string_view text, std::string_view variable,
                                                 bool secret_values = false);

}  // namespace sandboxio::telemetry
