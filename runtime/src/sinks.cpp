#include "sandboxio/sinks.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <map>
#include <tuple>

#include "sandboxio/config.hpp"
#include "sandboxio/duration.hpp"

namespace sandboxio {

Result<void> QueueSink::write(const OperationRecord& record) {
  std::lock_guard lock(mu_);
  if (records_.size() >= capacity_) {
    return Problem{errc::QueueFull,
                   "the in-memory audit queue holds " + std::to_string(capacity_) +
                       " records; this one was dropped",
                   "Call drain() regularly, or create the QueueSink with a larger capacity."};
  }
  records_.push_back(record);
  return {};
}

std::vector<OperationRecord> QueueSink::drain() {
  std::lock_guard lock(mu_);
  std::vector<OperationRecord> out(std::make_move_iterator(records_.begin()),
                                   std::make_move_iterator(records_.end()));
  records_.clear();
  return out;
}

std::size_t QueueSink::size() const {
  std::lock_guard lock(mu_);
  return records_.size();
}

JsonLinesFileSink::JsonLinesFileSink(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
}

JsonLinesFileSink::~JsonLinesFileSink() {
  if (fd_ >= 0) ::close(fd_);
}

Result<void> JsonLinesFileSink::write(const OperationRecord& record) {
  std::lock_guard lock(mu_);
  if (fd_ < 0) {
    return Problem{errc::AuditSinkFailed, "cannot open audit file " + path_,
                   "Check that the directory exists and is writable."};
  }
  const std::string line = to_json_line(record);
  // One write() per line: with O_APPEND, lines from several processes never interleave.
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Problem{
          errc::AuditSinkFailed, "writing audit file " + path_ + ": " + std::strerror(errno), {}};
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

Result<void> StderrLogSink::write(const OperationRecord& r) {
  std::string line = "sandboxio: " + std::string(to_string(r.operation)) + " " + r.backend + "://" +
                     (r.sandbox_id.empty() ? std::string("-") : r.sandbox_id) + " " +
                     std::string(to_string(r.outcome)) + " in " + format_duration(r.duration);
  if (r.error_code) {
    const ErrorInfo* info = find_error(*r.error_code);
    line += " " + std::string(info != nullptr ? info->id : "SBX_E?") + " " + r.error_detail;
  }
  if (r.exit_code) line += " exit=" + std::to_string(*r.exit_code);
  line.push_back('\n');
  if (std::fwrite(line.data(), 1, line.size(), stderr) != line.size()) {
    return Problem{errc::AuditSinkFailed, "stderr is not writable", {}};
  }
  return {};
}

void StderrLogSink::warn(const Problem& problem) {
  const std::string line = "sandboxio: warning: " + problem.describe() + "\n";
  (void)std::fwrite(line.data(), 1, line.size(), stderr);
}

struct AuditDispatcher::Shared {
  struct Job {
    OperationRecord record;
    bool done = false;
    Result<void> result;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Job>> jobs;
  bool stop = false;
  bool exited = false;
  std::shared_ptr<AuditSink> sink;
};

namespace {
constexpr std::size_t kMaxPendingRecords = 1024;
}

AuditDispatcher::AuditDispatcher(std::shared_ptr<AuditSink> sink, std::chrono::milliseconds timeout,
                                 AuditFailurePolicy policy, WarnFn warn)
    : shared_(std::make_shared<Shared>()),
      timeout_(timeout),
      policy_(policy),
      warn_(std::move(warn)) {
  shared_->sink = sink ? std::move(sink) : std::make_shared<NoopSink>();
  // The worker owns a reference to the shared state, so a sink that never returns can be
  // abandoned (detached) at destruction without dangling.
  worker_ = std::thread([state = shared_] {
    std::unique_lock lock(state->mu);
    while (true) {
      state->cv.wait(lock, [&] { return state->stop || !state->jobs.empty(); });
      if (state->jobs.empty()) {  // stop requested and nothing left
        state->exited = true;
        state->cv.notify_all();
        return;
      }
      std::shared_ptr<Shared::Job> job = state->jobs.front();
      state->jobs.pop_front();
      lock.unlock();
      Result<void> result = state->sink->write(job->record);
      lock.lock();
      job->result = std::move(result);
      job->done = true;
      state->cv.notify_all();
    }
  });
}

AuditDispatcher::~AuditDispatcher() {
  std::unique_lock lock(shared_->mu);
  shared_->stop = true;
  shared_->cv.notify_all();
  // Pending records get one timeout to drain; a sink stuck past that is abandoned (the worker
  // holds its own reference to the shared state and exits when the sink finally returns).
  const bool exited = shared_->cv.wait_for(lock, timeout_, [&] { return shared_->exited; });
  lock.unlock();
  if (exited) {
    worker_.join();
  } else {
    worker_.detach();
  }
}

Result<void> AuditDispatcher::deliver(const OperationRecord& record, const WarnFn& warn) {
  auto job = std::make_shared<Shared::Job>();
  job->record = record;
  std::unique_lock lock(shared_->mu);
  Problem problem;
  bool failed = false;
  if (shared_->jobs.size() >= kMaxPendingRecords) {
    problem = Problem{errc::AuditSinkTimeout,
                      "the audit sink is " + std::to_string(kMaxPendingRecords) +
                          " records behind; this record was dropped",
                      {}};
    failed = true;
  } else {
    shared_->jobs.push_back(job);
    shared_->cv.notify_all();
    if (!shared_->cv.wait_for(lock, timeout_, [&] { return job->done; })) {
      problem =
          Problem{errc::AuditSinkTimeout,
                  "the audit sink did not accept a record within " + format_duration(timeout_),
                  {}};
      failed = true;
    } else if (!job->result) {
      problem = job->result.problem();
      if (problem.code != errc::AuditSinkFailed && problem.code != errc::AuditSinkTimeout) {
        problem = Problem{errc::AuditSinkFailed, problem.describe(), {}};
      }
      failed = true;
    }
  }
  lock.unlock();
  if (!failed) return {};
  if (policy_ == AuditFailurePolicy::Fail) return problem;
  if (warn) {
    warn(problem);
  } else if (warn_) {
    warn_(problem);
  }
  return {};
}

std::shared_ptr<AuditDispatcher> shared_audit_dispatcher(const AuditSettings& audit) {
  if (!audit.sink) return nullptr;
  auto env = audit_timeout();
  const std::chrono::milliseconds timeout =
      (env && std::getenv("SBX_AUDIT_TIMEOUT") != nullptr) ? env.value() : audit.sink_timeout;
  using Key = std::tuple<AuditSink*, std::int64_t, AuditFailurePolicy>;
  static auto* mu = new std::mutex;  // process-lifetime, never destroyed
  static auto* dispatchers = new std::map<Key, std::weak_ptr<AuditDispatcher>>;
  std::lock_guard lock(*mu);
  for (auto it = dispatchers->begin(); it != dispatchers->end();) {
    it = it->second.expired() ? dispatchers->erase(it) : std::next(it);
  }
  auto& weak = (*dispatchers)[Key{audit.sink.get(), timeout.count(), audit.on_failure}];
  if (auto existing = weak.lock()) return existing;
  auto d =
      std::make_shared<AuditDispatcher>(audit.sink, timeout, audit.on_failure, [](const Problem&) {
        // Sink timeouts reach each sandbox through deliver()'s own warn: nothing to do here.
      });
  weak = d;
  return d;
}

}  // namespace sandboxio
