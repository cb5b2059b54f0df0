// Where a sandbox's closed records and its warnings go, the same for every driver (the sync
// API's session, the Asio session, the Python extension's Engine): the process's OTLP exporter
// when traces are on, the audit sink through the process's shared dispatcher, and the
// sandbox's own warnings(). Under AuditFailurePolicy::Fail a record the sink did not take
// fails the next operation to complete: the driver asks take_failure() as one does.
//
//   RecordRouter router(options_, [this](const Problem& p) { warnings_.push_back(p); });
//   router.record(std::move(ev.record), wall_of(ev.started));   // event::Record
//   router.warn(problem);                                          // event::Warning
//   if (auto p = router.take_failure()) { /* fail the operation that completed */ }
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include "sandboxio/create_options.hpp"
#include "sandboxio/errors.hpp"
#include "sandboxio/record.hpp"

namespace sandboxio {

class AuditDispatcher;
namespace telemetry {
class OtlpExporter;
}

class RecordRouter {
 public:
  using WarnFn = std::function<void(const Problem&)>;
  /// Attaches tracing to `options` (a caller's traceparent, TRACEPARENT for the commands:
  /// telemetry::attach); `keep` puts a warning in the sandbox's warnings().
  RecordRouter(CreateOptions& options, WarnFn keep);
  ~RecordRouter();
  RecordRouter(const RecordRouter&) = delete;
  RecordRouter& operator=(const RecordRouter&) = delete;

  /// A closed record of an operation that began at the wall-clock time `started`.
  void record(OperationRecord record, std::chrono::system_clock::time_point started);
  /// A warning: kept, and given to the audit sink's warn().
  void warn(const Problem& problem);
  /// Under AuditFailurePolicy::Fail: the first record the sink failed to take since the last
  /// call (SBX_E1601 or SBX_E1602), once.
  [[nodiscard]] std::optional<Problem> take_failure();

 private:
  std::shared_ptr<AuditSink> sink_;
  WarnFn keep_;
  std::shared_ptr<AuditDispatcher> audit_;
  std::shared_ptr<telemetry::OtlpExporter> exporter_;
  std::optional<Problem> failure_;
};

}  // namespace sandboxio
