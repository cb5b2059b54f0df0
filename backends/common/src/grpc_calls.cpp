#include "sandboxio/backend/grpc_calls.hpp"

#include <utility>

namespace sandboxio::backend {

ConnId GrpcCalls::connection_for(const GrpcTarget& to) {
  for (auto& [id, c] : conns_)
    if (c.to.endpoint == to.endpoint && c.to.authority == to.authority && c.h2->alive() &&
        c.h2->can_open_stream())
      return id;
  const ConnId id = next_conn_++;
  Conn c;
  c.to = to;
  c.h2 = std::make_unique<http2::Client>();
  conns_.emplace(id, std::move(c));
  ++opened_;
  out_.push(request::Open{id, to.endpoint});
  return id;
}

CallId GrpcCalls::call(GrpcCallSpec spec, std::string first, bool end, GrpcOnMessage on_message,
                       GrpcThen then, Instant now) {
  const CallId id = next_call_++;
  const ConnId conn = connection_for(spec.to);
  Conn& c = conns_.at(conn);
  Call call;
  call.conn = conn;
  call.on_message = std::move(on_message);
  call.then = std::move(then);
  auto stream = c.h2->submit_request(
      grpc::request(spec.to.authority, spec.path, spec.metadata, spec.timeout, spec.to.scheme),
      false);
  call.spec = std::move(spec);
  if (!stream) {
    // The codec refused the head (a bad metadata value): the call ends here.
    GrpcReply r;
    r.status.code = grpc::Code::Internal;
    r.status.message = stream.problem().detail;
    r.status.synthesized = true;
    r.problem = stream.problem();
    if (call.then) call.then(std::move(r), now);
    return id;
  }
  call.stream = stream.value();
  c.streams.emplace(call.stream, id);
  calls_.emplace(id, std::move(call));
  if (!first.empty() || end) c.h2->submit_data(stream.value(), grpc::frame(first), end);
  flush(conn);
  return id;
}

void GrpcCalls::send(CallId id, std::string_view message, bool end) {
  auto it = calls_.find(id);
  if (it == calls_.end() || it->second.stream == 0) return;
  Conn& c = conns_.at(it->second.conn);
  c.h2->submit_data(it->second.stream,
                    message.empty() && end ? std::string() : grpc::frame(message), end);
  flush(it->second.conn);
}

void GrpcCalls::cancel(CallId id) {
  auto it = calls_.find(id);
  if (it == calls_.end()) return;
  const Call& call = it->second;
  if (call.stream != 0) {
    Conn& c = conns_.at(call.conn);
    c.h2->cancel(call.stream);
    c.streams.erase(call.stream);
    flush(call.conn);
  }
  calls_.erase(it);
}

void GrpcCalls::cancel_op(OpId op) {
  std::vector<CallId> ids;
  for (const auto& [id, call] : calls_)
    if (call.spec.op == op) ids.push_back(id);
  for (CallId id : ids)
    cancel(id);
}

void GrpcCalls::connected(ConnId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  it->second.up = true;
  flush(id);
}

void GrpcCalls::flush(ConnId id) {
  auto it = conns_.find(id);
  if (it == conns_.end() || !it->second.up) return;
  for (;;) {
    Bytes b = it->second.h2->take_output();
    if (b.empty()) break;
    out_.push(request::Send{id, std::move(b)});
  }
}

std::size_t GrpcCalls::feed(ConnId id, std::string_view data, Instant now,
                            const std::function<bool(OpId)>& held) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return data.size();
  const std::size_t used = it->second.h2->handle_bytes(data);
  dispatch(id, now, held);
  return used;
}

