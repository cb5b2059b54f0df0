// The sync driver: runs one machine on the calling thread over a Link (real or simulated),
// routing its events to the operations waiting for them. Private to the sync API.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sandboxio/create_options.hpp"
#include "sandboxio/link.hpp"
#include "sandboxio/machine.hpp"
#include "sandboxio/record_router.hpp"

namespace sandboxio::sync::detail {

class Session {
 public:
  Session(std::unique_ptr<Machine> machine, CreateOptions options, std::unique_ptr<Link> link);
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
  /// Failed before producing anything (a refusal: capability, bad command, gone sandbox).
  bool refused(OpId op) const;
  /// Cancels op and waits, bounded by SBX_TEARDOWN_GRACE, for the machine to confirm.
  void cancel(OpId op);
  /// Forgets an operation whose outcome nobody will read.
  void forget(OpId op) { inbox_.erase(op); }

  /// Held by every call on the sandbox's handles, and by the lease keeper while it drives the
  /// machine between calls: one thread at a time drives it.
  [[nodiscard]] std::unique_lock<std::recursive_mutex> hold() {
    return std::unique_lock<std::recursive_mutex>(mu_);
  }
  /// The keeper's turn, with hold() taken: when the machine's between_calls() time has come,
  /// drives it for a short slice (50 ms at most). Returns when it needs the next turn (now,
  /// while its work is still in flight), or nullopt.
  std::optional<Instant> keep_time();
  std::recursive_mutex& mutex_for_keeper() { return mu_; }

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
  void pump();
  /// Blocks until I/O or the machine's deadline, bounded by `limit`; feeds what happened.
  void block(std::optional<Instant> limit = std::nullopt);

  std::unique_ptr<Machine> machine_;
  CreateOptions options_;
  std::unique_ptr<Link> link_;
  std::map<OpId, Inbox> inbox_;
  RecordRouter records_;  // records and warnings: exporter, audit sink, warnings
  std::recursive_mutex mu_;
};

/// Hands `session` to the process's lease keeper, a thread that drives the machines whose
/// between_calls() asks for it while their owner makes no call (an e2b:// owner lease). Does
/// nothing for a machine that keeps no time between calls.
void keep_time(const std::shared_ptr<Session>& session);

}  // namespace sandboxio::sync::detail
