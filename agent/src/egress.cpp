// The egress proxy's listening end: a loopback socket inside the sandbox whose connections
// become tunnels to the host (see agent.hpp and the tunnel section of sandboxio/codec/agent.hpp).
// The agent relays bytes and never looks at them: the host parses the request, checks the
// allow list, resolves the name and connects. So a program here can reach the network only
// through the host's decision, and nothing it sends is parsed by the agent, which stays root.
//
//   EgressListen -> bind 127.0.0.1:PORT -> Done(port) | Failure(errno)
//   a connection -> TunnelOpen on a new agent channel -> TunnelData/TunnelEnd both ways, each
//   side under the other's Credit -> both ended, or TunnelClose from either side
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "agent.hpp"

namespace sandboxio::agent_main {

void Agent::egress_listen(Key channel, const agent::EgressListen& request) {
  const std::uint32_t session = session_of(channel);
  close_proxy();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const int error = errno;
    return fail(channel, error, std::string("egress proxy: socket: ") + std::strerror(error));
  }
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(request.port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd, 64) != 0) {
    const int error = errno;
    ::close(fd);
    return fail(
        channel, error,
        "egress proxy: 127.0.0.1:" + std::to_string(request.port) + ": " + std::strerror(error));
  }
  proxy_fd_ = fd;
  proxy_session_ = session;
  send(Type::Done, channel, agent::Done{request.port}.encode());
}

void Agent::close_proxy() {
  if (proxy_fd_ >= 0) ::close(proxy_fd_);
  proxy_fd_ = -1;
  std::vector<Key> open;
  for (const auto& [key, t] : tunnels_)
    if (session_of(key) == proxy_session_) open.push_back(key);
  for (Key key : open)
    drop_tunnel(key, true);
}

void Agent::accept_tunnels() {
  if (proxy_fd_ < 0) return;
  for (;;) {
    const int fd = ::accept4(proxy_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    // Past the bound, or with nobody left to carry it, a connection is closed at once: the
    // program sees a reset, never a proxy that hangs.
    if (tunnels_.size() >= agent::kMaxTunnels || !sessions_.contains(proxy_session_)) {
      ::close(fd);
      continue;
    }
    std::uint32_t channel = 0;
    do {
      next_tunnel_ = (next_tunnel_ + 1) & ~agent::kAgentChannel;
      channel = agent::kAgentChannel | next_tunnel_;
    } while (tunnels_.contains(key_of(proxy_session_, channel)));
    const Key key = key_of(proxy_session_, channel);
    Tunnel& t = tunnels_[key];
    t.fd = fd;
    send(Type::TunnelOpen, key);
  }
}

void Agent::drop_tunnel(Key key, bool tell) {
  auto it = tunnels_.find(key);
  if (it == tunnels_.end()) return;
  if (it->second.fd >= 0) ::close(it->second.fd);
  tunnels_.erase(it);
  if (tell) send(Type::TunnelClose, key);
}

bool Agent::tunnel_frame(Key key, Frame& f) {
  if ((channel_of(key) & agent::kAgentChannel) == 0) return false;
  auto it = tunnels_.find(key);
  // A frame for a tunnel that ended here meanwhile: the host learns of the end by our
  // TunnelClose; nothing to answer.
  if (it == tunnels_.end()) return true;
  Tunnel& t = it->second;
  switch (f.type) {
    case Type::TunnelData:
      // Credit is given back only for bytes written, so a host that keeps the protocol never
      // has more than the window waiting here: past it, the tunnel ends (memory stays bounded).
      if (t.host_ended || t.waiting() + f.payload.size() > agent::kTunnelWindow) {
        drop_tunnel(key, true);
        return true;
      }
      if (t.waiting() == 0) {
        t.to_client = std::move(f.payload);  // the usual case: no copy
        t.sent = 0;
      } else {
        t.to_client += f.payload;
      }
      return true;
    case Type::TunnelEnd:
      t.host_ended = true;
      return true;
    case Type::TunnelClose:
      drop_tunnel(key, false);
      return true;
    case Type::Credit: {
      auto c = agent::Credit::decode(f.payload);
      if (c) t.credit += c.value().bytes;
      return true;
    }
    default:
      drop_tunnel(key, true);
      return true;
  }
}

void Agent::pump_tunnels() {
  const std::span<char> buf = io_buffer();
  std::vector<Key> finished;
  for (auto& [key, t] : tunnels_) {
    // To the program: what the host sent, then the host's end as ours.
    while (t.waiting() > 0) {
      const ssize_t n = ::send(t.fd, t.to_client.data() + t.sent, t.waiting(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) break;
        t.broken = true;
        break;
      }
      t.sent += static_cast<std::size_t>(n);
      t.unacked += static_cast<std::uint64_t>(n);
    }
    if (t.broken) {
      finished.push_back(key);
      continue;
    }
    if (t.waiting() == 0) {
      t.to_client.clear();
      t.sent = 0;
    }
    if (t.unacked >= agent::kTunnelWindow / 4 || (t.unacked > 0 && t.waiting() == 0)) {
      send(Type::Credit, key, agent::Credit{static_cast<std::uint32_t>(t.unacked)}.encode());
      t.unacked = 0;
    }
    if (t.host_ended && t.waiting() == 0 && !t.write_shut) {
      ::shutdown(t.fd, SHUT_WR);
      t.write_shut = true;
    }
    // From the program: as much as the host's credit allows, while its session has room.
    while (!t.client_ended && t.credit > 0 && room(key)) {
      const std::size_t want = std::min<std::uint64_t>(buf.size(), t.credit);
      const ssize_t n = ::recv(t.fd, buf.data(), want, 0);
      if (n > 0) {
        send(Type::TunnelData, key, std::string_view(buf.data(), static_cast<std::size_t>(n)));
        t.credit -= static_cast<std::uint64_t>(n);
      } else if (n == 0) {
        t.client_ended = true;
        send(Type::TunnelEnd, key);
      } else {
        if (errno != EAGAIN && errno != EINTR) t.broken = true;
        break;
      }
    }
    if (t.broken || (t.client_ended && t.write_shut)) finished.push_back(key);
  }
  for (Key key : finished) {
    const bool broken = tunnels_.at(key).broken;
    // Both sides ended: each knows, nothing to say. A broken connection: the host is told.
    drop_tunnel(key, broken);
  }
}

void Agent::poll_tunnels(std::vector<pollfd>& fds) const {
  if (proxy_fd_ >= 0 && !ending_) fds.push_back({proxy_fd_, POLLIN, 0});
  for (const auto& [key, t] : tunnels_) {
    short events = 0;
    if (!t.client_ended && t.credit > 0 && room(key)) events |= POLLIN;
    if (t.waiting() > 0) events |= POLLOUT;
    if (events != 0) fds.push_back({t.fd, events, 0});
  }
}

}  // namespace sandboxio::agent_main
