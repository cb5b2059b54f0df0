// Audit sinks that do I/O or need a lock, and the dispatcher that bounds every sink by
// SBX_AUDIT_TIMEOUT and applies the failure policy.
//
//   auto queue = std::make_shared<sandboxio::QueueSink>();
//   opts.audit.sink = queue;                         // tests read queue->drain()
//   opts.audit.sink = std::make_shared<sandboxio::JsonLinesFileSink>("/var/log/sbx.jsonl");
#pragma once

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sandboxio/create_options.hpp"
#include "sandboxio/record.hpp"

namespace sandboxio {

/// Keeps records in memory, for tests. Bounded: past `capacity` records, write() fails with
/// SBX_E1807 QueueFull and the record is dropped. Thread-safe.
class QueueSink final : public AuditSink {
 public:
  explicit QueueSink(std::size_t capacity = 4096) : capacity_(capacity) {}
  Result<void> write(const OperationRecord& record) override;
  /// Takes every record written so far, oldest first.
  [[nodiscard]] std::vector<OperationRecord> drain();
  [[nodiscard]] std::size_t size() const;

 private:
  mutable std::mutex mu_;
  std::deque<OperationRecord> records_;
  std::size_t capacity_;
};

/// Appends one JSON object per line to a file (created with mode 0600 if absent).
class JsonLinesFileSink final : public AuditSink {
 public:
  explicit JsonLinesFileSink(std::string path);
  ~JsonLinesFileSink() override;
  JsonLinesFileSink(const JsonLinesFileSink&) = delete;
  JsonLinesFileSink& operator=(const JsonLinesFileSink&) = delete;
  Result<void> write(const OperationRecord& record) override;

 private:
  std::mutex mu_;
  std::string path_;
  int fd_ = -1;
};

/// Writes one human-readable line per record to stderr.
class StderrLogSink final : public AuditSink {
 public:
  Result<void> write(const OperationRecord& record) override;
  /// "sandboxio: warning: ..." on stderr.
  void warn(const Problem& problem) override;
};

/// Delivers records to one sink on a worker thread, waiting at most `timeout` for each. A
/// sink that fails or overruns is reported through `warn` (policy Warn) or as the returned
/// Problem (policy Fail: SBX_E1601 AuditSinkTimeout, SBX_E1602 AuditSinkFailed). A sink that
/// never returns does not block the caller past the timeout, nor the process at exit.
class AuditDispatcher {
 public:
  using WarnFn = std::function<void(const Problem&)>;
  AuditDispatcher(std::shared_ptr<AuditSink> sink, std::chrono::milliseconds timeout,
                  AuditFailurePolicy policy, WarnFn warn = {});
  ~AuditDispatcher();
  AuditDispatcher(const AuditDispatcher&) = delete;
  AuditDispatcher& operator=(const AuditDispatcher&) = delete;

  /// Writes one closed record. Returns a Problem only under the Fail policy; under Warn, a
  /// failure goes to `warn` when given (the sandbox's own warnings()), else to the
  /// dispatcher's WarnFn.
  Result<void> deliver(const OperationRecord& record, const WarnFn& warn = {});

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
  std::chrono::milliseconds timeout_;
  AuditFailurePolicy policy_;
  WarnFn warn_;
  std::thread worker_;
};

/// The dispatcher for `audit` (null when it has no sink). Sandboxes whose settings name the same
/// sink, timeout and policy share one dispatcher, so they share one worker thread. The timeout
/// is SBX_AUDIT_TIMEOUT when set, else audit.sink_timeout; warnings go to stderr.
[[nodiscard]] std::shared_ptr<AuditDispatcher> shared_audit_dispatcher(const AuditSettings& audit);

}  // namespace sandboxio
