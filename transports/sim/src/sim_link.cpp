#include <map>
#include <random>

#include "sandboxio/sim.hpp"

namespace sandboxio::sim {
namespace {

class SimLink final : public Link {
 public:
  explicit SimLink(Config config) : config_(std::move(config)), rng_(config_.seed) {}

  Instant now() const override { return now_; }
  std::chrono::system_clock::time_point wall(Instant at) const override {
    return config_.wall_epoch +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(at.time_since_epoch());
  }

  void perform(Machine& machine, Request request) override {
    std::visit(
        [&](auto&& r) {
          using R = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<R, request::Open>) {
            Conn c;
            c.peer = config_.peers ? config_.peers(r.endpoint) : nullptr;
            if (!c.peer) {
              machine.handle_connect_failed(
                  r.conn,
                  Problem{errc::ConnectionFailed,
                          "the simulation has no peer at " + r.endpoint.address,
                          {}},
                  now_);
              return;
            }
            c.peer->set_now(now_);
            c.connect_at = now_ + delay();
            c.drop = draw_drop();
            conns_[r.conn] = std::move(c);
          } else if constexpr (std::is_same_v<R, request::Send>) {
            auto it = conns_.find(r.conn);
            if (it == conns_.end() || it->second.closed_by_peer) return;
            bool close = false;
            std::string reply;
            it->second.peer->set_now(now_);
            it->second.peer->on_bytes(r.data, reply, close);
            queue(it->second, std::move(reply), close);
          } else if constexpr (std::is_same_v<R, request::HalfClose>) {
            auto it = conns_.find(r.conn);
            if (it == conns_.end() || it->second.closed_by_peer) return;
            bool close = false;
            std::string reply;
            it->second.peer->set_now(now_);
            it->second.peer->on_half_close(reply, close);
            queue(it->second, std::move(reply), close);
          } else if constexpr (std::is_same_v<R, request::Close>) {
            conns_.erase(r.conn);
          } else if constexpr (std::is_same_v<R, request::ProbeOwners>) {
            machine.handle_owners_gone({}, now_);  // simulated owners never die
          }
        },
        std::move(request));
  }

  void wait(Machine& machine, std::optional<Instant> wake) override {
    if (++steps_ > config_.max_steps) {
      throw Error(errc::ProtocolError, "simulation livelock: more than " +
                                           std::to_string(config_.max_steps) +
                                           " steps without finishing");
    }
    // The earliest thing that can happen on a connection.
    ConnId best = 0;
    std::optional<Instant> at;
    bool peer_wakes = false;  // the earliest thing is a peer speaking by itself
    for (auto& [id, c] : conns_) {
      std::optional<Instant> t;
      if (!c.connected) {
        t = c.connect_at;
      } else if (!c.held.empty()) {
        t = std::nullopt;  // waiting for the machine to make room
      } else if (!c.pending.empty()) {
        t = c.pending_at;
      } else if (c.eof_pending) {
        t = c.pending_at;
      }
      if (t && (!at || *t < *at)) {
        at = t;
        best = id;
        peer_wakes = false;
      }
      if (!c.connected || c.closed_by_peer || c.eof_pending) continue;
      if (auto w = c.peer->wake(); w && (!at || *w < *at)) {
        at = std::max(*w, now_);
        best = id;
        peer_wakes = true;
      }
    }
    // Bytes the machine refused earlier are offered again first.
    for (auto& [id, c] : conns_) {
      if (c.held.empty()) continue;
      const std::size_t used = machine.handle_bytes(id, c.held, now_);
      c.held.erase(0, used);
      if (used > 0) return;
    }
    if (!at && !wake) {
      throw Error(errc::ProtocolError,
                  "simulation livelock: the " + std::string(machine.scheme()) +
                      ":// machine waits with no deadline and nothing in flight");
    }
    if (!at || (wake && *wake < *at)) {
      now_ = std::max(now_, *wake);
      return;
    }
    now_ = std::max(now_, *at);
    Conn& c = conns_.at(best);
    if (peer_wakes) {
      bool close = false;
      std::string reply;
      c.peer->set_now(now_);
      c.peer->on_wake(reply, close);
      queue(c, std::move(reply), close);
      return;
    }
    if (!c.connected) {
      c.connected = true;
      machine.handle_connected(best, now_);
      return;
    }
    if (!c.pending.empty()) {
      std::size_t n = c.pending.size();
      if (config_.max_read > 0) n = std::min(n, pick(1, config_.max_read));
      if (c.drop) {
        // The connection breaks in the middle of this reply: part of it arrives, then EOF.
        const std::string part = c.pending.substr(0, pick(0, c.pending.size() - 1));
        if (!part.empty()) (void)machine.handle_bytes(best, part, now_);
        conns_.erase(best);
        machine.handle_eof(best, now_);
        return;
      }
      std::string piece = c.pending.substr(0, n);
      c.pending.erase(0, n);
      c.pending_at = now_ + delay();
      const std::size_t used = machine.handle_bytes(best, piece, now_);
      if (used < piece.size()) c.held = piece.substr(used);
      return;
    }
    if (c.eof_pending) {
      c.eof_pending = false;
      c.closed_by_peer = true;
      machine.handle_eof(best, now_);
    }
  }

 private:
  struct Conn {
    std::unique_ptr<Peer> peer;
    Instant connect_at{};
    bool connected = false;
    std::string pending;  // reply bytes not yet delivered
    Instant pending_at{};
    std::string held;  // delivered but not consumed (backpressure)
    bool eof_pending = false;
    bool closed_by_peer = false;
    bool drop = false;  // the next reply is cut short and the connection dropped
  };

  void queue(Conn& c, std::string reply, bool close) {
    if (c.pending.empty()) c.pending_at = now_ + delay();
    c.pending += reply;
    if (close) c.eof_pending = true;
  }
  std::size_t pick(std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng_);
  }
  std::chrono::nanoseconds delay() {
    if (config_.max_delay.count() <= 0) return {};
    return std::chrono::nanoseconds(
        std::uniform_int_distribution<std::int64_t>(0, config_.max_delay.count())(rng_));
  }
  bool draw_drop() {
    if (config_.drop_probability <= 0) return false;
    return std::uniform_real_distribution<double>(0, 1)(rng_) < config_.drop_probability;
  }

  Config config_;
  std::mt19937_64 rng_;
  Instant now_{};
  std::size_t steps_ = 0;
  std::map<ConnId, Conn> conns_;
};

}  // namespace

std::unique_ptr<Link> make_link(Config config) {
  return std::make_unique<SimLink>(std::move(config));
}

}  // namespace sandboxio::sim
