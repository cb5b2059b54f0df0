// Machine: the sans-I/O state machine every backend implements. It consumes bytes, connection
// events and timer expiries, and emits requests (connect, send, close), events (output,
// results, failures, records, warnings) and its next deadline. It never performs I/O and never
// reads a clock: time enters as `now` (a monotonic Instant chosen by the driver).
//
//   OpId op = m.submit_run(cmd, now);
//   while (auto req = m.poll_request()) transport.perform(*req);   // then feed handle_*()
//   while (auto ev = m.poll_event()) dispatch(*ev);
//   if (auto d = m.poll_deadline()) transport.wake_at(*d);
//
// Driver contract (the same for the simulated, blocking and Asio transports):
//  1. After every handle_*() or submit_*() call, drain poll_request() then poll_event(), then
//     read poll_deadline(). No user code may call back into the machine while it runs
//     (events are values, so there is no re-entrancy).
//  2. Bytes: handle_bytes() consumes what it can and returns the count; bytes it did not
//     consume must be offered again after the consumer made room (backpressure: a stream's
//     output waits in the machine up to Limits::stream_buffer bytes until handle_consumed()).
//  3. Deadlines: call handle_timeout(now) once now >= poll_deadline().
//  4. Errors: an operation fails with an event::Failed carrying an SBX Problem. A fatal machine
//     error (protocol violation on the control connection) fails every pending operation and
//     is sticky: later submissions fail at once with the same problem.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sandboxio/capabilities.hpp"
#include "sandboxio/create_options.hpp"
#include "sandboxio/exec_result.hpp"
#include "sandboxio/file_info.hpp"
#include "sandboxio/isolation.hpp"
#include "sandboxio/managed_sandbox.hpp"
#include "sandboxio/network_policy.hpp"
#include "sandboxio/output.hpp"
#include "sandboxio/record.hpp"
#include "sandboxio/result.hpp"

namespace sandboxio {

/// The driver's monotonic clock as a machine sees it: a clock with no now(), so no machine can
/// read it. Its epoch is the driver's choice (the steady clock's, or virtual time's zero).
struct MachineClock {
  using rep = std::int64_t;
  using period = std::nano;
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<MachineClock>;
  static constexpr bool is_steady = true;
};
/// A point in the driver's monotonic time. A duration does not convert to it by accident:
/// `now + timeout` is an Instant, `later - now` a duration.
using Instant = MachineClock::time_point;
/// A connection the machine asked for; numbered by the machine from 1.
using ConnId = std::uint32_t;
/// An operation submitted to the machine; numbered by the machine from 1.
using OpId = std::uint64_t;

/// Where a connection goes: a Unix socket, a TCP port, or a process the transport starts.
struct Endpoint {
  enum class Kind : std::uint8_t { Unix, Tcp, Process };
  Kind kind = Kind::Unix;
  std::string address{};  // socket path (Unix), host name (Tcp), what it is (Process)
  std::uint16_t port = 0;
  bool tls = false;
  std::string server_name{};  // SNI and certificate name when tls; defaults to address
  std::string ca_file{};      // PEM trust anchors when tls; empty: the system store
  std::string cert_file{};    // PEM client certificate when tls (Docker's tcp:// with TLS)
  std::string key_file{};     // PEM private key of cert_file
  /// TLS only: the application protocols offered by ALPN, in order ("h2"). When given, the
  /// server must agree to one of them, or the handshake fails with SBX_E1805.
  std::vector<std::string> alpn{};
  /// Unix only: the process that must be listening at the other end (its pid as the
  /// transport sees it, checked with SO_PEERCRED); 0 checks nothing. A connection to anyone
  /// else fails with ConnectionFailed before the machine sees a byte.
  std::int64_t peer_pid = 0;
  /// Process only: the program (an absolute path) and its arguments. The transport starts it
  /// with one end of a socket pair as its stdin, stdout and stderr, in a session of its own
  /// with an empty environment but PATH; the connection is the other end (sandboxio/spawn.hpp).
  /// Closing the connection kills the process (SIGKILL) and reaps it.
  std::vector<std::string> argv{};

  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

/// A command to run (run() keeps the output; stream() hands it over as it comes).
struct Command {
  std::vector<std::string> argv{};
  Env env{};
  std::string workdir{};  // empty: the sandbox's default
  std::chrono::milliseconds timeout{60'000};
  Bytes stdin_data{};  // written to the process's stdin, which is then closed
  /// run() only: the most output kept in memory; more fails with SBX_E1303.
  std::size_t output_limit = std::size_t{64} << 20;

  friend bool operator==(const Command&, const Command&) = default;
};

/// Code for run_code().
struct CodeRequest {
  std::string code{};
  std::string language = "python";
  std::optional<std::string> context{};  // a context from create_context() (StatefulCode)
  std::chrono::milliseconds timeout{60'000};
  Env env{};

  friend bool operator==(const CodeRequest&, const CodeRequest&) = default;
};

/// What info() and create() return.
struct SandboxInfo {
  std::string backend{};
  std::string id{};
  IsolationTier tier{};
  CapabilitySet capabilities{};
  NetworkPolicy network{};
  SandboxState state = SandboxState::Unknown;
  std::chrono::seconds lifetime{0};
  /// The agent inside the sandbox that serves its commands and files, and how it is reached
  /// ("sandboxio-agent 0.1.0 (direct socket)"); empty when they go through the backend's own
  /// API (docker://IMAGE?agent=off).
  std::string agent{};

