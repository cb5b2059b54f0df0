// One connection a program in a sandbox made to its egress proxy, as the host side sees it.
// Sans-I/O: the machine that carries the connection (over the agent's channel) feeds it the
// client's bytes and the upstream's, and carries out each Step it returns: bytes to either
// side, an upstream connection to open (the host resolves the name, after the check, so the
// sandbox never resolves anything itself), sides to close. The policy is checked once, on
// the request's head; a denied or malformed request gets a 4xx the client can show.
//
//   backend::EgressTunnel t(policy, backend::EgressTunnel::Mode::Enforce);
//   auto step = t.from_client(bytes);      // step.used bytes taken; step.open: connect now
//   step = t.upstream_connected();         // CONNECT: "200 Connection established"
//   step = t.from_upstream(reply_bytes);   // step.to_client
//   t.attempt();                           // host, port, allowed, bytes each way: for records
//
// What an attempt records never holds a path, a query or a header: only the host, the port,
// the method, the decision and its reason, and byte counts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sandboxio/codec/proxy.hpp"
#include "sandboxio/network_policy.hpp"
#include "sandboxio/record.hpp"

namespace sandboxio::backend {

/// What one connection did, for its record (sandboxio/record.hpp).
using sandboxio::EgressAttempt;

class EgressTunnel {
 public:
  enum class Mode {
    Enforce,  // the allow list decides
    Learn,    // everything is refused, and recorded: what the run tried to reach
  };
  enum class Phase { Head, Connecting, Open, Done };

  struct Step {
    std::size_t used = 0;       // bytes taken of what was fed; offer the rest again later
    std::string to_client{};    // for the sandbox's client
    std::string to_upstream{};  // for the upstream connection
    struct Open {
      std::string host;
      std::uint16_t port = 0;
    };
    std::optional<Open> open{};  // open the upstream connection now
    bool end_client = false;     // no more bytes for the client: close its side
    bool end_upstream = false;   // no more bytes for the upstream: half-close its side
  };

  /// Bytes held for an upstream that is still connecting (a request body, an early TLS
  /// ClientHello); past this, from_client() takes no more until the connection is up.
  static constexpr std::size_t kMaxPending = 64 * 1024;

  EgressTunnel(NetworkPolicy policy, Mode mode, proxy::Limits limits = {});

  Step from_client(std::string_view data);
  Step client_closed();
  Step upstream_connected();
  Step upstream_failed(const Problem& problem);
  Step from_upstream(std::string_view data);
  /// While Open: `n` upstream bytes went to the client without passing through a Step (the
  /// machine's zero-copy path for a relayed download); they are counted.
  void relayed_to_client(std::uint64_t n) { attempt_.bytes_in += n; }
  /// Handed over: the agent wrote `n` more of the client's bytes to the upstream itself.
  void relayed_to_upstream(std::uint64_t n) { attempt_.bytes_out += n; }
  /// The agent relays the rest on the upstream socket connected here (agent::TunnelSocket).
  void handed_over() { attempt_.handed_over = true; }
  Step upstream_closed();

  [[nodiscard]] Phase phase() const noexcept { return phase_; }
  [[nodiscard]] const EgressAttempt& attempt() const& noexcept { return attempt_; }

 private:
  void refuse(Step& step, int status, std::string reason);

  NetworkPolicy policy_;
  Mode mode_;
  proxy::HeadParser parser_;
  Phase phase_ = Phase::Head;
  std::string pending_{};        // client bytes for an upstream not yet connected
  std::string upstream_head_{};  // a forwarded request's head, sent once connected
  bool connect_ = false;
  bool client_ended_ = false;
  EgressAttempt attempt_{};
};

}  // namespace sandboxio::backend
