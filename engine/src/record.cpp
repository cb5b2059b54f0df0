#include "sandboxio/record.hpp"

#include <algorithm>

#include "sandboxio/codec/json_writer.hpp"
#include "sandboxio/errors.hpp"

namespace sandboxio {

std::string_view to_string(Operation op) noexcept {
  switch (op) {
    case Operation::Create:
      return "create";
    case Operation::Connect:
      return "connect";
    case Operation::Info:
      return "info";
    case Operation::Run:
      return "run";
    case Operation::RunCode:
      return "run_code";
    case Operation::Stream:
      return "stream";
    case Operation::WriteFile:
      return "write_file";
    case Operation::ReadFile:
      return "read_file";
    case Operation::ListFiles:
      return "list_files";
    case Operation::RemoveFile:
      return "remove_file";
    case Operation::Kill:
      return "kill";
    case Operation::CreateContext:
      return "create_context";
    case Operation::SetLifetime:
      return "set_lifetime";
    case Operation::ListManaged:
      return "list_managed";
    case Operation::RemoveManaged:
      return "remove_managed";
    case Operation::Pause:
      return "pause";
    case Operation::Resume:
      return "resume";
    case Operation::Egress:
      return "egress";
  }
  return "unknown";
}

std::string_view to_string(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::Ok:
      return "ok";
    case Outcome::Failed:
      return "failed";
    case Outcome::Timeout:
      return "timeout";
    case Outcome::Cancelled:
      return "cancelled";
  }
  return "unknown";
}

std::vector<std::string> learned_allow_list(const std::vector<OperationRecord>& records) {
  std::vector<std::string> hosts;
  for (const OperationRecord& r : records) {
    if (!r.egress || r.egress->host.empty()) continue;
    hosts.push_back(r.egress->host + ":" + std::to_string(r.egress->port));
  }
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  return hosts;
}

void close_record(OperationRecord& record, Outcome outcome, std::chrono::nanoseconds duration,
                  const Redactor& redactor) {
  if (record.closed) return;
  record.outcome = outcome;
  record.duration = duration;
  if (record.command) record.command = redactor.redact(*record.command);
  record.error_detail = redactor.redact(record.error_detail);
  record.sandbox_id = redactor.redact(record.sandbox_id);
  if (record.egress) {
    record.egress->host = redactor.redact(record.egress->host);
    record.egress->reason = redactor.redact(record.egress->reason);
  }
  record.closed = true;
}

std::string to_json_line(const OperationRecord& r) {
  using namespace std::chrono;
  JsonWriter w;
  w.begin_object();
  w.key("seq").value(static_cast<std::uint64_t>(r.sequence));
  w.key("backend").value(r.backend);
  w.key("sandbox_id").value(r.sandbox_id);
  w.key("operation").value(to_string(r.operation));
  w.key("started_unix_ms")
      .value(static_cast<std::int64_t>(
          duration_cast<milliseconds>(r.started.time_since_epoch()).count()));
  w.key("duration_ms").value(static_cast<double>(r.duration.count()) / 1e6);
  w.key("outcome").value(to_string(r.outcome));
  if (r.error_code) {
    const ErrorInfo* info = find_error(*r.error_code);
    w.key("error_code").value(info != nullptr ? info->id : std::string_view("SBX_E?"));
    w.key("error_detail").value(r.error_detail);
  }
  if (r.command) w.key("command").value(*r.command);
  w.key("network_policy").value(r.network_policy);
  w.key("isolation").value(r.tier.name());
  if (r.exit_code) w.key("exit_code").value(*r.exit_code);
  if (r.termination) w.key("termination").value(to_string(*r.termination));
  if (r.possible_orphan) w.key("possible_orphan").value(true);
  w.key("bytes_in").value(static_cast<std::uint64_t>(r.bytes_in));
  w.key("bytes_out").value(static_cast<std::uint64_t>(r.bytes_out));
  if (r.trace.traced()) {
    w.key("trace_id").value(r.trace.trace_id());
    w.key("span_id").value(r.trace.span_id());
    if (!r.trace.parent_span_id().empty()) w.key("parent_span_id").value(r.trace.parent_span_id());
  }
  if (r.egress) {
    const EgressAttempt& e = *r.egress;
    w.key("egress").begin_object();
    w.key("host").value(e.host);
    w.key("port").value(static_cast<std::int64_t>(e.port));
    w.key("method").value(e.method);
    w.key("allowed").value(e.allowed);
    if (!e.reason.empty()) w.key("reason").value(e.reason);
    w.key("bytes_out").value(static_cast<std::uint64_t>(e.bytes_out));
    w.key("bytes_in").value(static_cast<std::uint64_t>(e.bytes_in));
    if (e.handed_over) w.key("handed_over").value(true);
    w.end_object();
  }
  w.end_object();
  std::string line = std::move(w).str();
  line.push_back('\n');
  return line;
}

}  // namespace sandboxio
