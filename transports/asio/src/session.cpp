// The Asio driver: runs one machine on a strand, performing its requests with Asio sockets and
// a steady_timer, and completing the operations' handlers from the machine's events.
#include <sys/socket.h>
#include <unistd.h>
#include <asio/connect.hpp>
#include <asio/dispatch.hpp>
#include <asio/generic/stream_protocol.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/write.hpp>

#include <cerrno>
#include <deque>
#include <map>
#include <set>

#include "sandboxio/async.hpp"
#include "sandboxio/backend/identity.hpp"
#include "sandboxio/config.hpp"
#include "sandboxio/connection_pool.hpp"
#include "sandboxio/flight_recorder.hpp"
#include "sandboxio/peer.hpp"
#include "sandboxio/record_router.hpp"
#include "sandboxio/spawn.hpp"
#include "sandboxio/tls.hpp"

namespace sandboxio::async::detail {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(asio::any_io_executor ex, std::unique_ptr<Machine> machine, CreateOptions options)
      : strand_(asio::make_strand(ex)),
        timer_(strand_),
        linger_timer_(strand_),
        machine_(std::move(machine)),
        options_(std::move(options)),
        epoch_(std::chrono::steady_clock::now()),
        wall_epoch_(std::chrono::system_clock::now()),
        records_(options_, [this](const Problem& p) { warnings_.push_back(p); }) {
    machine_->handle_wall_clock(Instant{}, wall_epoch_);  // now() counts from epoch_
    machine_->handle_driver_features(DriverFeatures{.pass_sockets = true});  // see pass()
  }

  asio::strand<asio::any_io_executor>& strand() { return strand_; }
  Machine& machine() { return *machine_; }
  const CreateOptions& options() const noexcept { return options_; }

  Instant now() const {
    return Instant(
        std::chrono::duration_cast<Instant::duration>(std::chrono::steady_clock::now() - epoch_));
  }

  // ---- called on the strand ----

  // A cancellation requested through a slot before the operation reached the strand.
  struct CancelState {
    bool requested = false;  // touched on the strand only
    OpId op = 0;
  };

  void start(Submit& submit, std::unique_ptr<Waiter> waiter,
             const std::shared_ptr<CancelState>& cancel_state) {
    const OpId op = submit(*machine_, now());
    Inbox& box = inbox_[op];
    box.waiter = std::move(waiter);
    if (cancel_state) {
      cancel_state->op = op;
      if (cancel_state->requested) {
        cancel(op);
        return;
      }
    }
    // Output nobody will read (a stream whose result is awaited) must not hold the machine back.
    discard_chunks(op, box);
    settle(op);
    pump();
  }

  void start_stream(Submit& submit, std::unique_ptr<StreamWaiter> waiter) {
    const OpId op = submit(*machine_, now());
    inbox_.try_emplace(op);
    pump();
    auto it = inbox_.find(op);
    if (it != inbox_.end() && it->second.failed && it->second.chunks.empty()) {
      const Problem p = *it->second.failed;
      inbox_.erase(it);
      waiter->started(make_error_code(p.code), 0);
      return;
    }
    waiter->started({}, op);
  }

  void wait_for(OpId op, std::unique_ptr<Waiter> waiter) {
    auto it = inbox_.find(op);
    if (it == inbox_.end()) {
      // Already ended and forgotten: either the caller cancelled it, or it was read to the end.
      waiter->done(cancelled_.count(op) != 0 ? make_error_code(asio::error::operation_aborted)
                                             : make_error_code(errc::ProcessClosed),
                   std::monostate{});
      return;
    }
    it->second.waiter = std::move(waiter);
    discard_chunks(op, it->second);
    settle(op);
    pump();
  }

  void next_chunk(OpId op, std::unique_ptr<ChunkWaiter> waiter) {
    auto it = inbox_.find(op);
    if (it == inbox_.end()) {
      waiter->chunk({}, std::nullopt);
      return;
    }
    it->second.chunk_waiter = std::move(waiter);
    settle(op);
    pump();
  }

