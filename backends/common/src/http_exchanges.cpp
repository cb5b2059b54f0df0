// HTTP exchanges shared by the HTTP machines (docker://, e2b://). No I/O: requests go out
// through the Outbox, bytes come in through feed().
#include "sandboxio/backend/http_exchanges.hpp"

#include <algorithm>

#include "sandboxio/codec/json.hpp"

namespace sandboxio::backend {

std::optional<std::string_view> Reply::header(std::string_view name) const {
  for (const auto& h : headers) {
    if (h.name.size() == name.size() &&
        std::equal(h.name.begin(), h.name.end(), name.begin(),
                   [](char a, char b) { return (a | 0x20) == (b | 0x20); }))
      return std::string_view(h.value);
  }
  return std::nullopt;
}

std::string Reply::message() const {
  if (auto doc = json::parse(body); doc) {
    if (auto m = doc.value().string_at("message")) return std::string(*m);
  }
  std::string text = body.substr(0, 300);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
    text.pop_back();
  return text;
}

ConnId Exchanges::start(OpId op, const Endpoint& to, std::vector<Bytes> wire, Then then,
                        std::string what) {
  const ConnId id = next_++;
  Exchange x;
  x.op = op;
  x.what = std::move(what);
  x.parser = std::make_unique<http::ResponseParser>();
  if (x.what.starts_with("HEAD ")) x.parser->expect_no_body();
  x.then = std::move(then);
  x.wire = std::move(wire);
  conns_.emplace(id, std::move(x));
  out_.push(request::Open{id, to});
  return id;
}

Exchange* Exchanges::find(ConnId id) {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second;
}

void Exchanges::connected(ConnId id) {
  Exchange* x = find(id);
  if (!x) return;
  for (Bytes& piece : x->wire)
    out_.push(request::Send{id, std::move(piece)});
  x->wire.clear();
}

Exchanges::Fed Exchanges::feed(ConnId id, std::string_view data, Instant now,
                               const std::function<bool(OpId)>& held) {
  Fed fed;
  while (!data.empty()) {
    Exchange* x = find(id);
    if (!x) return {fed.used + data.size(), false};
    if (x->streams_output && held && held(x->op)) break;  // the consumer has not taken it yet
    const std::size_t used = x->parser->feed(data);
    fed.used += used;
    data.remove_prefix(used);
    if (x->parser->error()) {
      finish(id, *x->parser->error(), now);
      return {fed.used + data.size(), false};
    }
    if (!take_progress(id, now)) return {fed.used + data.size(), false};
    x = find(id);
    if (x->parser->upgraded()) {
      if (!x->may_upgrade) {
        finish(id,
               Problem{errc::RemoteProtocolViolation,
                       peer_ + " upgraded a connection that did not ask for it",
                       {}},
               now);
        return {fed.used + data.size(), false};
      }
      x->upgraded = true;
      fed.upgraded = true;
      return fed;  // the rest (data) is the machine's to read
    }
    if (x->parser->complete()) {
      finish(id, std::nullopt, now);
      return {fed.used + data.size(), false};
    }
    if (used == 0) break;
  }
  return fed;
}

void Exchanges::eof(ConnId id, Instant now) {
  Exchange* x = find(id);
  if (!x) return;
  x->parser->feed_eof();
  if (!take_progress(id, now)) return;
  x = find(id);
  if (x->parser->complete()) return finish(id, std::nullopt, now);
  finish(id,
         x->parser->error().value_or(
             Problem{errc::ConnectionLost, peer_ + " closed the connection mid-reply", {}}),
         now);
}

// Hands new head and body bytes to the exchange's watchers, or collects the body up to its
// limit. False when the exchange ended here.
bool Exchanges::take_progress(ConnId id, Instant now) {
  Exchange* x = find(id);
  if (x->parser->head_done() && !x->head_seen) {
    x->head_seen = true;
    if (x->on_head) {
      if (auto p = x->on_head(*x->parser, now)) {
        finish(id, std::move(*p), now);
        return false;
      }
      x = find(id);
      if (!x) return false;
    }
  }
  Bytes piece = x->parser->take_body();
  if (piece.empty()) return true;
  if (x->on_body && x->parser->status() == 200) {
    if (auto p = x->on_body(piece, now)) {
      finish(id, std::move(*p), now);
      return false;
    }
    return find(id) != nullptr;
  }
  if (x->reply.body.size() + piece.size() > x->body_limit) {
    finish(
        id,
        Problem{errc::MessageTooLarge,
                "a reply from " + peer_ + " exceeded " + std::to_string(x->body_limit) + " bytes",
                {}},
        now);
    return false;
  }
  x->reply.body += piece;
  return true;
}

void Exchanges::finish(ConnId id, std::optional<Problem> problem, Instant now) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Exchange x = std::move(it->second);
  conns_.erase(it);
  out_.push(request::Close{id});
  if (!x.then) return;
  if (problem) return x.then(std::move(*problem), now);
  x.reply.status = x.parser->status();
  x.reply.headers = x.parser->headers();
  x.then(std::move(x.reply), now);
}

void Exchanges::drop(ConnId id) {
  if (conns_.erase(id) != 0) out_.push(request::Close{id});
}

void Exchanges::drop_op(OpId op, const std::function<bool(const Exchange&)>& which) {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->second.op == op && (!which || which(it->second))) {
      out_.push(request::Close{it->first});
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

std::string Exchanges::waiting_for(OpId op) const {
  std::string text;
  for (const auto& [id, x] : conns_) {
    if (x.op != op) continue;
    if (!text.empty()) text += ", ";
    text += x.what.empty() ? std::string("a reply") : x.what;
    text += x.upgraded ? " (stream open)" : x.head_seen ? " (reading the body)" : "";
  }
  return text;
}

}  // namespace sandboxio::backend
