// ConnectionPool: connections that machines left idle between HTTP exchanges
// (request::Close::reusable_for), kept by the process for the next machine that opens one to
// the same endpoint (request::Open::may_reuse), as undici's process-wide pools do for the
// official SDKs. One pool serves every transport of the process (the blocking one and Asio),
// so a sync sandbox and an async one share connections too.
//
//   ConnectionPool::process().park({fd, std::move(tls), endpoint, until});
//   if (auto kept = ConnectionPool::process().take(endpoint)) adopt(kept->fd,
//   std::move(kept->tls));
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "sandboxio/machine.hpp"
#include "sandboxio/tls.hpp"

namespace sandboxio {

class ConnectionPool {
 public:
  struct Parked {
    int fd = -1;                        // the socket, owned by the pool while parked
    std::unique_ptr<TlsChannel> tls{};  // its TLS session, for a tls endpoint
    Endpoint endpoint{};
    std::chrono::steady_clock::time_point until{};  // when its peer may close it
  };

  /// The process's pool: at most 8 connections per endpoint and 64 in all, the oldest going
  /// first; each kept no longer than its machine said its peer keeps it open.
  static ConnectionPool& process();

  void park(Parked p);
  /// The newest live connection to `endpoint`; one its peer closed (or sent anything to) while
  /// it waited is closed instead.
  [[nodiscard]] std::optional<Parked> take(const Endpoint& endpoint);

 private:
  static constexpr std::size_t kPerEndpoint = 8;
  static constexpr std::size_t kTotal = 64;
  void expire(std::chrono::steady_clock::time_point now);
  std::mutex mu_;
  std::deque<Parked> parked_;  // oldest first
};

}  // namespace sandboxio
