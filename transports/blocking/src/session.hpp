// The blocking driver: runs one machine on the calling thread, performing its requests with
// poll(2) and feeding it bytes, connection events and timer expiries. Private to the sync API.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandboxio/create_options.hpp"
#include "sandboxio/machine.hpp"
#include "sandboxio/sinks.hpp"

namespace sandboxio::sync::detail {

class Session {
 public:
  Session(std::unique_ptr<Machine> machine, CreateOptions options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  [[nodiscard]] Instant now() const;
  Machine& machine() noexcept { return *machine_; }
  const CreateOptions& options() const noexcept { return options_; }

  /// Registers an operation just submitted, then lets the machine act on it.
  OpId track(OpId op);
  /// Drives until `op` completes; returns its value or throws its Problem as sandboxio::Error
  /// (cancellation as std::system_error with std::errc::operation_canceled).
  Completion wait(OpId op);
  /// Like wait(), but a failure is returned instead of thrown.
  Result<Completion> wait_result(OpId op);
  /// Drives until `op` has output (returned) or has ended (nullopt).
  std::optional<OutputChunk> next_chunk(OpId op);
  /// True when op's final value or failure has arrived.
  bool finished(OpId op) const;
  /// Cancels op and waits, bounded by SBX_TEARDOWN_GRACE, for the machine to confirm.
  void cancel(OpId op);
  /// Forgets an operation whose outcome nobody will read.
  void forget(OpId op) { inbox_.erase(op); }

  std::string sandbox_id;
  SandboxInfo info;
  bool detached = false;
  bool killed = false;
  std::vector<Problem> warnings;

 private:
  struct Inbox {
    std::deque<OutputChunk> chunks;
    std::optional<Completion> done;
    std::optional<Problem> failed;
    bool cancelled = false;
    bool possible_orphan = false;
  };
  struct Conn {
    int fd = -1;
    bool connecting = true;
    std::string out;          // bytes waiting to be written
    bool half_close = false;  // shutdown(SHUT_WR) once `out` is empty
    std::string in;           // bytes the machine did not consume yet (backpressure)
    bool eof = false;
  };

  void pump();
  /// Blocks until I/O or the machine's deadline, bounded by `limit`; feeds what happened.
  void block(std::optional<Instant> limit = std::nullopt);
  void perform(Request request);
  void open(ConnId id, const Endpoint& endpoint);
  void close_conn(ConnId id);
  void deliver_record(event::Record record);

  std::unique_ptr<Machine> machine_;
  CreateOptions options_;
  std::chrono::steady_clock::time_point epoch_;
  std::chrono::system_clock::time_point wall_epoch_;
  std::map<OpId, Inbox> inbox_;
  std::map<ConnId, Conn> conns_;
  std::shared_ptr<AuditDispatcher> audit_;
  std::optional<Problem> audit_failure_;
};

}  // namespace sandboxio::sync::detail
