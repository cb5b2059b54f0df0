#include "session.hpp"

#include <algorithm>
#include <condition_variable>
#include <thread>

#include "sandboxio/config.hpp"
#include "sandboxio/duration.hpp"

namespace sandboxio::sync::detail {

Session::Session(std::unique_ptr<Machine> machine, CreateOptions options,
                 std::unique_ptr<Link> link)
    : machine_(std::move(machine)),
      options_(std::move(options)),
      link_(link ? std::move(link) : make_posix_link()),
      records_(options_, [this](const Problem& p) { warnings.push_back(p); }) {
  machine_->handle_wall_clock(now(), link_->wall(now()));
  machine_->handle_driver_features(link_->features());
}

Session::~Session() {
  // Work nobody waits for any more (removing a half-made sandbox) still gets the teardown
  // grace before the connections close.
  try {
    const Instant limit = now() + std::chrono::duration_cast<Instant::duration>(
                                      options_.teardown_grace.value_or(kDefaultTeardownGrace));
    pump();
    while (machine_->busy() && now() < limit) {
      block(limit);
      pump();
    }
  } catch (...) {  // nothing can ever happen on the link: give up quietly
  }
}

Instant Session::now() const {
  return link_->now();
}

OpId Session::track(OpId op) {
  inbox_.try_emplace(op);
  pump();
  return op;
}

bool Session::finished(OpId op) const {
  auto it = inbox_.find(op);
  return it == inbox_.end() || it->second.done || it->second.failed || it->second.cancelled;
}

bool Session::refused(OpId op) const {
  auto it = inbox_.find(op);
  return it != inbox_.end() && it->second.failed && it->second.chunks.empty();
}

void Session::pump() {
  while (true) {
    bool progressed = false;
    while (auto req = machine_->poll_request()) {
      link_->perform(*machine_, std::move(*req));
      progressed = true;
    }
    while (auto ev = machine_->poll_event()) {
      progressed = true;
      std::visit(
          [&](auto&& e) {
            using E = std::decay_t<decltype(e)>;
            if constexpr (std::is_same_v<E, event::Output>) {
              inbox_[e.op].chunks.push_back(std::move(e.chunk));
            } else if constexpr (std::is_same_v<E, event::Done>) {
              inbox_[e.op].done = std::move(e.value);
            } else if constexpr (std::is_same_v<E, event::Failed>) {
              inbox_[e.op].failed = std::move(e.problem);
            } else if constexpr (std::is_same_v<E, event::Cancelled>) {
              inbox_[e.op].cancelled = true;
              inbox_[e.op].possible_orphan = e.possible_orphan;
            } else if constexpr (std::is_same_v<E, event::Record>) {
              records_.record(std::move(e.record), link_->wall(e.started));
            } else if constexpr (std::is_same_v<E, event::Warning>) {
              records_.warn(e.problem);
            }
          },
          *ev);
    }
    if (!progressed) return;
  }
}

Result<Completion> Session::wait_result(OpId op) {
  while (true) {
    pump();
    auto it = inbox_.find(op);
    if (it == inbox_.end())
      return Problem{errc::ProcessClosed, "the operation is unknown or already finished", {}};
    Inbox& box = it->second;
    if (!box.chunks.empty()) {  // nobody reads these: discard, and give the machine room
      std::size_t n = 0;
      for (const auto& c : box.chunks)
        n += c.data.size();
      box.chunks.clear();
      machine_->handle_consumed(op, n, now());
      continue;
    }
    if (box.failed) {
      Problem p = std::move(*box.failed);
      inbox_.erase(it);
      return p;
    }
    if (box.done) {
      Completion value = std::move(*box.done);
      inbox_.erase(it);
      if (auto failure = records_.take_failure()) return *failure;  // AuditFailurePolicy::Fail
      return value;
    }
    if (box.cancelled) {
      inbox_.erase(it);
      throw std::system_error(std::make_error_code(std::errc::operation_canceled),
                              "sandboxio operation cancelled");
    }
    block();
  }
}

Completion Session::wait(OpId op) {
  auto r = wait_result(op);
  if (!r) r.problem().raise();
  return std::move(r).value();
}

std::optional<OutputChunk> Session::next_chunk(OpId op) {
  while (true) {
    pump();
    auto it = inbox_.find(op);
    if (it == inbox_.end()) return std::nullopt;
    Inbox& box = it->second;
    if (!box.chunks.empty()) {
      OutputChunk c = std::move(box.chunks.front());
      box.chunks.pop_front();
      machine_->handle_consumed(op, c.data.size(), now());
      return c;
    }
    if (box.done || box.failed || box.cancelled) return std::nullopt;
    block();
  }
}

void Session::cancel(OpId op) {
  if (finished(op)) return;
  machine_->submit_cancel(op, now());
  const Instant limit = now() + std::chrono::duration_cast<Instant::duration>(
                                    options_.teardown_grace.value_or(kDefaultTeardownGrace));
  while (!finished(op) && now() < limit) {
    pump();
    if (finished(op)) break;
    block(limit);
  }
  if (!finished(op)) {
    inbox_[op].cancelled = true;
    inbox_[op].possible_orphan = true;
    warnings.push_back(Problem{errc::PossibleOrphan,
                               "cancelling an operation did not finish within the teardown grace",
                               {}});
  }
}

void Session::block(std::optional<Instant> limit) {
  const std::optional<Instant> deadline = machine_->poll_deadline();
  std::optional<Instant> wake = deadline;
  if (limit && (!wake || *limit < *wake)) wake = limit;
  if (!wake || *wake > link_->now()) link_->wait(*machine_, wake);
  if (deadline && link_->now() >= *deadline) machine_->handle_timeout(link_->now());
}

// ---- the lease keeper ----

std::optional<Instant> Session::keep_time() {
  using namespace std::chrono_literals;
  pump();
  std::optional<Instant> due = machine_->between_calls();
  if (!due || *due > now()) return due;
  // Its time has come: a deadline to meet, then the work it started (a renewal's exchange) to
  // drive. One short slice per turn, so that a call never waits long for the keeper; what is
  // left is the next turn's.
  const Instant slice = now() + 50ms;
  do {
    const std::optional<Instant> deadline = machine_->poll_deadline();
    if (deadline && *deadline <= now()) {
      machine_->handle_timeout(now());
    } else {
      block(slice);
    }
    pump();
    due = machine_->between_calls();
  } while (due && *due <= now() && now() < slice);
  return due && *due <= now() ? std::optional<Instant>(now()) : due;
}

namespace {

// One thread for the process, started by the first session that needs it. It sleeps until the
// earliest time a held session asks for (at most a second, so that a call that moved a time
// earlier is seen soon), then drives each due session whose owner is not in a call: one that
// is, is being driven by that call. Sessions are held weakly: a dropped sandbox leaves.
class Keeper {
 public:
  static Keeper& get() {
    static Keeper keeper;
    return keeper;
  }
  void hold(const std::shared_ptr<Session>& session) {
    std::lock_guard lock(mu_);
    for (const auto& w : sessions_) {
      if (w.lock() == session) return;
    }
    sessions_.push_back(session);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    wake_.notify_one();
  }
  ~Keeper() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    using namespace std::chrono_literals;
    std::unique_lock lock(mu_);
    while (!stop_) {
      std::vector<std::shared_ptr<Session>> live;
      for (auto it = sessions_.begin(); it != sessions_.end();) {
        if (auto s = it->lock()) {
          live.push_back(std::move(s));
          ++it;
        } else {
          it = sessions_.erase(it);
        }
      }
      lock.unlock();
      std::chrono::nanoseconds sleep = 1s;
      for (auto& s : live) {
        std::unique_lock<std::recursive_mutex> turn(s->mutex_for_keeper(), std::try_to_lock);
        if (!turn.owns_lock()) continue;  // the owner is in a call, which drives it
        std::optional<Instant> next;
        try {
          next = s->keep_time();
        } catch (...) {  // the link failed: the owner's next call will say so
          next.reset();
        }
        if (!next) {
          // It keeps no time now: let it go (its turn still held, so that a call cannot hand
          // it back in between); create() and native_call() hand it back when a lease starts.
          std::lock_guard again(mu_);
          std::erase_if(sessions_, [&](const std::weak_ptr<Session>& w) { return w.lock() == s; });
          continue;
        }
        sleep = std::clamp<std::chrono::nanoseconds>(*next - s->now(), 1ms, sleep);
      }
      live.clear();  // a session dropped meanwhile ends here, outside the keeper's lock
      lock.lock();
      if (!stop_) wake_.wait_for(lock, sleep);
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<std::weak_ptr<Session>> sessions_;
  std::thread thread_;
  bool stop_ = false;
};

}  // namespace

void keep_time(const std::shared_ptr<Session>& session) {
  if (!session->machine().between_calls()) return;
  Keeper::get().hold(session);
}

}  // namespace sandboxio::sync::detail
