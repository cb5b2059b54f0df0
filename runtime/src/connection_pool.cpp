// The process's pool of idle connections.
#include "sandboxio/connection_pool.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>

namespace sandboxio {

ConnectionPool& ConnectionPool::process() {
  static auto* pool = new ConnectionPool;  // never destroyed: sessions may end during exit
  return *pool;
}

void ConnectionPool::park(Parked p) {
  std::lock_guard lock(mu_);
  expire(std::chrono::steady_clock::now());
  std::size_t same = 0;
  for (const Parked& q : parked_)
    same += q.endpoint == p.endpoint ? 1 : 0;
  if (same >= kPerEndpoint) {
    auto oldest = std::find_if(parked_.begin(), parked_.end(),
                               [&](const Parked& q) { return q.endpoint == p.endpoint; });
    ::close(oldest->fd);
    parked_.erase(oldest);
  }
  if (parked_.size() >= kTotal) {
    ::close(parked_.front().fd);
    parked_.pop_front();
  }
  parked_.push_back(std::move(p));
}

std::optional<ConnectionPool::Parked> ConnectionPool::take(const Endpoint& endpoint) {
  std::lock_guard lock(mu_);
  expire(std::chrono::steady_clock::now());
  for (auto it = parked_.end(); it != parked_.begin();) {
    --it;
    if (!(it->endpoint == endpoint)) continue;
    Parked p = std::move(*it);
    it = parked_.erase(it);
    pollfd probe{p.fd, POLLIN, 0};
    if (::poll(&probe, 1, 0) != 0) {
      ::close(p.fd);
      continue;
    }
    return p;
  }
  return std::nullopt;
}

void ConnectionPool::expire(std::chrono::steady_clock::time_point now) {
  std::erase_if(parked_, [&](const Parked& p) {
    if (now < p.until) return false;
    ::close(p.fd);
    return true;
  });
}

}  // namespace sandboxio
