// The operation record: one per operation, opened at its start, closed at its end, redacted
// once at close, then rendered by sinks (no-op, in-memory queue, JSON lines, log).
//
//   sandboxio::OperationRecord rec = sandboxio::open_record(ctx, sandboxio::Operation::Run, now);
//   ...
//   sandboxio::close_record(rec, sandboxio::Outcome::Ok, elapsed, redactor);
//   sink->write(rec);                                    // or to_json_line(rec)
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/exec_result.hpp"
#include "sandboxio/isolation.hpp"
#include "sandboxio/redact.hpp"
#include "sandboxio/result.hpp"
#include "sandboxio/trace.hpp"

namespace sandboxio {

enum class Operation : std::uint8_t {
  Create,
  Connect,
  Info,
  Run,
  RunCode,
  Stream,
  WriteFile,
  ReadFile,
  ListFiles,
  RemoveFile,
  Kill,
  CreateContext,
  SetLifetime,
  ListManaged,
  RemoveManaged,
  Pause,   // backend-specific (e2b://)
  Resume,  // backend-specific (e2b://)
  Egress,  // a connection a program in the sandbox made through the egress proxy
};

enum class Outcome : std::uint8_t { Ok, Failed, Timeout, Cancelled };

[[nodiscard]] std::string_view to_string(Operation op) noexcept;
[[nodiscard]] std::string_view to_string(Outcome outcome) noexcept;

/// One connection a program in the sandbox made through the egress proxy. It never holds a
/// path, a query or a header: only where it went, the decision, and byte counts.
struct EgressAttempt {
  std::string host{};  // as the client named it, normalised; empty when it named none
  std::uint16_t port = 0;
  std::string method{};  // "CONNECT", "GET"...
  bool allowed = false;
  /// Why it was refused, or why it failed after it was allowed; empty for a relayed one.
  std::string reason{};
  std::uint64_t bytes_out = 0;  // from the sandbox to the upstream (after the head)
  std::uint64_t bytes_in = 0;   // from the upstream to the sandbox
  /// The agent relayed its bytes on the socket the host connected (no copy through the host);
  /// the counts are the agent's then.
  bool handed_over = false;

  friend bool operator==(const EgressAttempt&, const EgressAttempt&) = default;
};

struct OperationRecord {
  std::uint64_t sequence = 0;  // per sandbox, from 1
  std::string backend{};       // DSN scheme
  std::string sandbox_id{};    // empty until the backend named it
  Operation operation = Operation::Run;
  std::optional<std::string> command{};             // only when AuditSettings::capture_commands
  std::chrono::system_clock::time_point started{};  // wall clock, given by the driver
  std::chrono::nanoseconds duration{0};
  Outcome outcome = Outcome::Ok;
  std::optional<int> error_code{};  // the SBX code number when outcome is not Ok
  std::string error_detail{};
  std::string network_policy{};  // NetworkPolicy::describe() of the policy in effect
  IsolationTier tier{};
  std::optional<int> exit_code{};
  std::optional<Termination> termination{};
  bool possible_orphan = false;  // teardown's grace expired
  /// The meter: bytes the caller sent into the sandbox (stdin, code, a written file) and bytes
  /// that came out (a command's output, streamed or kept; a read file).
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  std::optional<EgressAttempt> egress{};  // Operation::Egress: the connection
  /// The record's span in a W3C trace (CreateOptions::trace); unset when not traced.
  SpanIds trace{};
  bool closed = false;

  friend bool operator==(const OperationRecord&, const OperationRecord&) = default;
};

/// What a run in learning mode tried to reach: the "host:port" of every egress record, sorted,
/// each once; paste-ready for NetworkPolicy::allowing() or a routing file's `network`.
[[nodiscard]] std::vector<std::string> learned_allow_list(
    const std::vector<OperationRecord>& records);

/// Closes a record: sets outcome and duration and redacts every free-text field. Closing twice
/// does nothing the second time (the record is redacted exactly once).
void close_record(OperationRecord& record, Outcome outcome, std::chrono::nanoseconds duration,
                  const Redactor& redactor);

/// One JSON object and a trailing newline; keys are stable (see docs/reference/records.md).
[[nodiscard]] std::string to_json_line(const OperationRecord& record);

/// Where closed records go. write() must return promptly; the runtime bounds it by
/// SBX_AUDIT_TIMEOUT and applies the failure policy. Implementations may be called from a
/// thread other than the one that created them, one call at a time.
class AuditSink {
 public:
  virtual ~AuditSink() = default;
  [[nodiscard]] virtual Result<void> write(const OperationRecord& record) = 0;
  /// A warning about the sandbox (an UNKNOWN tier, a sink that timed out, a teardown that may
  /// have left an orphan). It is also in the sandbox's warnings(); the library never prints
  /// it. Must return promptly. The default drops it.
  virtual void warn(const Problem& problem) { (void)problem; }
};

/// Discards every record.
class NoopSink final : public AuditSink {
 public:
  Result<void> write(const OperationRecord&) override { return {}; }
};

}  // namespace sandboxio
