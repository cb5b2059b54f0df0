// HTTP exchanges for machines that speak HTTP/1.1 to their backend: one request at a time on
// a connection, its reply parsed as bytes arrive, handed to a continuation with the reply (or
// the problem). Heads and bodies can be watched as they come (a stat header, a tar stream,
// NDJSON lines), bodies are bounded, and a connection may be upgraded (Docker's exec and
// attach streams), after which its bytes belong to the machine.
//
// With keep_alive() on, a reply that ends cleanly leaves its connection idle, and the next
// request to the same endpoint goes out on it: no TCP or TLS handshake. Idle connections are
// bounded per endpoint and closed after an idle limit (the peer's Keep-Alive timeout less a
// second when it gives one, up to ten minutes, as undici does); one the peer closed while idle is
// forgotten, and a request that finds its reused connection dead before any reply byte goes once
// more on a new one when it is safe to repeat (GET, HEAD, PUT, DELETE, OPTIONS).
//
//   ConnId c = http_.start(op, endpoint, {wire}, [this, op](Result<Reply> r, Instant now) {
//     if (!r) return void(fail(op, r.problem(), now));
//     ...
//   }, "GET /containers/ID/json");
//   // in handle_bytes: auto fed = http_.feed(conn, data, now);
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandboxio/backend/core.hpp"
#include "sandboxio/codec/http.hpp"

namespace sandboxio::backend {

/// A whole reply.
struct Reply {
  int status = 0;
  std::vector<http::Header> headers{};
  Bytes body{};

  /// The first header with this name (case-insensitive).
  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const;
  /// The peer's error text: {"message": "..."} or the start of the raw body.
  [[nodiscard]] std::string message() const;
};

using Then = std::function<void(Result<Reply>, Instant)>;

/// One request and its reply on a connection of its own.
struct Exchange {
  OpId op = 0;                // the operation it serves (0: the machine's own housekeeping)
  std::string what{};         // "POST /containers/create": for describe() and messages
  std::string origin{};       // where it goes, for messages
  std::vector<Bytes> wire{};  // the request in pieces, sent in order once connected
  std::unique_ptr<http::ResponseParser> parser{};
  Then then{};
  Reply reply{};
  bool head_seen = false;
  bool may_upgrade = false;  // a 101 hands the connection to the machine
  bool upgraded = false;
  bool streams_output = false;  // its body is a command's output: held back under backpressure
  std::uint64_t tag = 0;        // the machine's own mark (an exec, the lease)
  std::size_t body_limit = std::size_t{16} << 20;
  Endpoint to{};                // where it goes (a repeat on a new connection goes there)
  bool reused = false;          // sent on a kept-alive connection
  bool answered = false;        // a reply byte came
  bool spilled = false;         // bytes came after the reply ended
  std::vector<Bytes> repeat{};  // reused and safe to repeat: the request, to send again
  /// Sees the head once it is complete; a Problem ends the exchange with it.
  std::function<std::optional<Problem>(const http::ResponseParser&, Instant)> on_head{};
  /// Takes a 200 reply's body as it arrives (instead of collecting it); a Problem ends it.
  std::function<std::optional<Problem>(std::string_view, Instant)> on_body{};
};

class Exchanges {
 public:
  /// `peer` names the other side in messages ("the Docker engine", "E2B").
  Exchanges(Outbox& out, std::string peer) : out_(out), peer_(std::move(peer)) {}

  /// Opens a connection for a request already written (head and body, in pieces).
  ConnId start(OpId op, const Endpoint& to, std::vector<Bytes> wire, Then then, std::string what);
  [[nodiscard]] Exchange* find(ConnId id);
  [[nodiscard]] const std::map<ConnId, Exchange>& all() const { return conns_; }
  [[nodiscard]] bool empty() const { return conns_.empty(); }
  [[nodiscard]] std::size_t size() const { return conns_.size(); }

  /// The connection is up: the request goes out.
  void connected(ConnId id);
  /// The connection opened for `id` is one the driver kept from another machine: the request
  /// is treated as sent on a kept-alive connection (call before connected()).
  void reused(ConnId id);

  struct Fed {
    std::size_t used = 0;
    bool upgraded = false;  // a 101 arrived: the rest of the bytes are the machine's
  };
  /// Feeds reply bytes. Continuations run from here. `held(op)` says whether a streaming
  /// exchange's consumer is behind (its bytes then wait in the driver).
  Fed feed(ConnId id, std::string_view data, Instant now,
           const std::function<bool(OpId)>& held = {});
  /// The peer ended the connection: the reply is complete or cut short.
  void eof(ConnId id, Instant now);
  /// Ends an exchange: its continuation gets the problem, or the reply so far.
  void finish(ConnId id, std::optional<Problem> problem, Instant now);
  /// Closes a connection without calling its continuation.
  void drop(ConnId id);
  /// Closes every exchange of `op` that `which` selects (all when empty), without calling
  /// their continuations.
  void drop_op(OpId op, const std::function<bool(const Exchange&)>& which = {});
  /// What `op` waits for: the exchanges in flight for it.
  [[nodiscard]] std::string waiting_for(OpId op) const;

