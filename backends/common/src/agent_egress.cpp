// Egress through the agent (see agent_machine.hpp): the proxy's listener asked for after the
// Welcome, and each tunnel the agent opens run through an EgressTunnel, with its upstream
// connection, both directions' credit, and its record.
//   tunnel: TunnelOpen -> TunnelData... (the head: parsed, checked) -> [Open upstream ->
//           connected] -> TunnelData both ways (Credit both ways) -> TunnelEnd both ways, or
//           TunnelClose from the agent -> Record(Egress)
#include <algorithm>

#include "sandboxio/backend/agent_machine.hpp"

namespace sandboxio::backend {

namespace {

/// What every client in the sandbox reads to find the proxy. curl reads only the lower-case
/// http_proxy; most other tools read either.
constexpr const char* kProxyVars[] = {"http_proxy", "https_proxy", "all_proxy",
                                      "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"};

}  // namespace

CreateOptions AgentMachine::egress_setup(CreateOptions options) {
  if (!options.network.needs_proxy()) return options;
  egress_policy_ = options.network;
  const std::string url = "http://127.0.0.1:" + std::to_string(agent::kProxyPort);
  for (const char* name : kProxyVars)
    if (options.env.find(name) == nullptr) options.env.set(name, url);
  // The sandbox's own loopback is its own: a server a command starts there is reached directly.
  for (const char* name : {"no_proxy", "NO_PROXY"})
    if (options.env.find(name) == nullptr) options.env.set(name, "localhost,127.0.0.1,::1");
  return options;
}

void AgentMachine::egress_listen(std::function<void(Instant)> then) {
  egress_listening_ = false;
  AgentCall call;
  call.kind = AgentCall::Kind::Egress;
  call.op = agent_create_;
  call.then = std::move(then);
  const std::uint32_t channel = agent_call(std::move(call));
  egress_via_ = agent_conn();
  egress_handover_ = driver_.pass_sockets && agent_conn_direct();
  agent::EgressListen listen;
  listen.handover = egress_handover_;
  agent_send(agent::Type::EgressListen, channel, listen.encode());
}

void AgentMachine::egress_listened(const agent::Frame& f, AgentCall& call, Instant now) {
  if (f.type == agent::Type::Done) {
    egress_listening_ = true;
  } else {
    // Nothing can leave then, which is the safe side; the caller is told.
    auto failure = agent::Failure::decode(f.payload);
    warn(Problem{errc::PolicyError,
                 "the egress proxy could not listen in the sandbox (" +
                     (failure ? failure.value().message : std::string("a malformed answer")) +
                     "): nothing can leave it, not even allowed hosts",
                 "Port " + std::to_string(agent::kProxyPort) +
                     " on the sandbox's loopback is taken by something the image starts."});
  }
  if (call.then) call.then(now);
}

void AgentMachine::egress_frame(agent::Frame& f, Instant now) {
  using agent::Type;
  const std::uint32_t channel = f.channel;
  if (f.type == Type::TunnelOpen) {
    if (!egress_listening_ || !egress_policy_ || tunnels_.size() >= agent::kMaxTunnels ||
        tunnels_.contains(channel)) {
      return agent_send(Type::TunnelClose, channel);
    }
    const auto mode =
        egress_policy_->learn ? EgressTunnel::Mode::Learn : EgressTunnel::Mode::Enforce;
    tunnels_.try_emplace(channel, HostTunnel{EgressTunnel(*egress_policy_, mode), now});
    return;
  }
  auto it = tunnels_.find(channel);
  if (it == tunnels_.end()) return;  // one that ended here: its last frames
  HostTunnel& t = it->second;
  if (t.handed_over) {
    // The agent relays it now. What it sent before it knew is replayed by it (past `used`),
    // so its TunnelData, Credit and TunnelEnd are spent; TunnelDone or TunnelClose ends it.
    if (f.type == Type::TunnelDone) {
      auto done = agent::TunnelDone::decode(f.payload);
      if (!done) return egress_finish(channel, now, "the agent's TunnelDone was malformed");
      t.tunnel.relayed_to_client(done.value().to_client);
      t.tunnel.relayed_to_upstream(done.value().to_upstream);
      return egress_finish(channel, now, done.value().reason);
    }
    if (f.type == Type::TunnelClose) return egress_finish(channel, now, "the agent dropped it");
    return;
  }
  switch (f.type) {
    case Type::TunnelData:
      // The agent sends no more than the credit it was given, which is at most a window
      // ahead of what the tunnel took: more is an agent that does not keep the protocol.
      if (t.held.size() + f.payload.size() > agent::kTunnelWindow) {
        agent_send(Type::TunnelClose, channel);
        return egress_finish(channel, now, "the agent sent past its credit");
      }
      t.held += f.payload;
      return egress_feed(channel, now);
    case Type::TunnelEnd:
      t.got_end = true;
      egress_feed(channel, now);
      if (!tunnels_.contains(channel) || !tunnels_.at(channel).held.empty()) return;
      tunnels_.at(channel).end_passed = true;
      return egress_apply(channel, tunnels_.at(channel).tunnel.client_closed(), now);
    case Type::TunnelClose:
      t.got_end = true;
      return egress_finish(channel, now, "the program's connection broke");
    case Type::Credit: {
      auto c = agent::Credit::decode(f.payload);
      if (c) t.agent_credit += c.value().bytes;
      return;
    }
    default:
      agent_send(Type::TunnelClose, channel);
      return egress_finish(channel, now, "the agent sent " + std::string(agent::to_string(f.type)));
  }
}

void AgentMachine::egress_feed(std::uint32_t channel, Instant now) {
  auto it = tunnels_.find(channel);
  if (it == tunnels_.end() || it->second.held.empty()) return;
  HostTunnel& t = it->second;
  Bytes held = std::move(t.held);
  t.held.clear();
  EgressTunnel::Step step = t.tunnel.from_client(held);
  const std::size_t used = step.used;
  t.used += used;
  if (used < held.size()) t.held = held.substr(used);
  // What the tunnel took is passed on or held within its bound: the agent may read more.
  if (used > 0)
    agent_send(agent::Type::Credit, channel,
               agent::Credit{static_cast<std::uint32_t>(used)}.encode());
  egress_apply(channel, std::move(step), now);
}

void AgentMachine::egress_apply(std::uint32_t channel, EgressTunnel::Step step, Instant now) {
  auto it = tunnels_.find(channel);
  if (it == tunnels_.end()) return;
  HostTunnel& t = it->second;
  for (std::size_t at = 0; at < step.to_client.size(); at += agent::kChunk) {
    const std::string_view piece = std::string_view(step.to_client).substr(at, agent::kChunk);
    agent_send(agent::Type::TunnelData, channel, piece);
    t.agent_credit -= std::min<std::uint64_t>(t.agent_credit, piece.size());
  }
  if (step.open) {
    t.conn = next_egress_++;
    egress_conns_[t.conn] = channel;
    Endpoint upstream;
    upstream.kind = Endpoint::Kind::Tcp;
    std::string host = step.open->host;
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    // A pinned name is connected to at its address; any other is resolved by the transport,
    // on this side: the sandbox never resolves a name.
    if (auto pin = egress_policy_->pinned.find(host); pin != egress_policy_->pinned.end())
      host = pin->second;
    upstream.address = std::move(host);
    upstream.port = step.open->port;
    out_.push(request::Open{t.conn, std::move(upstream)});
    t.connect_by = now + std::chrono::duration_cast<Instant::duration>(kEgressConnectTimeout);
  }
  if (!step.to_upstream.empty() && t.conn != 0 && t.connected)
    out_.push(request::Send{t.conn, std::move(step.to_upstream)});
  if (step.end_upstream && t.conn != 0) {
    if (t.connected) {
      out_.push(request::HalfClose{t.conn});
    } else {
      out_.push(request::Close{t.conn});
      egress_conns_.erase(t.conn);
      t.conn = 0;
    }
  }
  if (step.end_client && !t.sent_end) {
    agent_send(agent::Type::TunnelEnd, channel);
    t.sent_end = true;
  }
  if (t.sent_end && t.got_end) egress_finish(channel, now);
}

void AgentMachine::egress_finish(std::uint32_t channel, Instant now, const std::string& why) {
  auto it = tunnels_.find(channel);
  if (it == tunnels_.end()) return;
  HostTunnel& t = it->second;
  if (t.conn != 0) {
    out_.push(request::Close{t.conn});
    egress_conns_.erase(t.conn);
  }
  EgressAttempt attempt = t.tunnel.attempt();
  if (attempt.reason.empty() && !why.empty() && t.tunnel.phase() != EgressTunnel::Phase::Done)
    attempt.reason = why;
  OperationRecord record = new_record(Operation::Egress);
  std::optional<Problem> problem;
  Outcome outcome = Outcome::Ok;
  const std::string where = attempt.host + ":" + std::to_string(attempt.port);
  if (!attempt.allowed && !attempt.host.empty()) {
    outcome = Outcome::Failed;
    problem = Problem{errc::EgressDenied, attempt.reason, {}};
  } else if (!attempt.allowed) {
    outcome = Outcome::Failed;
    problem = Problem{errc::RemoteProtocolViolation,
                      attempt.reason.empty() ? "no request the proxy could read" : attempt.reason,
                      {}};
  } else if (!attempt.reason.empty()) {
    outcome = Outcome::Failed;
    problem = Problem{errc::ConnectionFailed, attempt.reason, {}};
  }
  record.bytes_in = attempt.bytes_in;  // the meter: into the sandbox, from the upstream
  record.bytes_out = attempt.bytes_out;
  record.egress = std::move(attempt);
  const Instant started = t.started;
  tunnels_.erase(it);
  emit_record(std::move(record), started, now, outcome, problem);
}

void AgentMachine::egress_lost(Instant now) {
  egress_listening_ = false;
  std::vector<std::uint32_t> open;
  for (const auto& [channel, t] : tunnels_)
    open.push_back(channel);
  for (std::uint32_t channel : open)
    egress_finish(channel, now, "the sandbox ended");
}

void AgentMachine::egress_connected(ConnId id, Instant now) {
  auto c = egress_conns_.find(id);
  if (c == egress_conns_.end()) return;
  const std::uint32_t channel = c->second;
  HostTunnel& t = tunnels_.at(channel);
  t.connected = true;
  t.connect_by.reset();
  if (egress_hand_over(channel)) return;
  egress_apply(channel, t.tunnel.upstream_connected(), now);
  egress_feed(channel, now);  // what waited beyond the bound
  auto it = tunnels_.find(channel);
  // The program's end came while its last bytes waited: it is passed on after them.
  if (it != tunnels_.end() && it->second.got_end && !it->second.end_passed &&
      it->second.held.empty() && it->second.tunnel.phase() == EgressTunnel::Phase::Open) {
    it->second.end_passed = true;
    egress_apply(channel, it->second.tunnel.client_closed(), now);
  }
}

bool AgentMachine::egress_hand_over(std::uint32_t channel) {
  HostTunnel& t = tunnels_.at(channel);
  // Only on the session that listens, and while the program's side is open (an ended one
  // is rare and short: the relay here finishes it).
  if (!egress_handover_ || agent_conn() != egress_via_ || egress_via_ == 0 || t.got_end)
    return false;
  EgressTunnel::Step step = t.tunnel.upstream_connected();  // Open: nothing ended yet
  // CONNECT's "200 Connection established" goes first, then the socket with the request's
  // head for the upstream. The client bytes held here are not lost: the agent still has
  // them and writes what follows the `used` ones.
  for (std::size_t at = 0; at < step.to_client.size(); at += agent::kChunk)
    agent_send(agent::Type::TunnelData, channel,
               std::string_view(step.to_client).substr(at, agent::kChunk));
  agent::TunnelSocket socket;
  socket.used = t.used;
  socket.head = std::move(step.to_upstream);
  out_.push(request::Pass{t.conn, egress_via_,
                          agent::frame(agent::Type::TunnelSocket, channel, socket.encode())});
  egress_conns_.erase(t.conn);
  t.conn = 0;  // the driver's no more
  t.held.clear();
  t.handed_over = true;
  t.tunnel.handed_over();
  return true;
}

void AgentMachine::egress_connect_failed(ConnId id, const Problem& problem, Instant now) {
  auto c = egress_conns_.find(id);
  if (c == egress_conns_.end()) return;
  const std::uint32_t channel = c->second;
  egress_conns_.erase(c);
  HostTunnel& t = tunnels_.at(channel);
  t.conn = 0;  // the link has closed it
  t.connected = false;
  t.connect_by.reset();
  egress_apply(channel, t.tunnel.upstream_failed(problem), now);
}

std::optional<Instant> AgentMachine::egress_deadline() const {
  std::optional<Instant> best;
  for (const auto& [channel, t] : tunnels_) {
    if (t.connect_by && (!best || *t.connect_by < *best)) best = t.connect_by;
  }
  return best;
}

void AgentMachine::egress_timeout(Instant now) {
  std::vector<ConnId> late;
  for (const auto& [channel, t] : tunnels_) {
    if (t.connect_by && now >= *t.connect_by && t.conn != 0) late.push_back(t.conn);
  }
  for (ConnId id : late) {
    out_.push(request::Close{id});  // the transport gives up on it
    auto c = egress_conns_.find(id);
    const auto& up = tunnels_.at(c->second).tunnel.attempt();
    egress_connect_failed(
        id,
        Problem{errc::ConnectionFailed,
                "no connection to " + up.host + ":" + std::to_string(up.port) + " within " +
                    std::to_string(kEgressConnectTimeout.count()) + " s",
                {}},
        now);
  }
}

std::size_t AgentMachine::egress_bytes(ConnId id, std::string_view data, Instant now) {
  auto c = egress_conns_.find(id);
  if (c == egress_conns_.end()) return data.size();
  const std::uint32_t channel = c->second;
  HostTunnel& t = tunnels_.at(channel);
  if (t.tunnel.phase() != EgressTunnel::Phase::Open) return data.size();
  const std::size_t take = std::min<std::uint64_t>(data.size(), t.agent_credit);
  if (take == 0) return 0;
  // Straight into frames: a download is copied once here, not through a Step first.
  (void)now;
  t.tunnel.relayed_to_client(take);
  t.agent_credit -= take;
  for (std::size_t at = 0; at < take; at += agent::kChunk)
    agent_send(agent::Type::TunnelData, channel,
               data.substr(at, std::min<std::size_t>(agent::kChunk, take - at)));
  return take;
}

void AgentMachine::egress_eof(ConnId id, Instant now) {
  auto c = egress_conns_.find(id);
  if (c == egress_conns_.end()) return;
  const std::uint32_t channel = c->second;
  egress_apply(channel, tunnels_.at(channel).tunnel.upstream_closed(), now);
}

}  // namespace sandboxio::backend
