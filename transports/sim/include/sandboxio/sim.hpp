// The simulated link: drives a machine in virtual time with in-memory peers. Deterministic for
// a given seed: time jumps straight to the next deadline, and short reads, delays and dropped
// connections are drawn from the seed. A bounded drive loop reports livelock instead of hanging.
//
//   sandboxio::sim::Config cfg{.seed = 7, .max_read = 3};
//   auto sb = sandboxio::sync::Sandbox::create("fake://", {}, sandboxio::sim::make_link(cfg));
//   sb.run({"sleep", "3600"});   // returns at once: an hour of virtual time
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "sandboxio/link.hpp"

namespace sandboxio::sim {

/// The far side of a simulated connection (a fake Docker daemon, an E2B server...).
class Peer {
 public:
  virtual ~Peer() = default;
  /// Bytes the machine sent. Append the reply to `reply`; set `close` to end the connection
  /// after the reply.
  virtual void on_bytes(std::string_view data, std::string& reply, bool& close) = 0;
  /// The machine half-closed its side.
  virtual void on_half_close(std::string& /*reply*/, bool& /*close*/) {}
  /// When the peer next speaks by itself (a process's output or exit, a timer), if ever; the
  /// link calls on_wake() then, in virtual time.
  [[nodiscard]] virtual std::optional<Instant> wake() const { return std::nullopt; }
  virtual void on_wake(std::string& /*reply*/, bool& /*close*/) {}

  /// The link's virtual time, set before each call above.
  [[nodiscard]] Instant now() const noexcept { return now_; }
  void set_now(Instant now) noexcept { now_ = now; }

 private:
  Instant now_{};
};

/// Makes the peer for a connection, or nullptr to refuse it (connection failed).
using PeerFactory = std::function<std::unique_ptr<Peer>(const Endpoint&)>;

struct Config {
  std::uint64_t seed = 1;
  /// Largest piece of bytes handed to the machine at once; 0 means whole replies.
  std::size_t max_read = 0;
  /// Largest delay before a connection opens or a reply arrives; each draw is seeded.
  std::chrono::nanoseconds max_delay{0};
  /// Chance (0..1) that a connection is dropped in the middle of a reply.
  double drop_probability = 0.0;
  /// Bound on wait() calls; past it the link reports livelock (SBX_E1800).
  std::size_t max_steps = 1'000'000;
  /// Wall-clock time of virtual instant 0, for records.
  std::chrono::system_clock::time_point wall_epoch{std::chrono::seconds(1'780'000'000)};
  PeerFactory peers{};
};

[[nodiscard]] std::unique_ptr<Link> make_link(Config config = {});

}  // namespace sandboxio::sim
