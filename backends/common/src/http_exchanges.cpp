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

namespace {

// What tells one endpoint from another for keep-alive: everything a connection was made with.
std::string endpoint_key(const Endpoint& e) {
  std::string key = std::to_string(static_cast<int>(e.kind));
  for (const std::string* part :
       {&e.address, &e.server_name, &e.ca_file, &e.cert_file, &e.key_file}) {
    key += '\0';
    key += *part;
  }
  key += '\0' + std::to_string(e.port) + (e.tls ? "s" : "") + '\0' + std::to_string(e.peer_pid);
  for (const std::string& protocol : e.alpn)
    key += '\0' + protocol;
  return key;
}

// A request the peer may see twice without harm (RFC 9110 9.2.2): a stale connection's
// request is sent again only then.
bool safe_to_repeat(std::string_view what) {
  for (std::string_view m : {"GET ", "HEAD ", "PUT ", "DELETE ", "OPTIONS "}) {
    if (what.starts_with(m)) return true;
  }
  return false;
}

// A request kept to be sent again (a copy) is at most this large; a larger one is not repeated.
constexpr std::size_t kRepeatLimit = std::size_t{1} << 20;

}  // namespace

ConnId Exchanges::start(OpId op, const Endpoint& to, std::vector<Bytes> wire, Then then,
                        std::string what) {
  Exchange x;
  x.op = op;
  x.what = std::move(what);
  x.parser = std::make_unique<http::ResponseParser>();
  if (x.what.starts_with("HEAD ")) x.parser->expect_no_body();
  x.then = std::move(then);
  x.to = to;
  // The newest idle connection to this endpoint, when there is one.
  ConnId reuse = 0;
  if (per_endpoint_ != 0 && to.kind != Endpoint::Kind::Process) {
    const std::string key = endpoint_key(to);
    for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
      if (it->second.key == key) {
        reuse = it->first;
        break;
      }
    }
  }
  if (reuse != 0) {
    idle_.erase(reuse);
    mark_reused(x, wire);
    for (Bytes& piece : wire)
      out_.push(request::Send{reuse, std::move(piece)});
    conns_.emplace(reuse, std::move(x));
    return reuse;
  }
  const ConnId id = next_++;
  x.wire = std::move(wire);
  conns_.emplace(id, std::move(x));
  ++opened_;
  out_.push(request::Open{id, to, per_endpoint_ != 0 && to.kind != Endpoint::Kind::Process});
  return id;
}

Exchange* Exchanges::find(ConnId id) {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second;
}

void Exchanges::mark_reused(Exchange& x, const std::vector<Bytes>& wire) {
  x.reused = true;
  std::size_t size = 0;
  for (const Bytes& piece : wire)
    size += piece.size();
  if (safe_to_repeat(x.what) && size <= kRepeatLimit) x.repeat = wire;
}

void Exchanges::reused(ConnId id) {
  if (Exchange* x = find(id)) mark_reused(*x, x->wire);
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
  if (forget_idle(id)) {  // bytes nobody asked for: the connection is not fit for reuse
    out_.push(request::Close{id});
    return {data.size(), false};
  }
  while (!data.empty()) {
    Exchange* x = find(id);
    if (!x) return {fed.used + data.size(), false};
    x->answered = true;
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
      x->spilled = !data.empty();  // bytes past the reply: the connection is not reusable
      finish(id, std::nullopt, now);
      return {fed.used + data.size(), false};
    }
    if (used == 0) break;
  }
  return fed;
}