  friend bool operator==(const SandboxInfo&, const SandboxInfo&) = default;
};

/// A stateful code context (StatefulCode): variables survive between run_code() calls.
struct CodeContext {
  std::string id{};
  std::string language{};

  friend bool operator==(const CodeContext&, const CodeContext&) = default;
};

namespace request {
struct Open {
  ConnId conn{};
  Endpoint endpoint{};
  /// The driver may answer with a connection another machine left idle for reuse
  /// (Close::reusable_for; then handle_reused, not handle_connected). Off: a new connection.
  bool may_reuse = false;
};
struct Send {
  ConnId conn{};
  Bytes data{};
};
struct HalfClose {  // shutdown(SHUT_WR)
  ConnId conn{};
};
struct Close {
  ConnId conn{};
  /// Nonzero: the connection is idle between HTTP exchanges and its peer keeps it open for
  /// this much longer. A driver may keep it that long and answer another machine's Open for
  /// the same endpoint with it (handle_reused) instead of a new connection; or just close it.
  std::chrono::nanoseconds reusable_for{0};
};
/// Hands the connected socket of `conn` to the program at the other end of `via` (a Unix or
/// Process connection): `data` is queued on `via` after what it holds, with the socket's
/// descriptor riding on its first byte (SCM_RIGHTS). From then on `conn` is not the driver's:
/// it is neither read nor written nor named in a handle_*() call again, and its descriptor
/// here is closed once sent. Asked only of a driver that said DriverFeatures::pass_sockets,
/// and only right after handle_connected(conn), before the driver read anything from it.
struct Pass {
  ConnId conn{};
  ConnId via{};
  Bytes data{};
};
/// Which of these owners ("host:pid", from io.sandboxio.owner labels) are gone? The driver
/// answers with handle_owners_gone() (the machine cannot look at processes itself).
struct ProbeOwners {
  std::vector<std::string> owners{};
};
}  // namespace request
using Request = std::variant<request::Open, request::Send, request::HalfClose, request::Close,
                             request::ProbeOwners, request::Pass>;

/// What a driver can do beyond connections and bytes; it says so once, before the first
/// submit (Machine::handle_driver_features). A machine asks nothing beyond what was said.
struct DriverFeatures {
  /// It performs request::Pass (the POSIX link of the sync API and the Asio transport do).
  bool pass_sockets = false;

