#include "session.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "sandboxio/config.hpp"
#include "sandboxio/duration.hpp"

namespace sandboxio::sync::detail {
namespace {

// One dispatcher (one worker thread) per sink, shared by every sandbox that uses the sink.
std::shared_ptr<AuditDispatcher> dispatcher_for(const AuditSettings& audit) {
  static std::mutex mu;
  static std::map<AuditSink*, std::weak_ptr<AuditDispatcher>> dispatchers;
  if (!audit.sink) return nullptr;
  std::lock_guard lock(mu);
  auto& weak = dispatchers[audit.sink.get()];
  if (auto existing = weak.lock()) return existing;
  auto timeout = audit_timeout();
  auto d = std::make_shared<AuditDispatcher>(
      audit.sink, timeout ? timeout.value() : audit.sink_timeout, audit.on_failure,
      [](const Problem& p) {
        std::fprintf(stderr, "sandboxio: warning: %s\n", p.describe().c_str());
      });
  weak = d;
  return d;
}

Problem errno_problem(errc code, const std::string& what) {
  return Problem{code, what + ": " + std::strerror(errno), {}};
}

}  // namespace

Session::Session(std::unique_ptr<Machine> machine, CreateOptions options)
    : machine_(std::move(machine)),
      options_(std::move(options)),
      epoch_(std::chrono::steady_clock::now()),
      wall_epoch_(std::chrono::system_clock::now()),
      audit_(dispatcher_for(options_.audit)) {}

Session::~Session() {
  for (auto& [id, c] : conns_) {
    if (c.fd >= 0) ::close(c.fd);
  }
}

Instant Session::now() const {
  return std::chrono::duration_cast<Instant>(std::chrono::steady_clock::now() - epoch_);
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

void Session::deliver_record(event::Record ev) {
  ev.record.started =
      wall_epoch_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(ev.started);
  if (!audit_) return;
  if (auto r = audit_->deliver(ev.record); !r && !audit_failure_) audit_failure_ = r.problem();
}

void Session::pump() {
  while (true) {
    bool progressed = false;
    while (auto req = machine_->poll_request()) {
      perform(std::move(*req));
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
              deliver_record(std::move(e));
            } else if constexpr (std::is_same_v<E, event::Warning>) {
              std::fprintf(stderr, "sandboxio: warning: %s\n", e.problem.describe().c_str());
              warnings.push_back(std::move(e.problem));
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
      if (audit_failure_) {
        Problem p = std::move(*audit_failure_);
        audit_failure_.reset();
        return p;
      }
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
  auto grace = teardown_grace();
  const Instant limit =
      now() + std::chrono::duration_cast<Instant>(grace ? grace.value() : kDefaultTeardownGrace);
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

void Session::perform(Request request) {
  std::visit(
      [&](auto&& r) {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, request::Open>) {
          open(r.conn, r.endpoint);
        } else if constexpr (std::is_same_v<R, request::Send>) {
          auto it = conns_.find(r.conn);
          if (it != conns_.end()) it->second.out += r.data;
        } else if constexpr (std::is_same_v<R, request::HalfClose>) {
          auto it = conns_.find(r.conn);
          if (it != conns_.end()) it->second.half_close = true;
        } else if constexpr (std::is_same_v<R, request::Close>) {
          close_conn(r.conn);
        }
      },
      std::move(request));
}

void Session::open(ConnId id, const Endpoint& endpoint) {
  if (endpoint.tls) {
    machine_->handle_connect_failed(
        id,
        Problem{errc::TlsError, "the blocking transport does not speak TLS yet",
                "Use a unix:// or plain tcp:// endpoint."},
        now());
    return;
  }
  int fd = -1;
  int rc = -1;
  if (endpoint.kind == Endpoint::Kind::Unix) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (endpoint.address.size() >= sizeof(addr.sun_path)) {
      machine_->handle_connect_failed(
          id, Problem{errc::ConnectionFailed, "socket path too long: " + endpoint.address, {}},
          now());
      return;
    }
    std::memcpy(addr.sun_path, endpoint.address.data(), endpoint.address.size());
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } else {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(endpoint.port);
    if (::getaddrinfo(endpoint.address.c_str(), port.c_str(), &hints, &res) != 0 ||
        res == nullptr) {
      machine_->handle_connect_failed(
          id, Problem{errc::ConnectionFailed, "cannot resolve " + endpoint.address, {}}, now());
      return;
    }
    fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    ::freeaddrinfo(res);
  }
  if (fd < 0 || (rc < 0 && errno != EINPROGRESS && errno != EAGAIN)) {
    Problem p = errno_problem(errc::ConnectionFailed, "connecting to " + endpoint.address);
    if (fd >= 0) ::close(fd);
    machine_->handle_connect_failed(id, std::move(p), now());
    return;
  }
  Conn c;
  c.fd = fd;
  c.connecting = rc < 0;
  conns_[id] = std::move(c);
  if (rc == 0) machine_->handle_connected(id, now());
}

void Session::close_conn(ConnId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  if (it->second.fd >= 0) ::close(it->second.fd);
  conns_.erase(it);
}

void Session::block(std::optional<Instant> limit) {
  const std::optional<Instant> deadline = machine_->poll_deadline();
  std::optional<Instant> wake = deadline;
  if (limit && (!wake || *limit < *wake)) wake = limit;
  std::vector<pollfd> fds;
  std::vector<ConnId> ids;
  for (auto& [id, c] : conns_) {
    short events = 0;
    if (c.connecting || !c.out.empty() || (c.half_close && c.out.empty())) events |= POLLOUT;
    if (!c.connecting && !c.eof && c.in.empty()) events |= POLLIN;
    if (events == 0) continue;
    fds.push_back(pollfd{c.fd, events, 0});
    ids.push_back(id);
  }
  if (fds.empty() && !wake) {
    // Nothing can ever happen: the machine waits for nothing. Report instead of hanging.
    throw Error(errc::ProtocolError,
                "the " + std::string(machine_->scheme()) +
                    ":// machine is waiting with no deadline and no connection (livelock)");
  }
  int timeout_ms = -1;
  if (wake) {
    const auto left = *wake - now();
    timeout_ms = left.count() <= 0 ? 0
                                   : static_cast<int>(std::min<std::int64_t>(
                                         (left.count() + 999'999) / 1'000'000, 60'000));
  }
  const int n = ::poll(fds.data(), fds.size(), timeout_ms);
  if (n < 0 && errno != EINTR)
    throw Error(errc::ProtocolError, std::string("poll: ") + std::strerror(errno));
  for (std::size_t i = 0; n > 0 && i < fds.size(); ++i) {
    auto it = conns_.find(ids[i]);
    if (it == conns_.end() || fds[i].revents == 0) continue;
    Conn& c = it->second;
    const ConnId id = ids[i];
    if (c.connecting && (fds[i].revents & (POLLOUT | POLLERR | POLLHUP))) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        errno = err;
        Problem p = errno_problem(errc::ConnectionFailed, "connecting");
        close_conn(id);
        machine_->handle_connect_failed(id, std::move(p), now());
        continue;
      }
      c.connecting = false;
      machine_->handle_connected(id, now());
      continue;
    }
    if ((fds[i].revents & POLLOUT) && !c.out.empty()) {
      const ssize_t w = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (w > 0) c.out.erase(0, static_cast<std::size_t>(w));
    }
    if (c.half_close && c.out.empty()) {
      ::shutdown(c.fd, SHUT_WR);
      c.half_close = false;
    }
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[64 * 1024];
      const ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
      if (r > 0) {
        const std::string_view data(buf, static_cast<std::size_t>(r));
        const std::size_t used = machine_->handle_bytes(id, data, now());
        if (used < data.size()) c.in.assign(data.substr(used));
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        c.eof = true;
        machine_->handle_eof(id, now());
      }
    }
  }
  // Offer held-back bytes again (the consumer may have made room).
  for (auto& [id, c] : conns_) {
    if (c.in.empty()) continue;
    const std::size_t used = machine_->handle_bytes(id, c.in, now());
    c.in.erase(0, used);
  }
  if (deadline && now() >= *deadline) machine_->handle_timeout(now());
}

}  // namespace sandboxio::sync::detail
