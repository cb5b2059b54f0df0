// The machine core every backend composes: the operation table (ids, admission, records,
// fail / complete / cancel), the queues a driver polls, output accounting with backpressure,
// the sticky fatal error, and the security rules of create(). A backend writes only its
// protocol; what every machine must do the same way is done here once.
//
//   struct MyState { bool started = false; };
//   class MyMachine final : public sandboxio::backend::MachineCore<MyState> { ... };
//   const OpId id = open(Operation::Info, now);       // admission and the record
//   if (!alive(id)) return id;                          // refused (queue full, fatal error)
//   complete(id, info, now);                            // Done event + closed record
//
// Every operation gets a deadline when it opens (Limits::operation_timeout); a backend that
// enforces its own (a command's timeout, create_timeout) overwrites it. When a deadline passes,
// due() hands the operation back to the backend, which stops its remote work and fails it with
// expired() (SBX_E1808) unless it has its own meaning for the timeout.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sandboxio/machine.hpp"
#include "sandboxio/redact.hpp"

namespace sandboxio::backend {

/// The requests and events a machine has for its driver, in the order it made them.
class Outbox {
 public:
  // Out of line: inlined, g++ 12 sees the variants' moves as maybe-uninitialized.
  void push(Event e);
  void push(Request r);
  [[nodiscard]] std::optional<Request> poll_request();
  [[nodiscard]] std::optional<Event> poll_event();

 private:
  std::deque<Request> requests_{};
  std::deque<Event> events_{};  // bounded as Limits describes
};

/// One command's output: collected for run() up to its limit, or handed over as Output events
/// for stream(), where the consumer's lag is bounded by Limits::stream_buffer.
struct OutputAccount {
  bool streaming = false;
  std::size_t limit = 0;  // run(): the most output kept
  Bytes out{}, err{};
  std::uint64_t offsets[2] = {0, 0};
  std::size_t unconsumed = 0;  // stream(): handed over, not yet consumed

  /// True while a stream's consumer is Limits::stream_buffer behind: stop reading its bytes.
  [[nodiscard]] bool held(const Limits& limits) const {
    return streaming && unconsumed >= limits.stream_buffer;
  }
  /// How many more bytes a stream may take now (run(): no bound here).
  [[nodiscard]] std::size_t room(const Limits& limits) const;
  /// Takes a piece of output: an Output event for a stream, appended for a run.
  /// OutputLimitExceeded when a run's output passes its limit (nothing is appended then).
  [[nodiscard]] std::optional<Problem> take(OpId op, StreamKind kind, std::string_view piece,
                                            Outbox& out);
  void consumed(std::size_t bytes) { unconsumed -= std::min(bytes, unconsumed); }
  /// The result's output fields: run()'s bytes moved out, `streamed` for a stream.
  void fill(ExecResult& r);
};

/// What every operation has, whatever its backend.
struct OpBase {
  Instant started{};
  OperationRecord record{};
  std::optional<Instant> deadline{};
  bool cancelled = false;
};

/// The problem of an operation whose deadline passed without a backend-specific meaning.
[[nodiscard]] Problem expired(Operation operation, std::chrono::milliseconds after);

/// "HOST", "HOST:PORT", "[V6]" or "[V6]:PORT" (the rest of a URL after its scheme): the host
/// name and the port (`default_port` when none is given). A bad text is InvalidOption whose
/// detail says what is wrong with it ("bad port"), for the caller to put in context.
struct HostPort {
  std::string host{};
  std::uint16_t port = 0;
};
[[nodiscard]] Result<HostPort> parse_host_port(std::string_view text, std::uint16_t default_port);

/// The problem of a file that does not exist in the sandbox.
[[nodiscard]] Problem missing_file(const std::string& path);

/// A sandbox path as every backend accepts it: absolute, no NUL, no ".." component.
[[nodiscard]] std::optional<Problem> check_path(const std::string& path);

/// The machine core. State is the backend's per-operation state; it may hold an
/// OutputAccount named `output` (then handle_consumed is done here).
template <class State>
class MachineCore : public Machine {
 public:
  struct Op : OpBase, State {};

  [[nodiscard]] std::string_view scheme() const noexcept override { return scheme_; }
  [[nodiscard]] IsolationTier tier() const noexcept override { return tier_; }

