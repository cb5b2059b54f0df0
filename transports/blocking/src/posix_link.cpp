// The POSIX link: real Unix and TCP sockets driven with poll(2), time from steady_clock.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "sandboxio/backend/identity.hpp"
#include "sandboxio/connection_pool.hpp"
#include "sandboxio/link.hpp"
#include "sandboxio/peer.hpp"
#include "sandboxio/spawn.hpp"
#include "sandboxio/tls.hpp"

namespace sandboxio {
namespace {

Problem errno_problem(errc code, const std::string& what) {
  return Problem{code, what + ": " + std::strerror(errno), {}};
}

class PosixLink final : public Link {
 public:
  PosixLink()
      : epoch_(std::chrono::steady_clock::now()), wall_epoch_(std::chrono::system_clock::now()) {}
  ~PosixLink() override {
    for (auto& [id, c] : conns_)
      c.release();
  }
  PosixLink(const PosixLink&) = delete;
  PosixLink& operator=(const PosixLink&) = delete;

  Instant now() const override {
    return Instant(
        std::chrono::duration_cast<Instant::duration>(std::chrono::steady_clock::now() - epoch_));
  }
  std::chrono::system_clock::time_point wall(Instant at) const override {
    return wall_epoch_ +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(at.time_since_epoch());
  }
  DriverFeatures features() const override { return DriverFeatures{.pass_sockets = true}; }
  void perform(Machine& machine, Request request) override;
  void wait(Machine& machine, std::optional<Instant> wake) override;

 private:
  struct Conn {
    int fd = -1;
    bool connecting = true;
    std::deque<std::string> out;  // pieces waiting to be written, the first from `sent` on
    std::size_t sent = 0;         // (an offset: a 256 MiB piece is neither copied nor moved)
    bool half_close = false;      // shutdown(SHUT_WR) once `out` is empty
    std::string in;               // bytes the machine did not consume yet (backpressure)
    bool eof = false;
    std::unique_ptr<TlsChannel> tls;  // for tls endpoints: ciphertext on fd, plaintext in `in`
    bool tls_ready = false;
    Endpoint endpoint{};     // for the peer check once a deferred connect completes
    ChildProcess process{};  // a Process endpoint's program: ended with the connection
    std::deque<int> out_fd;  // per piece of `out`: a descriptor riding on its first byte, or -1
    void queue(std::string bytes, int riding = -1) {
      if (bytes.empty()) return;
      out.push_back(std::move(bytes));
      out_fd.push_back(riding);
    }
    /// Closes what this connection holds: its socket and descriptors it did not send yet.
    void release() {
      if (fd >= 0) ::close(fd);
      fd = -1;
      for (int& passing : out_fd) {
        if (passing >= 0) ::close(passing);
        passing = -1;
      }
    }
    /// TLS: the next ciphertext, once what was queued has gone (plaintext is encrypted a
    /// slice at a time as the socket drains).
    void refill() {
      if (tls && out.empty()) queue(tls->take_cipher());
    }
    [[nodiscard]] bool drained() const { return out.empty() && !(tls && tls->has_queued_plain()); }
  };
  void deliver(Machine& machine, ConnId id, Conn& c, std::string_view data);
  void open(Machine& machine, ConnId id, const Endpoint& endpoint, bool may_reuse);
  void close_conn(ConnId id);
  void pass(ConnId id, ConnId via, std::string data);
  void park(ConnId id, std::chrono::nanoseconds reusable_for);