void Exchanges::eof(ConnId id, Instant now) {
  if (forget_idle(id)) return void(out_.push(request::Close{id}));
  if (retry_stale(id)) return;
  Exchange* x = find(id);
  if (!x) return;
  x->parser->feed_eof();
  if (!take_progress(id, now)) return;
  x = find(id);
  if (x->parser->complete()) return finish(id, std::nullopt, now);
  const std::string how = x->reused && !x->answered
                              ? " closed a kept-alive connection before replying (the request "
                                "may or may not have been acted on)"
                              : " closed the connection mid-reply";
  finish(id, x->parser->error().value_or(Problem{errc::ConnectionLost, peer_ + how, {}}), now);
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
  if (problem) {
    out_.push(request::Close{id});
  } else {
    keep_or_close(id, x, now);
  }
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

// ---- keep-alive ----

void Exchanges::keep_alive(std::size_t per_endpoint, std::chrono::nanoseconds idle_limit) {
  per_endpoint_ = per_endpoint;
  idle_limit_ = idle_limit;
  if (per_endpoint_ == 0) close_idle();
}

// A reply that ended cleanly, on a connection the peer keeps open: idle, up to the bound.
void Exchanges::keep_or_close(ConnId id, const Exchange& x, Instant now) {
  const http::ResponseParser& p = *x.parser;
  const bool clean =
      p.complete() && p.keep_alive() && !x.upgraded && !x.spilled && p.status() >= 200;
  if (per_endpoint_ == 0 || !clean || x.to.kind == Endpoint::Kind::Process) {
    out_.push(request::Close{id});
    return;
  }
  std::chrono::nanoseconds limit = idle_limit_;
  // "Keep-Alive: timeout=5": the peer closes after that, so stop using it a second before
  // (undici's rule), up to ten minutes.
  for (const auto& h : p.headers()) {
    if (h.name.size() != 10 || (h.name[0] | 0x20) != 'k' || (h.name[5] | 0x20) != 'a') continue;
    const auto at = h.value.find("timeout=");
    if (at == std::string::npos) continue;
    const long long s = std::strtoll(h.value.c_str() + at + 8, nullptr, 10);
    if (s >= 1) limit = std::chrono::seconds(std::min(s - 1, 600LL));
  }
  if (limit <= std::chrono::nanoseconds::zero()) {
    out_.push(request::Close{id});
    return;
  }
  const std::string key = endpoint_key(x.to);
  std::size_t same = 0;
  ConnId oldest = 0;
  for (const auto& [cid, idle] : idle_) {
    if (idle.key != key) continue;
    if (same++ == 0) oldest = cid;
  }
  if (same >= per_endpoint_) {  // the bound: the oldest connection goes
    idle_.erase(oldest);
    out_.push(request::Close{oldest});
  }
  idle_.emplace(id, Idle{key, x.to, now + limit});
}

std::optional<Instant> Exchanges::idle_deadline() const {
  std::optional<Instant> best;
  for (const auto& [id, idle] : idle_)
    if (!best || idle.until < *best) best = idle.until;
  return best;
}

void Exchanges::expire_idle(Instant now) {
  for (auto it = idle_.begin(); it != idle_.end();) {
    if (now >= it->second.until) {
      out_.push(request::Close{it->first});
      it = idle_.erase(it);
    } else {
      ++it;
    }
  }
}

void Exchanges::close_idle(std::optional<Instant> now) {
  for (const auto& [id, idle] : idle_) {
    request::Close close{id};
    if (now && idle.until > *now) close.reusable_for = idle.until - *now;
    out_.push(close);
  }
  idle_.clear();
}

bool Exchanges::forget_idle(ConnId id) {
  return idle_.erase(id) != 0;
}

bool Exchanges::retry_stale(ConnId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return false;
  Exchange& old = it->second;
  if (!old.reused || old.answered || old.repeat.empty()) return false;
  Exchange x = std::move(old);
  conns_.erase(it);
  out_.push(request::Close{id});
  x.reused = false;
  x.wire = std::move(x.repeat);
  x.repeat.clear();
  x.parser = std::make_unique<http::ResponseParser>();
  if (x.what.starts_with("HEAD ")) x.parser->expect_no_body();
  const ConnId fresh = next_++;
  const Endpoint to = x.to;
  conns_.emplace(fresh, std::move(x));
  ++opened_;
  out_.push(request::Open{fresh, to, false});  // a new one: the reused one was stale
  return true;
}

}  // namespace sandboxio::backend
