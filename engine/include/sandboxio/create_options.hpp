// CreateOptions: everything create() needs beyond the DSN. Every field has a safe default:
// network denied, a 10-minute lifetime, no captured commands.
//
//   sandboxio::CreateOptions opts;
//   opts.lifetime = std::chrono::minutes(30);
//   opts.env.set_secret("OPENAI_API_KEY", key);   // passed in, redacted from every record
//   opts.require_isolation = sandboxio::IsolationTier::Container;
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/isolation.hpp"
#include "sandboxio/network_policy.hpp"
#include "sandboxio/resources.hpp"
#include "sandboxio/result.hpp"
#include "sandboxio/trace.hpp"

namespace sandboxio {

class AuditSink;

/// Environment variables for the sandbox. Values marked secret reach the sandbox unchanged
/// but are redacted from every operation record.
class Env {
 public:
  struct Var {
    std::string name{};
    std::string value{};
    bool secret = false;
    friend bool operator==(const Var&, const Var&) = default;
  };

  /// Sets (or replaces) a variable.
  void set(std::string name, std::string value) { put(std::move(name), std::move(value), false); }
  /// Sets (or replaces) a variable whose value must never appear in a record or a log.
  void set_secret(std::string name, std::string value) {
    put(std::move(name), std::move(value), true);
  }
  [[nodiscard]] const std::vector<Var>& vars() const noexcept { return vars_; }
  [[nodiscard]] const Var* find(std::string_view name) const noexcept;
  [[nodiscard]] bool empty() const noexcept { return vars_.empty(); }
  /// The values of the secret variables, for the redactor.
  [[nodiscard]] std::vector<std::string> secret_values() const;
  /// Names are [A-Za-z_][A-Za-z0-9_]*; values hold no NUL byte (SBX_E1004 otherwise).
  [[nodiscard]] Result<void> validate() const;

  friend bool operator==(const Env&, const Env&) = default;

 private:
  void put(std::string name, std::string value, bool secret);
  std::vector<Var> vars_{};  // in insertion order
};

enum class AuditFailurePolicy : std::uint8_t {
  Warn,  // a failing or slow sink produces a warning; the operation goes on (default)
  Fail,  // a failing or slow sink fails the operation with SBX_E160x
};

struct AuditSettings {
  /// Record the command line and code of each operation (redacted). Off by default: commands
  /// often carry data the operator should not keep.
  bool capture_commands = false;
  AuditFailurePolicy on_failure = AuditFailurePolicy::Warn;
  /// How long a sink may take per record (SBX_AUDIT_TIMEOUT overrides the default).
  std::chrono::milliseconds sink_timeout{1000};
  /// Where records go; null means nowhere (the no-op sink).
  std::shared_ptr<AuditSink> sink{};

  friend bool operator==(const AuditSettings&, const AuditSettings&) = default;
};

inline constexpr std::chrono::seconds kDefaultLifetime{600};
inline constexpr std::chrono::seconds kMaxLifetime{24 * 3600};
inline constexpr std::chrono::seconds kDefaultCreateTimeout{120};

/// The bounds of a machine's queues and the default deadline of its operations, per sandbox
/// (CreateOptions::limits). Every queue a machine keeps is bounded by these: at most
/// max_pending_operations operations are in flight (one more fails at once with SBX_E1807
/// QueueFull), and each queues at most its end event, its record and stream_buffer bytes of
/// unconsumed output. So the event queue, and a driver's per-operation inboxes, never hold more
/// than max_pending_operations x (2 events + stream_buffer bytes).
struct Limits {
  std::size_t stream_buffer = std::size_t{1} << 20;  // unconsumed output bytes per stream
  std::size_t max_pending_operations = 256;          // operations in flight per machine
  /// The deadline of every operation that has none of its own (info, kill, connect, file
  /// transfers, listing): past it, the operation's exchanges are dropped and it fails with
  /// SBX_E1808 OperationTimeout. Commands use Command::timeout, create() create_timeout.
  std::chrono::milliseconds operation_timeout{300'000};

  friend bool operator==(const Limits&, const Limits&) = default;
};

struct CreateOptions {
  /// How long the sandbox may live, enforced on the provider side; mandatory, 10 min default.
  std::chrono::seconds lifetime = kDefaultLifetime;
  /// How long create() may take (image pull excluded from nothing: it is the whole call).
  std::chrono::milliseconds create_timeout = kDefaultCreateTimeout;
  Env env{};
  /// Working directory for commands; empty means the image's default.
  std::string workdir{};
  /// Extra labels or metadata; keys starting with "io.sandboxio." are reserved.
  std::map<std::string, std::string> labels{};
  NetworkPolicy network{};  // deny all by default
  Resources resources{};
  std::optional<IsolationTier> require_isolation{};
  AuditSettings audit{};
  /// Keep the sandbox alive when this process exits (until its lifetime ends). Off by default.
  bool outlive_owner = false;
  /// How long teardown may take after a cancellation before the record says the sandbox may
  /// be orphaned. Unset: the transport fills it from SBX_TEARDOWN_GRACE (default 5 s).
  std::optional<std::chrono::milliseconds> teardown_grace{};
  /// Queue bounds and the default operation deadline for this sandbox's machine.
  Limits limits{};
  /// The W3C trace this sandbox's records are spans of, under the caller's span: each record
  /// gets a span id, and each command and code cell sees TRACEPARENT naming its own span.
  /// Unset: the transport takes TRACEPARENT from the environment, or starts a trace when
  /// OpenTelemetry export is on (docs/how-to/observability.md); otherwise nothing is traced.
  std::optional<TraceContext> trace{};
  /// A directory to write a flight-recorder trace of this sandbox's session into (made 0700
  /// when missing; the trace is 0600): every input its machine consumed, so that `sandboxio
  /// replay` can run the session again offline. Empty: SBX_RECORD=DIR, else no recording.
  /// docs/how-to/observability.md says what a trace holds.
  std::string record{};

  /// Checks every field; the first problem found is returned.
  [[nodiscard]] Result<void> validate() const;

  friend bool operator==(const CreateOptions&, const CreateOptions&) = default;
};

}  // namespace sandboxio