  void handle_consumed(OpId id, std::size_t bytes, Instant) override {
    if constexpr (requires(Op & o) { o.output.consumed(bytes); }) {
      if (Op* op = find_op(id)) op->output.consumed(bytes);
    }
  }
  void handle_driver_features(DriverFeatures features) override { driver_ = features; }
  [[nodiscard]] std::optional<Request> poll_request() override { return out_.poll_request(); }
  [[nodiscard]] std::optional<Event> poll_event() override { return out_.poll_event(); }

  /// What each open operation is waiting for, a line each (logs and debugging).
  [[nodiscard]] std::string describe(Instant now) const override {
    std::string text;
    for (const auto& [id, op] : ops_) {
      text += "op " + std::to_string(id) + " " + std::string(to_string(op.record.operation)) +
              " (" + std::to_string((now - op.started) / std::chrono::milliseconds(1)) + " ms)";
      if (op.cancelled) text += " cancelled";
      const std::string w = waiting_for(id);
      text += w.empty() ? std::string() : ": " + w;
      text += "\n";
    }
    if (fatal_) text += "fatal: " + fatal_->describe() + "\n";
    return text;
  }

 protected:
  MachineCore(std::string scheme, IsolationTier tier) : scheme_(std::move(scheme)), tier_(tier) {}

  /// Why the sandbox is gone, in this backend's words (records of commands that lost it).
  [[nodiscard]] virtual Problem gone_problem() const = 0;
  /// What operation `id` waits for now ("POST /containers/create"), or empty.
  [[nodiscard]] virtual std::string waiting_for(OpId) const { return {}; }
  /// Called as each operation opens, before it sends anything: the time, for housekeeping
  /// that must be current (a driver that idles between calls gives no timeout meanwhile).
  virtual void opening(Instant) {}

  /// Opens an operation and its record. It is failed at once (check alive()) when the machine
  /// had a fatal error, or when Limits::max_pending_operations are in flight (kill() is always
  /// admitted). `command` is kept in the record only with AuditSettings::capture_commands.
  OpId open(Operation operation, Instant now, std::string command = {}) {
    opening(now);
    const OpId id = ++next_op_;
    Op op{};
    op.started = now;
    op.record = new_record(operation);
    if (options_ && options_->audit.capture_commands && !command.empty())
      op.record.command = std::move(command);
    op.deadline = now + std::chrono::duration_cast<Instant::duration>(limits_.operation_timeout);
    const bool full = operation != Operation::Kill && ops_.size() >= limits_.max_pending_operations;
    ops_.emplace(id, std::move(op));
    if (fatal_) return fail(id, *fatal_, now);
    if (full) fail(id, queue_full(limits_), now);
    return id;
  }

  /// Hands a traced operation's span to the program it runs: TRACEPARENT in `env`, unless
  /// the caller set one of their own.
  void traced(OpId id, Env& env) const {
    auto it = ops_.find(id);
    if (it != ops_.end() && options_) trace_env(it->second.record, options_->trace, env);
  }

  /// The meter: `bytes` went into the sandbox with operation `id` (stdin, code, a file).
  void meter_in(OpId id, std::uint64_t bytes) {
    if (Op* op = find_op(id)) op->record.bytes_in = bytes;
  }

  [[nodiscard]] bool alive(OpId id) const { return ops_.count(id) != 0; }
  [[nodiscard]] Op* find_op(OpId id) {
    auto it = ops_.find(id);
    return it == ops_.end() ? nullptr : &it->second;
  }

  OpId fail(OpId id, Problem problem, Instant now) {
    auto it = ops_.find(id);
    if (it == ops_.end()) return id;
    out_.push(event::Failed{id, problem});
    close(it->second, Outcome::Failed, now, problem);
    ops_.erase(it);
    return id;
  }

  void complete(OpId id, Completion value, Instant now) {
    auto it = ops_.find(id);
    if (it == ops_.end()) return;
    const RecordEnding ending = record_completion(it->second.record, value, gone_problem());
    out_.push(event::Done{id, std::move(value)});
    close(it->second, ending.outcome, now, ending.problem);
    ops_.erase(it);
  }

  void cancelled(OpId id, Instant now, bool possible_orphan = false) {
    auto it = ops_.find(id);
    if (it == ops_.end()) return;
    out_.push(event::Cancelled{id, possible_orphan});
    it->second.record.possible_orphan = possible_orphan;
    close(it->second, Outcome::Cancelled, now, std::nullopt);
    ops_.erase(it);
  }

  /// A fatal machine error: every open operation fails with it, and so does every later one.
  void fail_machine(Problem problem, Instant now) {
    if (!fatal_) fatal_ = problem;
    std::vector<OpId> open_ops;
    for (const auto& [id, op] : ops_)
      open_ops.push_back(id);
    for (OpId id : open_ops)
      fail(id, *fatal_, now);
  }
  [[nodiscard]] const std::optional<Problem>& fatal() const { return fatal_; }