  // ---- keep-alive ----

  /// Keeps up to `per_endpoint` idle connections to each endpoint, each for `idle_limit`, or
  /// for the peer's Keep-Alive timeout less a second when it gives one. Off until called.
  void keep_alive(std::size_t per_endpoint, std::chrono::nanoseconds idle_limit);
  /// When the next idle connection is due to be closed.
  [[nodiscard]] std::optional<Instant> idle_deadline() const;
  /// Closes the idle connections whose time is up.
  void expire_idle(Instant now);
  /// Closes every idle connection (the sandbox has ended). Given `now`, each is offered to the
  /// driver for reuse by other machines for the rest of its idle time (Close::reusable_for).
  void close_idle(std::optional<Instant> now = std::nullopt);
  /// An idle connection failed or ended: forgets it. False when `id` is not idle.
  bool forget_idle(ConnId id);
  /// A connection failed: when it was reused, no reply byte came and the request is safe to
  /// repeat, the request goes again on a new connection (true; the exchange keeps its
  /// continuation under a new ConnId).
  bool retry_stale(ConnId id);
  [[nodiscard]] std::size_t idle_count() const { return idle_.size(); }
  /// Connections opened so far (Open requests), kept-alive ones counted once.
  [[nodiscard]] std::uint64_t opened() const { return opened_; }

 private:
  bool take_progress(ConnId id, Instant now);
  static void mark_reused(Exchange& x, const std::vector<Bytes>& wire);
  void keep_or_close(ConnId id, const Exchange& x, Instant now);

  struct Idle {
    std::string key;
    Endpoint to;
    Instant until;
  };

  Outbox& out_;
  std::string peer_;
  std::map<ConnId, Exchange> conns_{};
  std::map<ConnId, Idle> idle_{};
  std::size_t per_endpoint_ = 0;  // 0: no keep-alive
  std::chrono::nanoseconds idle_limit_{};
  std::uint64_t opened_ = 0;
  ConnId next_ = 1;
};

/// The core of a machine that speaks HTTP/1.1 to its backend: the operation table and the
/// exchanges, with the inputs every such machine answers the same way.
template <class State>
class HttpMachine : public MachineCore<State> {
 public:
  void handle_connected(ConnId id, Instant) override { http_.connected(id); }
  /// Another machine's idle connection: the exchange counts as sent on a reused connection.
  void handle_reused(ConnId id, Instant now) override {
    http_.reused(id);
    this->handle_connected(id, now);
  }
  /// Reply bytes; an exchange that carries a stream()'s output waits while its consumer is
  /// Limits::stream_buffer behind (the bytes stay with the driver: backpressure).
  std::size_t handle_bytes(ConnId id, std::string_view data, Instant now) override {
    return http_.feed(id, data, now, [this](OpId op) { return held(op); }).used;
  }
  void handle_eof(ConnId id, Instant now) override { http_.eof(id, now); }

 protected:
  HttpMachine(std::string scheme, IsolationTier tier, std::string peer)
      : MachineCore<State>(std::move(scheme), tier), http_(this->out_, std::move(peer)) {}
  [[nodiscard]] std::string waiting_for(OpId id) const override { return http_.waiting_for(id); }
  /// A kept-alive connection idle past its limit is closed before an operation could reuse it.
  void opening(Instant now) override { http_.expire_idle(now); }
  /// The reply for operation `id`, or nullptr when the operation ended here: it had ended
  /// already, the exchange failed (the operation fails with that problem), or the peer
  /// answered 404 for the sandbox (it is gone: the operation fails with gone_problem()).
  const Reply* reply_for(OpId id, const Result<Reply>& r, Instant now) {
    if (!this->alive(id)) return nullptr;
    if (!r) {
      this->fail(id, r.problem(), now);
      return nullptr;
    }
    if (r.value().status == 404) {
      this->gone_ = true;
      this->fail(id, this->gone_problem(), now);
      return nullptr;
    }
    return &r.value();
  }
  [[nodiscard]] bool held(OpId id) const {
    if constexpr (requires(const State& s) { s.output.held(this->limits_); }) {
      auto it = this->ops_.find(id);
      return it != this->ops_.end() && it->second.output.held(this->limits_);
    }
    return false;
  }

  Exchanges http_;
};

}  // namespace sandboxio::backend