  void cancel(OpId op) {
    auto it = inbox_.find(op);
    if (it == inbox_.end() || it->second.finished()) return;
    cancelled_.insert(op);
    machine_->submit_cancel(op, now());
    pump();
  }

  void kill_and_release() {
    if (released_) return;
    released_ = true;
    struct Keep final : Waiter {
      std::shared_ptr<Session> self;
      void done(std::error_code, Completion) override { self.reset(); }
    };
    auto keep = std::make_unique<Keep>();
    keep->self = shared_from_this();
    Submit kill = [](Machine& m, Instant now) { return m.submit_kill(now); };
    start(kill, std::move(keep), nullptr);
  }

  // detach(): the owner lets go. A lease (e2b://) gives way to what is left of the lifetime;
  // the session lives until the backend confirms.
  void let_go() {
    if (released_) return;
    released_ = true;
    const std::optional<OpId> op = machine_->submit_release(now());
    if (!op) return pump();
    struct Keep final : Waiter {
      std::shared_ptr<Session> self;
      void done(std::error_code, Completion) override { self.reset(); }
    };
    auto keep = std::make_unique<Keep>();
    keep->self = shared_from_this();
    inbox_[*op].waiter = std::move(keep);
    settle(*op);
    pump();
  }

 private:
  struct Inbox {
    std::deque<OutputChunk> chunks;
    std::optional<Completion> done;
    std::optional<Problem> failed;
    bool cancelled = false;
    std::unique_ptr<Waiter> waiter;
    std::unique_ptr<ChunkWaiter> chunk_waiter;
    bool finished() const { return done || failed || cancelled; }
  };
  struct Conn {
    std::unique_ptr<asio::generic::stream_protocol::socket> socket;
    std::deque<std::string> out;
    bool writing = false;
    bool half_close = false;
    std::string held;                 // bytes the machine did not consume (backpressure)
    std::unique_ptr<TlsChannel> tls;  // tls endpoints: ciphertext on the socket
    bool tls_ready = false;
    std::array<char, 64 * 1024> buf{};
    bool reading = false;
    Endpoint endpoint{};     // for the peer check once connected
    ChildProcess process{};  // a Process endpoint's program: ended with the connection
    // request::Pass: descriptors riding on pieces of `out`, by the piece's number (`popped`
    // counts the pieces written), oldest first.
    std::deque<std::pair<std::uint64_t, int>> passing;
    std::uint64_t popped = 0;
    Conn() = default;
    Conn(const Conn&) = delete;
    Conn& operator=(const Conn&) = delete;
    ~Conn() {
      for (const auto& [piece, fd] : passing)
        ::close(fd);
    }
  };

  void discard_chunks(OpId op, Inbox& box) {
    if (!box.waiter) return;
    std::size_t n = 0;
    for (const auto& c : box.chunks)
      n += c.data.size();
    box.chunks.clear();
    if (n != 0) machine_->handle_consumed(op, n, now());
  }

  // Delivers what an op's waiters can take now.
  void settle(OpId op) {
    auto it = inbox_.find(op);
    if (it == inbox_.end()) return;
    Inbox& box = it->second;
    if (box.chunk_waiter) {
      if (!box.chunks.empty()) {
        OutputChunk c = std::move(box.chunks.front());
        box.chunks.pop_front();
        machine_->handle_consumed(op, c.data.size(), now());
        std::exchange(box.chunk_waiter, nullptr)->chunk({}, std::move(c));
      } else if (box.finished()) {
        std::exchange(box.chunk_waiter, nullptr)
            ->chunk(
                box.cancelled ? make_error_code(asio::error::operation_aborted) : std::error_code(),
                std::nullopt);
      }
    }
    discard_chunks(op, box);
    if (box.waiter && box.finished()) {
      auto waiter = std::exchange(box.waiter, nullptr);
      if (box.cancelled) {
        waiter->done(make_error_code(asio::error::operation_aborted), std::monostate{});
      } else if (box.failed) {
        waiter->done(make_error_code(box.failed->code), std::monostate{});
      } else if (auto failure = records_.take_failure()) {
        // AuditFailurePolicy::Fail: a record of this batch (its own, routed by now) did not
        // reach the sink.
        waiter->done(make_error_code(failure->code), std::monostate{});
      } else {
        waiter->done({}, std::move(*box.done));
      }
      inbox_.erase(it);
    }
  }