void GrpcCalls::dispatch(ConnId id, Instant now, const std::function<bool(OpId)>& held) {
  auto cit = conns_.find(id);
  if (cit == conns_.end()) return;
  http2::Client& h2 = *cit->second.h2;
  // Hooks run here and may start calls (never end one: they return a Problem instead);
  // continuations run after the loop, since they may close every connection.
  std::vector<std::pair<CallId, std::optional<Problem>>> ended;
  while (auto ev = h2.poll_event()) {
    const http2::StreamId stream = std::visit(
        [](const auto& e) -> http2::StreamId {
          if constexpr (requires { e.stream; }) {
            return e.stream;
          } else {
            return 0;  // GOAWAY: the streams it ends come as resets
          }
        },
        *ev);
    auto sit = cit->second.streams.find(stream);
    if (sit == cit->second.streams.end()) continue;  // a call cancelled since
    const CallId call_id = sit->second;
    Call& call = calls_.at(call_id);
    std::size_t data_bytes = 0;
    if (const auto* d = std::get_if<http2::Data>(&*ev)) data_bytes = d->bytes.size();
    call.reader.on(*ev);
    std::optional<Problem> refused;
    while (!refused) {
      auto m = call.reader.next_message();
      if (!m) break;
      if (call.on_message)
        refused = call.on_message(*m, now);
      else
        call.messages.push_back(std::move(*m));
    }
    if (refused) {
      h2.cancel(stream);
      cit->second.streams.erase(stream);
      ended.emplace_back(call_id, std::move(refused));
      continue;
    }
    if (data_bytes) {
      if (held && held(call.spec.op))
        call.held_bytes += data_bytes;
      else
        h2.consume(stream, data_bytes);
    }
    if (call.reader.done()) {
      cit->second.streams.erase(stream);
      ended.emplace_back(call_id, std::nullopt);
    }
  }
  const std::optional<Problem> lost = h2.error();
  flush(id);
  for (auto& [call_id, problem] : ended) {
    if (problem) {
      auto node = calls_.extract(call_id);
      if (node.empty()) continue;
      GrpcReply r;
      r.status.code = grpc::Code::Internal;
      r.status.message = problem->detail;
      r.status.synthesized = true;
      r.problem = std::move(problem);
      if (node.mapped().then) node.mapped().then(std::move(r), now);
    } else {
      finish(call_id, now);
    }
  }
  if (lost) lose(id, *lost, now);
}

void GrpcCalls::finish(CallId id, Instant now, std::optional<Problem> problem) {
  auto node = calls_.extract(id);
  if (node.empty()) return;
  Call& call = node.mapped();
  if (auto cit = conns_.find(call.conn); cit != conns_.end()) {
    cit->second.streams.erase(call.stream);
    // What a held-back consumer had not read is the connection's window too: given back, or
    // the connection's other calls would starve.
    if (call.held_bytes > 0) {
      cit->second.h2->consume(call.stream, call.held_bytes);
      flush(call.conn);
    }
  }
  GrpcReply r;
  if (call.reader.done()) {
    r.status = call.reader.status();
    r.problem = call.reader.problem();
  } else {
    r.status.code = grpc::Code::Unavailable;
    r.status.synthesized = true;
    r.status.message = problem ? problem->detail : "the connection ended";
    r.problem = problem;
  }
  r.messages = std::move(call.messages);
  if (call.then) call.then(std::move(r), now);
}

void GrpcCalls::lose(ConnId id, const Problem& problem, Instant now) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  std::vector<CallId> ids;
  for (const auto& [stream, call] : it->second.streams)
    ids.push_back(call);
  conns_.erase(it);
  out_.push(request::Close{id});
  for (CallId c : ids)
    finish(c, now, problem);
}

void GrpcCalls::eof(ConnId id, Instant now) {
  lose(id, Problem{errc::ConnectionLost, peer_ + " closed the connection", {}}, now);
}

void GrpcCalls::failed(ConnId id, const Problem& problem, Instant now) {
  lose(id, problem, now);
}

void GrpcCalls::resume(OpId op) {
  for (auto& [id, call] : calls_) {
    if (call.spec.op != op || call.held_bytes == 0) continue;
    Conn& c = conns_.at(call.conn);
    c.h2->consume(call.stream, call.held_bytes);
    call.held_bytes = 0;
    flush(call.conn);
  }
}

void GrpcCalls::close_all() {
  for (auto& [id, c] : conns_) {
    c.h2->shutdown();
    flush(id);
    out_.push(request::Close{id});
  }
  conns_.clear();
  calls_.clear();
}

std::string GrpcCalls::waiting_for(OpId op) const {
  std::string text;
  for (const auto& [id, call] : calls_) {
    if (call.spec.op != op) continue;
    if (!text.empty()) text += ", ";
    text += call.spec.what;
  }
  return text;
}

}  // namespace sandboxio::backend