  /// The create options in effect: their limits, secrets and policy apply from now on.
  void adopt(const CreateOptions& options) {
    options_ = options;
    limits_ = options.limits;
    redactor_.add_secrets(options.env.secret_values());
    for (auto& [id, op] : ops_)  // the create (or connect) that brought the options
      if (!op.record.trace.traced()) trace_record(op.record, options_->trace);
  }

  /// Names the sandbox in the records of operations opened from now on (and of `op`).
  void name_sandbox(std::string id, OpId op = 0) {
    sandbox_id_ = std::move(id);
    if (Op* o = find_op(op)) o->record.sandbox_id = sandbox_id_;
  }
  [[nodiscard]] const std::string& sandbox_id() const { return sandbox_id_; }

  /// What info(), create() and connect() answer: this sandbox as the backend declares it.
  [[nodiscard]] SandboxInfo sandbox_info(SandboxState state, std::chrono::seconds lifetime) const {
    SandboxInfo info;
    info.backend = scheme_;
    info.id = sandbox_id_;
    info.tier = tier_;
    info.capabilities = capabilities();
    info.network = options_ ? options_->network : NetworkPolicy{};
    info.state = state;
    info.lifetime = lifetime;
    return info;
  }

  /// Operations whose deadline passed; their deadline is cleared (each is handed back once).
  [[nodiscard]] std::vector<OpId> due(Instant now) {
    std::vector<OpId> ids;
    for (auto& [id, op] : ops_) {
      if (op.deadline && now >= *op.deadline) {
        op.deadline.reset();
        ids.push_back(id);
      }
    }
    return ids;
  }
  /// The earliest operation deadline.
  [[nodiscard]] std::optional<Instant> ops_deadline() const {
    std::optional<Instant> best;
    for (const auto& [id, op] : ops_)
      best = earliest(best, op.deadline);
    return best;
  }
  static std::optional<Instant> earliest(std::optional<Instant> a, std::optional<Instant> b) {
    if (!a) return b;
    if (!b) return a;
    return std::min(*a, *b);
  }
  /// Fails an operation whose deadline passed (SBX_E1808), after the backend stopped its work.
  void expire(OpId id, Instant now) {
    if (Op* op = find_op(id))
      fail(id, expired(op->record.operation, limits_.operation_timeout), now);
  }

  void warn(Problem problem) { out_.push(event::Warning{std::move(problem)}); }

  /// A record numbered and labelled like an operation's (sandbox, tier, policy).
  [[nodiscard]] OperationRecord new_record(Operation operation) {
    OperationRecord record;
    record.sequence = ++sequence_;
    record.backend = scheme_;
    record.sandbox_id = sandbox_id_;
    record.operation = operation;
    record.tier = tier_;
    record.network_policy = (options_ ? options_->network : NetworkPolicy{}).describe();
    if (options_) trace_record(record, options_->trace);
    return record;
  }
  /// Closes and emits a record of something nobody submitted (an egress connection a program
  /// in the sandbox made), from `started` to `now`.
  void emit_record(OperationRecord record, Instant started, Instant now, Outcome outcome,
                   const std::optional<Problem>& problem) {
    if (problem) {
      record.error_code = static_cast<int>(problem->code);
      record.error_detail = problem->detail;
    }
    sandboxio::close_record(record, outcome, now - started, redactor_);
    out_.push(event::Record{std::move(record), started});
  }

  Outbox out_{};
  bool gone_ = false;  // the sandbox is known to be gone (killed, reaped, its lifetime ended)
  Redactor redactor_{};
  Limits limits_{};
  DriverFeatures driver_{};  // what the driver said it can do beyond bytes
  std::optional<CreateOptions> options_{};
  std::map<OpId, Op> ops_{};

 private:
  void close(Op& op, Outcome outcome, Instant now, const std::optional<Problem>& problem) {
    if (problem) {
      op.record.error_code = static_cast<int>(problem->code);
      op.record.error_detail = problem->detail;
    }
    sandboxio::close_record(op.record, outcome, now - op.started, redactor_);
    out_.push(event::Record{op.record, op.started});
  }

  std::string scheme_;
  IsolationTier tier_;
  std::string sandbox_id_{};
  std::optional<Problem> fatal_{};
  OpId next_op_ = 0;
  std::uint64_t sequence_ = 0;
};

}  // namespace sandboxio::backend