  friend bool operator==(const DriverFeatures&, const DriverFeatures&) = default;
};

/// The value an operation completes with.
using Completion = std::variant<std::monostate,                // kill, write_file, remove_file, ...
                                SandboxInfo,                   // create, connect, info
                                ExecResult,                    // run, run_code, stream (at its end)
                                Bytes,                         // read_file
                                std::vector<FileInfo>,         // list_files
                                CodeContext,                   // create_context
                                std::vector<ManagedSandbox>>;  // list_managed

namespace event {
struct Output {  // a chunk of a stream()'s output
  OpId op{};
  OutputChunk chunk{};
};
struct Done {
  OpId op{};
  Completion value{};
};
struct Failed {
  OpId op{};
  Problem problem{};
};
struct Cancelled {  // the operation was cancelled and its remote work stopped
  OpId op{};
  bool possible_orphan = false;  // the teardown grace ran out first
};
struct Record {  // a closed, redacted operation record
  OperationRecord record{};
  Instant started{};  // when the operation was submitted, for the driver's wall-clock stamp
};
struct Warning {
  Problem problem{};
};
}  // namespace event
using Event = std::variant<event::Output, event::Done, event::Failed, event::Cancelled,
                           event::Record, event::Warning>;

/// Helpers every machine's operation bookkeeping shares.
/// The problem a submission fails with when Limits::max_pending_operations are in flight.
[[nodiscard]] Problem queue_full(const Limits& limits);

/// How a completed operation ends in its record. An ExecResult's exit code and termination go
/// into the record; a command killed at its timeout is Outcome::Timeout (SBX_E1302), one whose
/// sandbox ended under it is Outcome::Failed with `gone`; anything else is Outcome::Ok.
/// Labels a record with its span in `trace` (nothing when there is none, or it has no trace id
/// yet): the trace, a span id from the record's sequence, the caller's span as parent.
void trace_record(OperationRecord& record, const std::optional<TraceContext>& trace);
/// Hands a traced record's span to the program it runs: TRACEPARENT in `env`, unless the
/// caller set one of their own.
void trace_env(const OperationRecord& record, const std::optional<TraceContext>& trace, Env& env);

struct RecordEnding {
  Outcome outcome = Outcome::Ok;
  std::optional<Problem> problem{};
};
/// It also meters an ExecResult: its backend and bytes in from the record, its bytes out (the
/// output a backend counted, else what it kept) into the record; a read file's size too.
[[nodiscard]] RecordEnding record_completion(OperationRecord& record, Completion& value,
                                             const Problem& gone);

/// The security rules of create(), enforced from what a backend declares: a tier that does not
/// satisfy require_isolation, a backend that declares no network policy at all, or a policy,
/// resource or disk limit beyond what it declares, refuse to create. BackendEntry::make()
/// applies them to every machine, so a backend that forgets them is still held to them.
[[nodiscard]] std::optional<Problem> admit_create(std::string_view scheme, IsolationTier tier,
                                                  const CapabilitySet& capabilities,
                                                  const CreateOptions& options);

/// Wraps a machine so that its create() passes admit_create() first (a refusal fails the
/// operation with its record, and the backend never sees it). BackendEntry::make() does this.
[[nodiscard]] std::unique_ptr<class Machine> guard_admission(std::unique_ptr<class Machine> inner);

class Machine {
 public:
  virtual ~Machine() = default;

  // ---- facts ----
  [[nodiscard]] virtual std::string_view scheme() const noexcept = 0;
  [[nodiscard]] virtual CapabilitySet capabilities() const noexcept = 0;
  [[nodiscard]] virtual IsolationTier tier() const noexcept = 0;

  // ---- inputs ----
  virtual void handle_connected(ConnId conn, Instant now) = 0;
  /// The Open was answered with a connection another machine left idle (Close::reusable_for):
  /// it is up at once, but its peer may have closed it meanwhile, which a machine then treats
  /// as it treats a stale kept-alive connection of its own. By default, handle_connected.
  virtual void handle_reused(ConnId conn, Instant now) { handle_connected(conn, now); }
  /// The connection could not be opened, or an open one broke (reset: ConnectionLost). The
  /// link has already closed it. An orderly end is handle_eof instead.
  virtual void handle_connect_failed(ConnId conn, Problem problem, Instant now) = 0;
  /// Returns how many bytes were consumed (see the driver contract, point 2).
  virtual std::size_t handle_bytes(ConnId conn, std::string_view data, Instant now) = 0;
  virtual void handle_eof(ConnId conn, Instant now) = 0;
  virtual void handle_timeout(Instant now) = 0;
  /// The consumer took `bytes` of op's output: room for more.
  virtual void handle_consumed(OpId op, std::size_t bytes, Instant now) = 0;
  /// The wall-clock time at the monotonic instant `at`. Drivers give it right after making the
  /// machine; the machine reckons wall time from the newest one (labels, event-log windows).
  /// Until it is given, the machine knows no wall time.
  virtual void handle_wall_clock(Instant at, std::chrono::system_clock::time_point wall) {
    wall_anchor_ = WallAnchor{at, wall};
  }
  /// The answer to request::ProbeOwners: the owners among those asked that are gone.
  virtual void handle_owners_gone(std::vector<std::string> gone, Instant now) {
    (void)gone;
    (void)now;
  }
  /// What the driver can do beyond bytes; by default, nothing (a machine that asks nothing
  /// more ignores it).
  virtual void handle_driver_features(DriverFeatures features) { (void)features; }