  // Drains the machine. Settling (completing handlers) waits until the whole batch is routed,
  // so that an operation's record reaches the audit sink before its caller sees the result.
  void pump() {
    std::set<OpId> touched;
    while (true) {
      bool progressed = reoffer();
      while (auto req = machine_->poll_request()) {
        perform(std::move(*req));
        progressed = true;
      }
      while (auto ev = machine_->poll_event()) {
        progressed = true;
        route(std::move(*ev), touched);
      }
      if (!progressed) break;
    }
    for (OpId op : touched)
      settle(op);
    arm_timer();
    linger();
  }

  // Offers bytes the machine held back (backpressure) again: the consumer may have made room.
  // A connection reads again once its held bytes are all taken.
  bool reoffer() {
    bool any = false;
    std::vector<ConnId> resume;
    for (auto& [id, c] : conns_) {
      if (c.held.empty()) continue;
      const std::size_t used = machine_->handle_bytes(id, c.held, now());
      if (used == 0) continue;
      any = true;
      c.held.erase(0, used);
      if (c.held.empty()) resume.push_back(id);
    }
    for (ConnId id : resume)
      read(id);
    return any;
  }

  // While the machine has work nobody waits for (removing a half-made sandbox), the session
  // keeps itself alive, up to the teardown grace, even when every handle is gone.
  void linger() {
    if (machine_->busy()) {
      if (lingering_) return;
      lingering_ = shared_from_this();
      linger_timer_.expires_after(options_.teardown_grace.value_or(kDefaultTeardownGrace));
      linger_timer_.async_wait([weak = weak_from_this()](std::error_code ec) {
        auto self = weak.lock();
        if (!self || ec) return;
        asio::post(self->strand_, [keep = std::move(self->lingering_)] {});
      });
    } else if (lingering_) {
      linger_timer_.cancel();
      asio::post(strand_, [keep = std::move(lingering_)] {});
    }
  }

