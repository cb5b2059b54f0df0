// Link: how a driver reaches the world. It owns the clock, performs the machine's requests
// (connections, bytes) and waits until something happens. The sync API runs on a Link on the
// calling thread: the POSIX link uses poll(2) and the steady clock; the simulated link
// (sandboxio/sim.hpp) uses virtual time and in-memory peers.
//
//   auto sb = sandboxio::sync::Sandbox::create("fake://", {}, sandboxio::make_posix_link());
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "sandboxio/machine.hpp"

namespace sandboxio {

class Link {
 public:
  virtual ~Link() = default;
  /// The driver's monotonic time.
  [[nodiscard]] virtual Instant now() const = 0;
  /// The wall-clock time of a monotonic instant, for records.
  [[nodiscard]] virtual std::chrono::system_clock::time_point wall(Instant at) const = 0;
  /// What it can do beyond connections and bytes (the driver tells the machine).
  [[nodiscard]] virtual DriverFeatures features() const { return {}; }
  /// Performs one request of the machine (open, send, half-close, close). Results arrive
  /// later through the machine's handle_*() inputs, from wait().
  virtual void perform(Machine& machine, Request request) = 0;
  /// Blocks until I/O was fed to the machine or `wake` passed. Throws sandboxio::Error
  /// (ProtocolError) when nothing can ever happen: no connection to wait on and no wake time.
  virtual void wait(Machine& machine, std::optional<Instant> wake) = 0;
};

/// Real sockets (Unix and TCP) with poll(2) and std::chrono::steady_clock.
[[nodiscard]] std::unique_ptr<Link> make_posix_link();

}  // namespace sandboxio
