// gRPC calls for machines that speak gRPC to their backend (modal://): HTTP/2 connections, one
// per server, many calls on each as streams, each call's answer handed to a continuation. The
// engine's codecs do the framing (sandboxio/codec/http2.hpp, grpc.hpp); this keeps the
// connections and routes their events to the calls.
//
//   CallId c = grpc_.call({op, target, "/modal.client.ModalClient/AppGetOrCreate", md, 10s,
//                          "AppGetOrCreate"}, request_bytes, true,
//                         {}, [this, op](GrpcReply r, Instant now) { ... });
//   // in handle_bytes: if (grpc_.owns(conn)) return grpc_.feed(conn, data, now);
//
// Unary and server-streaming calls send their one message with end = true. A client-streaming
// call sends more with send() and ends its side with end = true. Messages of a call with an
// on_message hook go to the hook as they come (a stream); otherwise they are kept in the reply.
// A call's status is whatever the server said, or one the codec made (synthesized, with a
// problem) for a reset, a lost connection or a malformed answer.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandboxio/backend/core.hpp"
#include "sandboxio/codec/grpc.hpp"
#include "sandboxio/codec/http2.hpp"

namespace sandboxio::backend {

/// A gRPC server: where to connect, and its :authority and :scheme.
struct GrpcTarget {
  Endpoint endpoint{};
  std::string authority{};  // "api.modal.com" or "localhost:4000"
  std::string scheme = "https";
};

/// A call's answer: its status and, unless it streamed them, its messages.
struct GrpcReply {
  grpc::Status status{};
  std::vector<std::string> messages{};
  std::optional<Problem> problem{};  // why the status was synthesized (a transport problem)
};

using CallId = std::uint64_t;
using GrpcThen = std::function<void(GrpcReply, Instant)>;
/// Takes a streamed message; a Problem ends the call (cancelled) with it as INTERNAL. A hook may
/// start calls but must not cancel any (return the Problem instead).
using GrpcOnMessage = std::function<std::optional<Problem>(std::string_view, Instant)>;

struct GrpcCallSpec {
  OpId op = 0;  // the operation it serves (0: the machine's own)
  GrpcTarget to{};
  std::string path{};  // "/package.Service/Method"
  std::vector<http::Header> metadata{};
  std::optional<std::chrono::milliseconds> timeout{};
  std::string what{};  // "SandboxCreateV2": for describe() and messages
};

class GrpcCalls {
 public:
  /// `peer` names the other side in messages ("Modal").
  GrpcCalls(Outbox& out, std::string peer) : out_(out), peer_(std::move(peer)) {}

  /// Starts a call with its first message (none when `first` is empty and end is false).
  /// A head the codec refuses (a bad metadata value) runs `then` from here, with INTERNAL.
  CallId call(GrpcCallSpec spec, std::string first, bool end, GrpcOnMessage on_message,
              GrpcThen then, Instant now);
  /// Sends one more message of a client-streaming call; `end` ends its side.
  void send(CallId id, std::string_view message, bool end);
  /// Stops a call without its continuation (RST_STREAM CANCEL).
  void cancel(CallId id);
  /// Stops every call of `op` without their continuations.
  void cancel_op(OpId op);
  [[nodiscard]] bool active(CallId id) const { return calls_.count(id) != 0; }

  // ---- the driver's inputs, for connections this opened ----
  [[nodiscard]] bool owns(ConnId id) const { return conns_.count(id) != 0; }
  void connected(ConnId id);
  /// Feeds bytes; continuations and hooks run from here. `held(op)` says whether a call's
  /// consumer is behind: its stream's window is then not given back until resume().
  std::size_t feed(ConnId id, std::string_view data, Instant now,
                   const std::function<bool(OpId)>& held = {});
  void eof(ConnId id, Instant now);
  void failed(ConnId id, const Problem& problem, Instant now);
  /// Gives back the windows of `op`'s calls that were held.
  void resume(OpId op);
  /// Closes every connection (the sandbox has ended); their calls end without continuations.
  void close_all();
  /// What `op` waits for: its calls in flight.
  [[nodiscard]] std::string waiting_for(OpId op) const;
  [[nodiscard]] std::size_t calls() const { return calls_.size(); }
  [[nodiscard]] std::size_t connections() const { return conns_.size(); }
  [[nodiscard]] std::uint64_t opened() const { return opened_; }

 private:
  struct Conn {
    GrpcTarget to{};
    std::unique_ptr<http2::Client> h2{};
    bool up = false;
    std::map<http2::StreamId, CallId> streams{};
  };
  struct Call {
    GrpcCallSpec spec{};
    ConnId conn = 0;
    http2::StreamId stream = 0;
    grpc::CallReader reader{std::size_t{100} << 20};
    GrpcOnMessage on_message{};
    GrpcThen then{};
    std::vector<std::string> messages{};
    std::size_t held_bytes = 0;  // received, window not given back (consumer behind)
  };

  ConnId connection_for(const GrpcTarget& to);
  void flush(ConnId id);
  void dispatch(ConnId id, Instant now, const std::function<bool(OpId)>& held);
  void finish(CallId id, Instant now, std::optional<Problem> problem = std::nullopt);
  void lose(ConnId id, const Problem& problem, Instant now);

  Outbox& out_;
  std::string peer_;
  std::map<ConnId, Conn> conns_{};
  std::map<CallId, Call> calls_{};
  ConnId next_conn_ = 1;
  CallId next_call_ = 1;
  std::uint64_t opened_ = 0;
};

}  // namespace sandboxio::backend