  void route(Event ev, std::set<OpId>& touched) {
    std::visit(
        [&](auto&& e) {
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, event::Record>) {
            records_.record(
                std::move(e.record),
                wall_epoch_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                  e.started.time_since_epoch()));
          } else if constexpr (std::is_same_v<E, event::Warning>) {
            records_.warn(e.problem);
          } else {
            auto it = inbox_.find(e.op);
            if (it == inbox_.end()) return;  // an operation nobody waits for any more
            Inbox& box = it->second;
            if constexpr (std::is_same_v<E, event::Output>) {
              box.chunks.push_back(std::move(e.chunk));
            } else if constexpr (std::is_same_v<E, event::Done>) {
              box.done = std::move(e.value);
            } else if constexpr (std::is_same_v<E, event::Failed>) {
              box.failed = std::move(e.problem);
            } else if constexpr (std::is_same_v<E, event::Cancelled>) {
              box.cancelled = true;
            }
            // A stream the caller dropped or killed: nobody will read its end.
            if (box.finished() && !box.waiter && !box.chunk_waiter && cancelled_.count(e.op) != 0) {
              inbox_.erase(it);
              return;
            }
            touched.insert(e.op);
          }
        },
        std::move(ev));
  }

  void arm_timer() {
    const auto deadline = machine_->poll_deadline();
    if (!deadline) {
      timer_.cancel();
      return;
    }
    if (armed_ && armed_at_ == *deadline) return;
    armed_ = true;
    armed_at_ = *deadline;
    timer_.expires_at(epoch_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   deadline->time_since_epoch()));
    timer_.async_wait([weak = weak_from_this(), at = *deadline](std::error_code ec) {
      auto self = weak.lock();
      if (!self || ec) return;
      self->armed_ = false;
      self->machine_->handle_timeout(self->now());
      self->pump();
    });
  }

  // TLS: the next ciphertext once what was queued has gone (the channel encrypts queued
  // plaintext a slice at a time as the socket drains).
  static void refill(Conn& c) {
    if (!c.tls || !c.out.empty()) return;
    if (auto cipher = c.tls->take_cipher(); !cipher.empty()) c.out.push_back(std::move(cipher));
  }

  void perform(Request request) {
    std::visit(
        [&](auto&& r) {
          using R = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<R, request::Open>) {
            if (!(r.may_reuse && reuse(r.conn, r.endpoint))) open(r.conn, r.endpoint);
          } else if constexpr (std::is_same_v<R, request::Send>) {
            auto it = conns_.find(r.conn);
            if (it == conns_.end()) return;
            if (it->second.tls) {
              it->second.tls->write(std::move(r.data));
              refill(it->second);
            } else {
              it->second.out.push_back(std::move(r.data));
            }
            write(r.conn);
          } else if constexpr (std::is_same_v<R, request::HalfClose>) {
            auto it = conns_.find(r.conn);
            if (it == conns_.end()) return;
            if (it->second.tls) {
              it->second.tls->close_notify();
              refill(it->second);
            }
            it->second.half_close = true;
            write(r.conn);
          } else if constexpr (std::is_same_v<R, request::Close>) {
            auto it = conns_.find(r.conn);
            if (it == conns_.end()) return;
            if (r.reusable_for > std::chrono::nanoseconds::zero() &&
                park(it->second, r.reusable_for)) {
              conns_.erase(it);  // the pool owns the descriptor now
              return;
            }
            std::error_code ignored;
            if (it->second.socket) it->second.socket->close(ignored);
            conns_.erase(it);
          } else if constexpr (std::is_same_v<R, request::ProbeOwners>) {
            machine_->handle_owners_gone(backend::owners_gone(r.owners), now());
          } else if constexpr (std::is_same_v<R, request::Pass>) {
            pass(r.conn, r.via, std::move(r.data));
          }
        },
        std::move(request));
  }

  // Hands the socket of `id` (connected, never read: connected() reads only after the
  // machine's answer) to the peer of `via`, riding on `data`.
  void pass(ConnId id, ConnId via, std::string data) {
    auto it = conns_.find(id);
    if (it == conns_.end() || !it->second.socket) return;
    std::error_code ec;
    int fd = it->second.socket->release(ec);
    if (ec) fd = -1;
    conns_.erase(it);
    auto to = conns_.find(via);
    if (to == conns_.end()) {
      if (fd >= 0) ::close(fd);
      return;
    }
    Conn& c = to->second;
    // A descriptor goes only to the peer of a plain Unix socket or socket pair. Elsewhere the
    // data goes alone, and the peer, finding no socket with it, ends what it was for.
    if (fd >= 0 && (c.endpoint.kind == Endpoint::Kind::Tcp || c.tls)) {
      ::close(fd);
      fd = -1;
    }
    if (fd >= 0) c.passing.emplace_back(c.popped + c.out.size(), fd);
    c.out.push_back(std::move(data));
    write(via);
  }

  // A connection idle between HTTP exchanges, nothing pending either way, goes to the
  // process's pool (shared with the blocking transport): its socket leaves this session's
  // strand, its pending read cancelled. Anything else is closed by the caller.
  static bool park(Conn& c, std::chrono::nanoseconds reusable_for) {
    const bool clean =
        c.socket && c.socket->is_open() && c.out.empty() && !c.writing && !c.half_close &&
        c.held.empty() && c.passing.empty() && c.endpoint.kind != Endpoint::Kind::Process &&
        (!c.tls || (c.tls_ready && !c.tls->peer_closed() && !c.tls->has_queued_plain()));
    if (!clean) return false;
    std::error_code ec;
    const int fd = c.socket->release(ec);
    if (ec || fd < 0) return false;
    ConnectionPool::process().park(ConnectionPool::Parked{
        fd, std::move(c.tls), c.endpoint,
        std::chrono::steady_clock::now() +
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(reusable_for)});
    c.socket.reset();
    return true;
  }

  // An Open that may reuse: a live pooled connection to the endpoint becomes this one, on this
  // session's strand. The machine hears of it after this call, never inside it.
  bool reuse(ConnId id, const Endpoint& ep) {
    if (ep.kind == Endpoint::Kind::Process) return false;
    auto kept = ConnectionPool::process().take(ep);
    if (!kept) return false;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(kept->fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(kept->fd);
      return false;
    }
    const int family = addr.ss_family;
    Conn& c = conns_[id];
    std::error_code ec;
    c.socket = std::make_unique<asio::generic::stream_protocol::socket>(strand_);
    c.socket->assign(asio::generic::stream_protocol(family, family == AF_UNIX ? 0 : IPPROTO_TCP),
                     kept->fd, ec);
    if (ec) {
      ::close(kept->fd);
      conns_.erase(id);
      return false;
    }
    c.endpoint = ep;
    c.tls = std::move(kept->tls);
    c.tls_ready = static_cast<bool>(c.tls);
    asio::post(strand_, [weak = weak_from_this(), id] {
      auto self = weak.lock();
      if (!self || !self->conns_.contains(id)) return;
      self->machine_->handle_reused(id, self->now());
      self->pump();
      if (self->conns_.contains(id)) self->read(id);
    });
    return true;
  }

  void open(ConnId id, const Endpoint& ep) {
    std::unique_ptr<TlsChannel> tls;
    if (ep.tls) {
      auto channel = TlsChannel::client(ep);
      if (!channel) {
        machine_->handle_connect_failed(id, channel.problem(), now());
        return;
      }
      tls = std::move(channel).value();
    }
    Conn& c = conns_[id];
    c.tls = std::move(tls);
    c.endpoint = ep;
    if (ep.kind == Endpoint::Kind::Process) {
      auto spawned = spawn_connected(ep);
      if (!spawned) {
        conns_.erase(id);
        machine_->handle_connect_failed(id, spawned.problem(), now());
        return;
      }
      c.socket = std::make_unique<asio::generic::stream_protocol::socket>(
          strand_, asio::generic::stream_protocol(AF_UNIX, 0), spawned.value().fd);
      c.process = std::move(spawned.value().process);
      // Connected from the start; completing never happens inside the initiating call.
      asio::post(strand_, [weak = weak_from_this(), id] {
        if (auto self = weak.lock()) self->connected(id, {});
      });
      return;
    }
    if (ep.kind == Endpoint::Kind::Unix) {
      asio::local::stream_protocol::endpoint local(ep.address);
      c.socket = std::make_unique<asio::generic::stream_protocol::socket>(
          strand_, asio::generic::stream_protocol(AF_UNIX, 0));
      c.socket->async_connect(asio::generic::stream_protocol::endpoint(local),
                              [weak = weak_from_this(), id](std::error_code ec) {
                                if (auto self = weak.lock()) self->connected(id, ec);
                              });
      return;
    }
    auto resolver = std::make_shared<asio::ip::tcp::resolver>(strand_);
    resolver->async_resolve(
        ep.address, std::to_string(ep.port),
        [weak = weak_from_this(), id, resolver](std::error_code ec,
                                                asio::ip::tcp::resolver::results_type results) {
          auto self = weak.lock();
          if (!self) return;
          if (ec || results.empty()) {
            self->connected(id, ec ? ec : make_error_code(asio::error::host_not_found));
            return;
          }
          auto it = self->conns_.find(id);
          if (it == self->conns_.end()) return;
          const asio::ip::tcp::endpoint tcp = *results.begin();
          it->second.socket = std::make_unique<asio::generic::stream_protocol::socket>(
              self->strand_, asio::generic::stream_protocol(tcp.protocol().family(), IPPROTO_TCP));
          it->second.socket->async_connect(asio::generic::stream_protocol::endpoint(tcp),
                                           [weak, id](std::error_code e) {
                                             if (auto s = weak.lock()) s->connected(id, e);
                                           });
        });
  }

  void connected(ConnId id, std::error_code ec) {
    std::optional<Problem> wrong;
    if (auto it = conns_.find(id); !ec && it != conns_.end() && it->second.socket)
      wrong = check_peer(it->second.socket->native_handle(), it->second.endpoint);
    if (ec || wrong) {
      conns_.erase(id);
      machine_->handle_connect_failed(
          id, wrong ? std::move(*wrong) : Problem{errc::ConnectionFailed, ec.message(), {}}, now());
    } else {
      auto it = conns_.find(id);
      if (it != conns_.end() && it->second.tls) {
        it->second.out.push_back(it->second.tls->take_cipher());  // the ClientHello
        write(id);
        read(id);
      } else {
        machine_->handle_connected(id, now());
        // The machine's answer before the first read: it may hand this socket over
        // (request::Pass), and then nothing here may have taken a byte from it.
        pump();
        if (conns_.contains(id)) read(id);
        return;
      }
    }
    pump();
  }

  // Bytes from the socket, through TLS when the endpoint asked for it.
  void received(ConnId id, Conn& c, std::string_view data) {
    if (!c.tls) {
      const std::size_t used = machine_->handle_bytes(id, data, now());
      if (used < data.size()) c.held.assign(data.substr(used));
      return;
    }
    auto r = c.tls->feed(data);
    if (auto cipher = c.tls->take_cipher(); !cipher.empty()) {
      c.out.push_back(std::move(cipher));
      write(id);
    }
    if (!r) {
      if (!c.tls_ready) {
        std::error_code ignored;
        c.socket->close(ignored);
        conns_.erase(id);
        machine_->handle_connect_failed(id, r.problem(), now());
      } else {
        machine_->handle_eof(id, now());
      }
      return;
    }
    if (!c.tls_ready && c.tls->established()) {
      c.tls_ready = true;
      machine_->handle_connected(id, now());
    }
    c.held += c.tls->take_plain();
    if (!c.held.empty()) {
      const std::size_t used = machine_->handle_bytes(id, c.held, now());
      c.held.erase(0, used);
    }
    if (c.tls->peer_closed() && c.held.empty()) machine_->handle_eof(id, now());
  }

  void read(ConnId id) {
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second.reading || !it->second.held.empty()) return;
    Conn& c = it->second;
    c.reading = true;
    c.socket->async_read_some(asio::buffer(c.buf), [weak = weak_from_this(), id](std::error_code ec,
                                                                                 std::size_t n) {
      auto self = weak.lock();
      if (!self) return;
      auto cit = self->conns_.find(id);
      if (cit == self->conns_.end()) return;
      cit->second.reading = false;
      if (ec) {
        if (cit->second.tls && !cit->second.tls_ready) {
          self->conns_.erase(cit);
          self->machine_->handle_connect_failed(
              id,
              Problem{
                  errc::TlsError, "the server closed the connection during the TLS handshake", {}},
              self->now());
        } else if (ec != asio::error::eof && ec != asio::error::operation_aborted) {
          // A reset, not an end: the machine must not take it for a complete reply or stream.
          std::error_code ignored;
          cit->second.socket->close(ignored);
          self->conns_.erase(cit);
          self->machine_->handle_connect_failed(
              id, Problem{errc::ConnectionLost, "reading from the connection: " + ec.message(), {}},
              self->now());
        } else {
          self->machine_->handle_eof(id, self->now());
        }
      } else {
        self->received(id, cit->second, std::string_view(cit->second.buf.data(), n));
        self->read(id);
      }
      self->pump();
    });
  }

  void write(ConnId id) {
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second.writing || !it->second.socket) return;
    Conn& c = it->second;
    refill(c);
    if (c.out.empty()) {
      if (c.half_close && !(c.tls && c.tls->has_queued_plain())) {
        std::error_code ignored;
        c.socket->shutdown(asio::socket_base::shutdown_send, ignored);
        c.half_close = false;
      }
      return;
    }
    if (!c.passing.empty() && c.passing.front().first == c.popped) {
      // A descriptor rides on this piece's first byte: one sendmsg of it now, the rest (if
      // the socket took less) as usual.
      const ssize_t n =
          send_with_descriptor(c.socket->native_handle(), c.out.front(), c.passing.front().second);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        c.writing = true;
        c.socket->async_wait(asio::socket_base::wait_write,
                             [weak = weak_from_this(), id](std::error_code) {
                               auto self = weak.lock();
                               if (!self) return;
                               auto cit = self->conns_.find(id);
                               if (cit == self->conns_.end()) return;
                               cit->second.writing = false;
                               self->write(id);
                             });
        return;
      }
      ::close(c.passing.front().second);  // the peer has its own now, or never will
      c.passing.pop_front();
      if (n < 0) {
        machine_->handle_eof(id, now());
        pump();
        return;
      }
      c.out.front().erase(0, static_cast<std::size_t>(n));
      if (c.out.front().empty()) {
        c.out.pop_front();
        ++c.popped;
        return write(id);
      }
    }
    c.writing = true;
    asio::async_write(*c.socket, asio::buffer(c.out.front()),
                      [weak = weak_from_this(), id](std::error_code ec, std::size_t) {
                        auto self = weak.lock();
                        if (!self) return;
                        auto cit = self->conns_.find(id);
                        if (cit == self->conns_.end()) return;
                        cit->second.writing = false;
                        cit->second.out.pop_front();
                        ++cit->second.popped;
                        if (ec) {
                          self->machine_->handle_eof(id, self->now());
                          self->pump();
                          return;
                        }
                        self->write(id);
                      });
  }

  asio::strand<asio::any_io_executor> strand_;
  asio::steady_timer timer_;
  asio::steady_timer linger_timer_;
  std::shared_ptr<Session> lingering_;
  std::unique_ptr<Machine> machine_;
  CreateOptions options_;
  std::chrono::steady_clock::time_point epoch_;
  std::chrono::system_clock::time_point wall_epoch_;
  std::map<OpId, Inbox> inbox_;
  std::map<ConnId, Conn> conns_;
  bool armed_ = false;
  Instant armed_at_{};
  bool released_ = false;
  std::set<OpId> cancelled_;

 public:
  std::vector<Problem> warnings_;

 private:
  RecordRouter records_;  // records and warnings (after warnings_, which it fills)
};

