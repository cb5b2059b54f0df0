// Bookkeeping shared by the machines (no I/O).
#include "sandboxio/machine.hpp"

#include <string>

namespace sandboxio {

Problem queue_full(const Limits& limits) {
  return Problem{
      errc::QueueFull,
      std::to_string(limits.max_pending_operations) + " operations are already in flight",
      "Wait for some to finish (drain poll_event) before submitting more."};
}

void trace_record(OperationRecord& record, const std::optional<TraceContext>& trace) {
  if (!trace || trace->trace_id.empty()) return;
  record.trace.assign(trace->trace_id, {}, trace->parent_span_id);
  record.trace.span = span_id_for(trace->span_seed, record.sequence);
  record.trace.sampled = trace->sampled;
}

void trace_env(const OperationRecord& record, const std::optional<TraceContext>& trace, Env& env) {
  if (!trace || !record.trace.traced() || env.find("TRACEPARENT") != nullptr) return;
  env.set("TRACEPARENT", trace->traceparent(record.trace.span_id()));
}

RecordEnding record_completion(OperationRecord& record, Completion& value, const Problem& gone) {
  if (auto* r = std::get_if<ExecResult>(&value)) {
    r->backend = record.backend;
    r->bytes_in = record.bytes_in;
    if (r->bytes_out == 0) r->bytes_out = r->stdout_bytes.size() + r->stderr_bytes.size();
    record.exit_code = r->exit_code;
    record.termination = r->termination;
    record.bytes_out = r->bytes_out;
  } else if (const auto* data = std::get_if<Bytes>(&value)) {
    record.bytes_out = data->size();
  }
  if (record.termination == Termination::Timeout)
    return {Outcome::Timeout, Problem{errc::ExecutionTimeout, "killed at its timeout", {}}};
  if (record.termination == Termination::SandboxGone) return {Outcome::Failed, gone};
  return {};
}

}  // namespace sandboxio