  std::chrono::steady_clock::time_point epoch_;
  std::chrono::system_clock::time_point wall_epoch_;
  std::map<ConnId, Conn> conns_;
};

void PosixLink::perform(Machine& machine, Request request) {
  std::visit(
      [&](auto&& r) {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, request::Open>) {
          open(machine, r.conn, r.endpoint, r.may_reuse);
        } else if constexpr (std::is_same_v<R, request::Send>) {
          auto it = conns_.find(r.conn);
          if (it == conns_.end()) return;
          if (it->second.tls) {
            it->second.tls->write(std::move(r.data));
            it->second.refill();
          } else {
            it->second.queue(std::move(r.data));
          }
        } else if constexpr (std::is_same_v<R, request::HalfClose>) {
          auto it = conns_.find(r.conn);
          if (it == conns_.end()) return;
          if (it->second.tls) {
            it->second.tls->close_notify();
            it->second.refill();
          }
          it->second.half_close = true;
        } else if constexpr (std::is_same_v<R, request::Close>) {
          if (r.reusable_for > std::chrono::nanoseconds::zero()) {
            park(r.conn, r.reusable_for);
          } else {
            close_conn(r.conn);
          }
        } else if constexpr (std::is_same_v<R, request::ProbeOwners>) {
          machine.handle_owners_gone(backend::owners_gone(r.owners), now());
        } else if constexpr (std::is_same_v<R, request::Pass>) {
          pass(r.conn, r.via, std::move(r.data));
        }
      },
      std::move(request));
}

void PosixLink::open(Machine& machine, ConnId id, const Endpoint& endpoint, bool may_reuse) {
  if (may_reuse && endpoint.kind != Endpoint::Kind::Process) {
    if (auto kept = ConnectionPool::process().take(endpoint)) {
      Conn c;
      c.fd = kept->fd;
      c.connecting = false;
      c.endpoint = endpoint;
      c.tls = std::move(kept->tls);
      c.tls_ready = static_cast<bool>(c.tls);
      conns_[id] = std::move(c);
      machine.handle_reused(id, now());
      return;
    }
  }
  std::unique_ptr<TlsChannel> tls;
  if (endpoint.tls) {
    auto channel = TlsChannel::client(endpoint);
    if (!channel) {
      machine.handle_connect_failed(id, channel.problem(), now());
      return;
    }
    tls = std::move(channel).value();
  }
  if (endpoint.kind == Endpoint::Kind::Process) {
    auto spawned = spawn_connected(endpoint);
    if (!spawned) {
      machine.handle_connect_failed(id, spawned.problem(), now());
      return;
    }
    Conn c;
    c.fd = spawned.value().fd;
    c.connecting = false;
    c.endpoint = endpoint;
    c.process = std::move(spawned.value().process);
    conns_[id] = std::move(c);
    machine.handle_connected(id, now());
    return;
  }
  int fd = -1;
  int rc = -1;
  if (endpoint.kind == Endpoint::Kind::Unix) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (endpoint.address.size() >= sizeof(addr.sun_path)) {
      machine.handle_connect_failed(
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
      machine.handle_connect_failed(
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
    machine.handle_connect_failed(id, std::move(p), now());
    return;
  }
  if (rc == 0) {
    if (auto wrong = check_peer(fd, endpoint)) {
      ::close(fd);
      machine.handle_connect_failed(id, std::move(*wrong), now());
      return;
    }
  }
  Conn c;
  c.fd = fd;
  c.connecting = rc < 0;
  c.endpoint = endpoint;
  c.tls = std::move(tls);
  if (c.tls) c.queue(c.tls->take_cipher());  // the ClientHello
  const bool tls_conn = static_cast<bool>(c.tls);
  conns_[id] = std::move(c);
  if (rc == 0 && !tls_conn) machine.handle_connected(id, now());
}

// Bytes read from the socket: through TLS when the endpoint asked for it.
void PosixLink::deliver(Machine& machine, ConnId id, Conn& c, std::string_view data) {
  if (!c.tls) {
    const std::size_t used = machine.handle_bytes(id, data, now());
    if (used < data.size()) c.in.assign(data.substr(used));
    return;
  }
  auto r = c.tls->feed(data);
  c.queue(c.tls->take_cipher());
  if (!r) {
    c.eof = true;
    if (!c.tls_ready) {
      close_conn(id);
      machine.handle_connect_failed(id, r.problem(), now());
    } else {
      machine.handle_eof(id, now());
    }
    return;
  }
  if (!c.tls_ready && c.tls->established()) {
    c.tls_ready = true;
    machine.handle_connected(id, now());
    auto again = conns_.find(id);
    if (again == conns_.end()) return;
  }
  c.in += c.tls->take_plain();
  if (!c.in.empty()) {
    const std::size_t used = machine.handle_bytes(id, c.in, now());
    auto again = conns_.find(id);
    if (again == conns_.end()) return;
    again->second.in.erase(0, used);
  }
  auto again = conns_.find(id);
  if (again != conns_.end() && again->second.tls->peer_closed() && again->second.in.empty()) {
    again->second.eof = true;
    machine.handle_eof(id, now());
  }
}

// A connection idle between HTTP exchanges, nothing pending either way: into the process's
// pool. Anything else is closed.
void PosixLink::park(ConnId id, std::chrono::nanoseconds reusable_for) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  const bool clean = c.fd >= 0 && !c.connecting && !c.eof && !c.half_close && c.in.empty() &&
                     c.drained() && c.endpoint.kind != Endpoint::Kind::Process &&
                     (!c.tls || (c.tls_ready && !c.tls->peer_closed()));
  if (!clean) return close_conn(id);
  ConnectionPool::process().park(ConnectionPool::Parked{
      c.fd, std::move(c.tls), c.endpoint,
      std::chrono::steady_clock::now() +
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(reusable_for)});
  conns_.erase(it);  // the pool owns the descriptor now
}

void PosixLink::close_conn(ConnId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  it->second.release();
  conns_.erase(it);
}

void PosixLink::pass(ConnId id, ConnId via, std::string data) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  const int fd = std::exchange(it->second.fd, -1);
  close_conn(id);
  auto to = conns_.find(via);
  if (to == conns_.end()) {
    if (fd >= 0) ::close(fd);
    return;
  }
  // A descriptor goes only to the peer of a plain Unix socket or socket pair. Elsewhere the
  // data goes alone, and the peer, finding no socket with it, ends what it was for.
  const bool passable = to->second.endpoint.kind != Endpoint::Kind::Tcp && !to->second.tls;
  if (!passable && fd >= 0) ::close(fd);
  to->second.queue(std::move(data), passable ? fd : -1);
}

void PosixLink::wait(Machine& machine, std::optional<Instant> wake) {
  // Bytes held back (backpressure) go first: the consumer may have made room since. Progress
  // here means there is no reason to block.
  bool progressed = false;
  for (auto& [id, c] : conns_) {
    if (c.in.empty()) continue;
    const std::size_t used = machine.handle_bytes(id, c.in, now());
    c.in.erase(0, used);
    progressed = progressed || used != 0;
  }
  if (progressed) return;
  std::vector<pollfd> fds;
  std::vector<ConnId> ids;
  for (auto& [id, c] : conns_) {
    short events = 0;
    c.refill();  // the handshake may have finished since the plaintext came
    if (c.connecting || !c.out.empty() || (c.half_close && c.drained())) events |= POLLOUT;
    if (!c.connecting && !c.eof && c.in.empty()) events |= POLLIN;
    if (events == 0) continue;
    fds.push_back(pollfd{c.fd, events, 0});
    ids.push_back(id);
  }
  if (fds.empty() && !wake) {
    // Nothing can ever happen: the machine waits for nothing. Report instead of hanging.
    throw Error(errc::ProtocolError,
                "the " + std::string(machine.scheme()) +
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
        machine.handle_connect_failed(id, std::move(p), now());
        continue;
      }
      c.connecting = false;
      if (auto wrong = check_peer(c.fd, c.endpoint)) {
        close_conn(id);
        machine.handle_connect_failed(id, std::move(*wrong), now());
        continue;
      }
      if (!c.tls) machine.handle_connected(id, now());  // TLS: once the handshake is done
      continue;
    }
    // As much as the socket takes: one poll per piece would cost a wakeup per frame.
    while ((fds[i].revents & POLLOUT) && !c.out.empty()) {
      const std::string& front = c.out.front();
      const std::size_t left = front.size() - c.sent;
      int& passing = c.out_fd.front();
      const ssize_t w =
          passing >= 0 ? send_with_descriptor(c.fd, std::string_view(front).substr(c.sent), passing)
                       : ::send(c.fd, front.data() + c.sent, left, MSG_NOSIGNAL);
      if (w <= 0) break;
      if (passing >= 0) ::close(std::exchange(passing, -1));  // the peer has its own now
      c.sent += static_cast<std::size_t>(w);
      if (c.sent == front.size()) {
        c.out.pop_front();
        c.out_fd.pop_front();
        c.sent = 0;
      }
      c.refill();
      if (static_cast<std::size_t>(w) < left) break;  // the socket is full
    }
    if (c.half_close && c.drained()) {
      ::shutdown(c.fd, SHUT_WR);
      c.half_close = false;
    }
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      thread_local std::vector<char> buf(256 * 1024);  // large reads: fewer wakeups per MiB
      const ssize_t r = ::recv(c.fd, buf.data(), buf.size(), 0);
      if (r > 0) {
        deliver(machine, id, c, std::string_view(buf.data(), static_cast<std::size_t>(r)));
      } else if (r < 0 && errno != EAGAIN && errno != EINTR && !(c.tls && !c.tls_ready)) {
        // A reset, not an end: the machine must not take it for a complete reply or stream.
        Problem p = errno_problem(errc::ConnectionLost, "reading from the connection");
        close_conn(id);
        machine.handle_connect_failed(id, std::move(p), now());
        continue;
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        c.eof = true;
        if (c.tls && !c.tls_ready) {
          close_conn(id);
          machine.handle_connect_failed(
              id,
              Problem{
                  errc::TlsError, "the server closed the connection during the TLS handshake", {}},
              now());
        } else {
          machine.handle_eof(id, now());
        }
      }
    }
  }
  // Offer held-back bytes again (the consumer may have made room).
  for (auto& [id, c] : conns_) {
    if (c.in.empty()) continue;
    const std::size_t used = machine.handle_bytes(id, c.in, now());
    c.in.erase(0, used);
  }
}

}  // namespace

std::unique_ptr<Link> make_posix_link() {
  return std::make_unique<PosixLink>();
}

}  // namespace sandboxio