void start(const std::shared_ptr<Session>& session, Submit submit, std::unique_ptr<Waiter> waiter,
           asio::cancellation_slot slot) {
  // The slot is bound now, during initiation, so a cancellation emitted right after the
  // initiating call returns is honoured even before the operation reached the strand.
  std::shared_ptr<Session::CancelState> state;
  if (slot.is_connected()) {
    state = std::make_shared<Session::CancelState>();
    slot.assign([weak = std::weak_ptr<Session>(session), state](asio::cancellation_type) {
      if (auto self = weak.lock()) {
        asio::dispatch(self->strand(), [self, state] {
          state->requested = true;
          if (state->op != 0) self->cancel(state->op);
        });
      }
    });
  }
  asio::dispatch(session->strand(),
                 [session, submit = std::move(submit), w = std::move(waiter), state]() mutable {
                   session->start(submit, std::move(w), state);
                 });
}

void start_stream(const std::shared_ptr<Session>& session, Submit submit,
                  std::unique_ptr<StreamWaiter> waiter) {
  asio::dispatch(session->strand(),
                 [session, submit = std::move(submit), w = std::move(waiter)]() mutable {
                   session->start_stream(submit, std::move(w));
                 });
}

void next_chunk(const std::shared_ptr<Session>& session, OpId op,
                std::unique_ptr<ChunkWaiter> waiter, asio::cancellation_slot slot) {
  if (slot.is_connected()) {
    slot.assign([weak = std::weak_ptr<Session>(session), op](asio::cancellation_type) {
      if (auto s = weak.lock()) asio::dispatch(s->strand(), [s, op] { s->cancel(op); });
    });
  }
  asio::dispatch(session->strand(), [session, op, w = std::move(waiter)]() mutable {
    session->next_chunk(op, std::move(w));
  });
}