  // ---- commands: each returns the OpId its events will carry ----
  virtual OpId submit_create(const CreateOptions& options, Instant now) = 0;
  virtual OpId submit_connect(std::string sandbox_id, const CreateOptions& options,
                              Instant now) = 0;
  virtual OpId submit_info(Instant now) = 0;
  virtual OpId submit_run(Command command, Instant now) = 0;
  virtual OpId submit_stream(Command command, Instant now) = 0;
  virtual OpId submit_run_code(CodeRequest request, Instant now) = 0;
  virtual OpId submit_create_context(std::string language, Instant now) = 0;
  virtual OpId submit_write_file(std::string path, Bytes data, Instant now) = 0;
  virtual OpId submit_read_file(std::string path, Instant now) = 0;
  virtual OpId submit_list_files(std::string path, Instant now) = 0;
  virtual OpId submit_remove_file(std::string path, Instant now) = 0;
  virtual OpId submit_kill(Instant now) = 0;
  /// Lists the sandboxes this backend manages (those carrying the sandboxio labels, stopped
  /// ones too); every label in `labels` must match. Completes with std::vector<ManagedSandbox>.
  /// Needs no sandbox of its own: this is how reaping finds what was left behind.
  virtual OpId submit_list_managed(std::map<std::string, std::string> labels, Instant now) = 0;
  /// Removes a managed sandbox by id, whatever its state (reaping). SBX_E1206 when no managed
  /// sandbox has this id.
  virtual OpId submit_remove_managed(std::string sandbox_id, Instant now) = 0;
  /// Cancels an operation: its remote work is stopped, then event::Cancelled is emitted.
  /// Cancelling a finished or unknown operation does nothing.
  virtual void submit_cancel(OpId op, Instant now) = 0;
  /// The owner lets the sandbox go (detach()): whatever ties its life to this process ends,
  /// and it lives out its lifetime. Completes with std::monostate; nullopt when the backend
  /// has nothing to do for it.
  virtual std::optional<OpId> submit_release(Instant now) {
    (void)now;
    return std::nullopt;
  }

  // ---- outputs ----
  [[nodiscard]] virtual std::optional<Request> poll_request() = 0;
  [[nodiscard]] virtual std::optional<Event> poll_event() = 0;
  [[nodiscard]] virtual std::optional<Instant> poll_deadline() const = 0;
  /// True while the machine still has work in flight that nobody waits for: removing a
  /// half-made sandbox after a failed or timed-out create, for example. A driver about to drop
  /// the machine keeps driving it while busy, up to the teardown grace.
  [[nodiscard]] virtual bool busy() const { return false; }
  /// When the machine must be driven even though no call is in progress (an owner lease to
  /// renew): that time; a time not after now while such work is in flight (drive on until it
  /// is done); nullopt when it keeps no time between calls. A driver that drives only during
  /// calls (the sync API) must drive it then too; the Asio transport drives it anyway.
  [[nodiscard]] virtual std::optional<Instant> between_calls() const { return std::nullopt; }
  /// What each open operation is waiting for, a line each: for logs and debugging.
  [[nodiscard]] virtual std::string describe(Instant now) const {
    (void)now;
    return {};
  }
  /// The backend's own machine behind any wrapper (for its typed extensions).
  [[nodiscard]] virtual Machine& backend() noexcept { return *this; }

 protected:
  /// The wall-clock time at `now`, from the driver's newest handle_wall_clock(); nullopt before.
  [[nodiscard]] std::optional<std::chrono::system_clock::time_point> wall_at(Instant now) const {
    if (!wall_anchor_) return std::nullopt;
    return wall_anchor_->wall +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(now - wall_anchor_->at);
  }

 private:
  struct WallAnchor {
    Instant at;
    std::chrono::system_clock::time_point wall;
  };
  std::optional<WallAnchor> wall_anchor_{};
};

/// A machine that hands every call to another one: the base of wrappers that look at or
/// change a few calls (the admission guard, a recorder of a session's inputs).
class ForwardingMachine : public Machine {
 public:
  /// Owns the machine it forwards to.
  explicit ForwardingMachine(std::unique_ptr<Machine> inner)
      : owned_(std::move(inner)), inner_(owned_.get()) {}
  /// Forwards to a machine someone else owns, which must outlive this one.
  explicit ForwardingMachine(Machine& inner) : inner_(&inner) {}

