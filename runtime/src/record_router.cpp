#include "sandboxio/record_router.hpp"

#include <utility>

#include "sandboxio/sinks.hpp"
#include "sandboxio/telemetry.hpp"

namespace sandboxio {

RecordRouter::RecordRouter(CreateOptions& options, WarnFn keep)
    : sink_(options.audit.sink),
      keep_(std::move(keep)),
      audit_(shared_audit_dispatcher(options.audit)) {
  exporter_ = telemetry::attach(options, [this](const Problem& p) { warn(p); });
}

RecordRouter::~RecordRouter() = default;

void RecordRouter::record(OperationRecord record, std::chrono::system_clock::time_point started) {
  record.started = started;
  if (exporter_) (void)exporter_->write(record);
  if (!audit_) return;
  auto delivered = audit_->deliver(record, [this](const Problem& p) { warn(p); });
  if (!delivered && !failure_) failure_ = delivered.problem();
}

void RecordRouter::warn(const Problem& problem) {
  if (keep_) keep_(problem);
  if (sink_) sink_->warn(problem);
}

std::optional<Problem> RecordRouter::take_failure() {
  return std::exchange(failure_, std::nullopt);
}

}  // namespace sandboxio