void wait_for(const std::shared_ptr<Session>& session, OpId op, std::unique_ptr<Waiter> waiter,
              asio::cancellation_slot slot) {
  if (slot.is_connected()) {
    slot.assign([weak = std::weak_ptr<Session>(session), op](asio::cancellation_type) {
      if (auto s = weak.lock()) asio::dispatch(s->strand(), [s, op] { s->cancel(op); });
    });
  }
  asio::dispatch(session->strand(), [session, op, w = std::move(waiter)]() mutable {
    session->wait_for(op, std::move(w));
  });
}

void cancel(const std::shared_ptr<Session>& session, OpId op) {
  asio::dispatch(session->strand(), [session, op] { session->cancel(op); });
}

void open(asio::any_io_executor ex, std::string dsn, CreateOptions options, bool connect,
          std::string id, std::unique_ptr<Waiter> waiter, asio::cancellation_slot slot,
          std::function<void(std::shared_ptr<Session>)> keep) {
  auto parsed = parse_dsn(dsn);
  std::optional<Problem> problem;
  if (!options.teardown_grace) {
    auto grace = teardown_grace();
    if (!grace)
      problem = grace.problem();
    else
      options.teardown_grace = grace.value();
  }
  std::unique_ptr<Machine> machine;
  if (problem) {
  } else if (!parsed) {
    problem = parsed.problem();
  } else if (auto made = make_machine(parsed.value(), options); !made) {
    problem = made.problem();
  } else {
    machine = std::move(made).value();
  }
  if (problem) {
    // Completed through the waiter, which posts: never inside the initiating function.
    waiter->done(make_error_code(problem->code), std::monostate{});
    return;
  }
  auto session = std::make_shared<Session>(ex, std::move(machine), options);
  keep(session);
  options = session->options();  // with its trace (telemetry::attach)
  Submit submit =
      connect
          ? Submit([id = std::move(id), options](Machine& m, Instant now) mutable {
              return m.submit_connect(std::move(id), options, now);
            })
          : Submit([options](Machine& m, Instant now) { return m.submit_create(options, now); });
  start(session, std::move(submit), std::move(waiter), slot);
}

asio::any_io_executor executor_of(const std::shared_ptr<Session>& session) {
  return session->strand();
}
std::string_view scheme_of(const std::shared_ptr<Session>& session) {
  return session->machine().scheme();
}
CapabilitySet capabilities_of(const std::shared_ptr<Session>& session) {
  return session->machine().capabilities();
}
IsolationTier tier_of(const std::shared_ptr<Session>& session) {
  return session->machine().tier();
}
std::vector<Problem> warnings_of(const std::shared_ptr<Session>& session) {
  return session->warnings_;
}

void release(const std::shared_ptr<Session>& session, bool kill) {
  if (!kill) {
    asio::dispatch(session->strand(), [session] { session->let_go(); });
    return;
  }
  asio::dispatch(session->strand(), [session] { session->kill_and_release(); });
}

}  // namespace sandboxio::async::detail
