// One egress proxy connection on the host side (backend/egress.hpp). Phases:
//   Head:       the client's request head is parsed; a malformed one gets its 4xx, a denied
//               one a 403, and the tunnel is Done. An allowed one asks for the upstream.
//   Connecting: the client's further bytes wait (up to kMaxPending) for the upstream.
//   Open:       bytes are relayed both ways and counted; each side's end is passed on.
//   Done:       nothing more is taken.
#include "sandboxio/backend/egress.hpp"

namespace sandboxio::backend {

EgressTunnel::EgressTunnel(NetworkPolicy policy, Mode mode, proxy::Limits limits)
    : policy_(std::move(policy)), mode_(mode), parser_(limits) {}

void EgressTunnel::refuse(Step& step, int status, std::string reason) {
  step.to_client += proxy::refusal(status, "sandboxio egress: " + reason);
  step.end_client = true;
  step.end_upstream = phase_ == Phase::Open || phase_ == Phase::Connecting;
  attempt_.reason = std::move(reason);
  phase_ = Phase::Done;
}

EgressTunnel::Step EgressTunnel::from_client(std::string_view data) {
  Step step;
  switch (phase_) {
    case Phase::Head: {
      step.used = parser_.feed(data);
      if (parser_.error()) {
        std::string why = parser_.error()->detail;
        if (why.rfind("egress proxy: ", 0) == 0) why.erase(0, 14);
        refuse(step, parser_.error_status(), std::move(why));
        step.used = data.size();  // the rest of a refused request is dropped
        return step;
      }
      if (!parser_.done()) return step;
      const proxy::Target& t = parser_.target();
      attempt_.host = t.host;
      attempt_.port = t.port;
      attempt_.method = t.method;
      const std::string where = t.host + ":" + std::to_string(t.port);
      if (mode_ == Mode::Learn) {
        refuse(step, 403, where + " was recorded and refused (learning mode: nothing leaves)");
        step.used = data.size();
        return step;
      }
      if (!policy_.allows(t.host, t.port)) {
        refuse(step, 403,
               where + " is not in this sandbox's allow list" +
                   (proxy::is_ip_literal(t.host) ? " (an address must be listed itself)" : ""));
        step.used = data.size();
        return step;
      }
      attempt_.allowed = true;
      connect_ = t.kind == proxy::Target::Kind::Connect;
      upstream_head_ = t.upstream_head;
      phase_ = Phase::Connecting;
      step.open = Step::Open{t.host, t.port};
      // What came after the head waits for the connection, like anything more.
      const std::string_view rest = data.substr(step.used);
      const std::size_t take = std::min(rest.size(), kMaxPending);
      pending_.append(rest.substr(0, take));
      step.used += take;
      return step;
    }
    case Phase::Connecting: {
      const std::size_t take = std::min(data.size(), kMaxPending - pending_.size());
      pending_.append(data.substr(0, take));
      step.used = take;
      return step;
    }
    case Phase::Open:
      step.to_upstream.assign(data);
      attempt_.bytes_out += data.size();
      step.used = data.size();
      return step;
    case Phase::Done:
      step.used = data.size();
      return step;
  }
  return step;
}

EgressTunnel::Step EgressTunnel::client_closed() {
  Step step;
  client_ended_ = true;
  if (phase_ == Phase::Head) {
    // It left before it said where to: nothing to record but that.
    attempt_.reason = "the client closed before its request head was complete";
    phase_ = Phase::Done;
    step.end_client = true;
  } else if (phase_ == Phase::Open) {
    step.end_upstream = true;
  }
  return step;  // Connecting: the end is passed on once the pending bytes have gone
}

EgressTunnel::Step EgressTunnel::upstream_connected() {
  Step step;
  if (phase_ != Phase::Connecting) return step;
  phase_ = Phase::Open;
  if (connect_) {
    step.to_client.assign(proxy::connect_established());
  } else {
    step.to_upstream = std::move(upstream_head_);
  }
  step.to_upstream += pending_;
  attempt_.bytes_out += pending_.size();
  pending_.clear();
  pending_.shrink_to_fit();
  step.end_upstream = client_ended_;
  return step;
}

EgressTunnel::Step EgressTunnel::upstream_failed(const Problem& problem) {
  Step step;
  if (phase_ != Phase::Connecting && phase_ != Phase::Open) return step;
  const std::string where = attempt_.host + ":" + std::to_string(attempt_.port);
  if (phase_ == Phase::Connecting) {
    refuse(step, 502, "cannot reach " + where + ": " + problem.detail);
  } else {
    attempt_.reason = "the connection to " + where + " failed: " + problem.detail;
    step.end_client = true;
    phase_ = Phase::Done;
  }
  return step;
}

EgressTunnel::Step EgressTunnel::from_upstream(std::string_view data) {
  Step step;
  step.used = data.size();
  if (phase_ != Phase::Open) return step;
  step.to_client.assign(data);
  attempt_.bytes_in += data.size();
  return step;
}

EgressTunnel::Step EgressTunnel::upstream_closed() {
  Step step;
  if (phase_ == Phase::Connecting) {
    refuse(step, 502,
           attempt_.host + ":" + std::to_string(attempt_.port) + " closed the connection at once");
    return step;
  }
  if (phase_ == Phase::Open) {
    step.end_client = true;
    phase_ = Phase::Done;
  }
  return step;
}

}  // namespace sandboxio::backend
