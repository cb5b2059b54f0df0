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

RecordEnding record_completion(OperationRecord& record, const Completion& value,
                               const Problem& gone) {
  if (const auto* r = std::get_if<ExecResult>(&value)) {
    record.exit_code = r->exit_code;
    record.termination = r->termination;
  }
  if (record.termination == Termination::Timeout)
    return {Outcome::Timeout, Problem{errc::ExecutionTimeout, "killed at its timeout", {}}};
  if (record.termination == Termination::SandboxGone) return {Outcome::Failed, gone};
  return {};
}

}  // namespace sandboxio