  std::string_view scheme() const noexcept override { return inner_->scheme(); }
  CapabilitySet capabilities() const noexcept override { return inner_->capabilities(); }
  IsolationTier tier() const noexcept override { return inner_->tier(); }
  void handle_connected(ConnId c, Instant now) override { inner_->handle_connected(c, now); }
  /// Forwarded as what it is: Machine's default would turn it into handle_connected, and the
  /// machine inside would take a pooled connection for a new one (and repeat nothing when it
  /// turns out stale).
  void handle_reused(ConnId c, Instant now) override { inner_->handle_reused(c, now); }
  void handle_connect_failed(ConnId c, Problem p, Instant now) override {
    inner_->handle_connect_failed(c, std::move(p), now);
  }
  std::size_t handle_bytes(ConnId c, std::string_view d, Instant now) override {
    return inner_->handle_bytes(c, d, now);
  }
  void handle_eof(ConnId c, Instant now) override { inner_->handle_eof(c, now); }
  void handle_timeout(Instant now) override { inner_->handle_timeout(now); }
  void handle_consumed(OpId op, std::size_t n, Instant now) override {
    inner_->handle_consumed(op, n, now);
  }
  void handle_wall_clock(Instant at, std::chrono::system_clock::time_point wall) override {
    inner_->handle_wall_clock(at, wall);
  }
  void handle_owners_gone(std::vector<std::string> gone, Instant now) override {
    inner_->handle_owners_gone(std::move(gone), now);
  }
  void handle_driver_features(DriverFeatures features) override {
    inner_->handle_driver_features(features);
  }
  OpId submit_create(const CreateOptions& o, Instant now) override {
    return inner_->submit_create(o, now);
  }
  OpId submit_connect(std::string id, const CreateOptions& o, Instant now) override {
    return inner_->submit_connect(std::move(id), o, now);
  }
  OpId submit_info(Instant now) override { return inner_->submit_info(now); }
  OpId submit_run(Command c, Instant now) override { return inner_->submit_run(std::move(c), now); }
  OpId submit_stream(Command c, Instant now) override {
    return inner_->submit_stream(std::move(c), now);
  }
  OpId submit_run_code(CodeRequest r, Instant now) override {
    return inner_->submit_run_code(std::move(r), now);
  }
  OpId submit_create_context(std::string l, Instant now) override {
    return inner_->submit_create_context(std::move(l), now);
  }
  OpId submit_write_file(std::string p, Bytes d, Instant now) override {
    return inner_->submit_write_file(std::move(p), std::move(d), now);
  }
  OpId submit_read_file(std::string p, Instant now) override {
    return inner_->submit_read_file(std::move(p), now);
  }
  OpId submit_list_files(std::string p, Instant now) override {
    return inner_->submit_list_files(std::move(p), now);
  }
  OpId submit_remove_file(std::string p, Instant now) override {
    return inner_->submit_remove_file(std::move(p), now);
  }
  OpId submit_kill(Instant now) override { return inner_->submit_kill(now); }
  OpId submit_list_managed(std::map<std::string, std::string> l, Instant now) override {
    return inner_->submit_list_managed(std::move(l), now);
  }
  OpId submit_remove_managed(std::string id, Instant now) override {
    return inner_->submit_remove_managed(std::move(id), now);
  }
  void submit_cancel(OpId op, Instant now) override { inner_->submit_cancel(op, now); }
  std::optional<OpId> submit_release(Instant now) override { return inner_->submit_release(now); }
  std::optional<Request> poll_request() override { return inner_->poll_request(); }
  std::optional<Event> poll_event() override { return inner_->poll_event(); }
  std::optional<Instant> poll_deadline() const override { return inner_->poll_deadline(); }
  bool busy() const override { return inner_->busy(); }
  std::optional<Instant> between_calls() const override { return inner_->between_calls(); }
  std::string describe(Instant now) const override { return inner_->describe(now); }
  Machine& backend() noexcept override { return inner_->backend(); }

 private:
  std::unique_ptr<Machine> owned_{};
  Machine* inner_;
};

}  // namespace sandboxio
