// The egress proxy's listening end: a loopback socket inside the sandbox whose connections
// become tunnels to the host (see agent.hpp and the tunnel section of sandboxio/codec/agent.hpp).
// The agent relays bytes and never looks at them: the host parses the request, checks the
// allow list, resolves the name and connects. So a program here can reach the network only
// through the host's decision, and nothing it sends is parsed by the agent, which stays root.
//
//   EgressListen -> bind 127.0.0.1:PORT -> Done(port) | Failure(errno)
//   a connection -> TunnelOpen on a new agent channel -> TunnelData/TunnelEnd both ways, each
//   side under the other's Credit -> both ended, or TunnelClose from either side
#include <fcntl.h>
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
  proxy_handover_ = request.handover;
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
  Tunnel& t = it->second;
  for (int fd : {t.fd, t.upstream, t.down.read, t.down.write, t.up.read, t.up.write})
    if (fd >= 0) ::close(fd);
  tunnels_.erase(it);
  if (tell) send(Type::TunnelClose, key);
}

namespace {

bool open_pipe(SplicePipe& p) {
  int ends[2];
  if (::pipe2(ends, O_NONBLOCK | O_CLOEXEC) != 0) return false;
  p.read = ends[0];
  p.write = ends[1];
  // As wide as output pipes: large splices, few wake-ups. Past the kernel's per-user pipe
  // allowance (64 MiB by default) it refuses, and the pipe keeps its 64 KiB.
  widen_pipe(p.write);
  const int size = ::fcntl(p.write, F_GETPIPE_SZ);
  p.capacity = size > 0 ? static_cast<std::size_t>(size) : 65536;
  return true;
}

enum class Moved { Some, None, Ended, Failed };

/// One splice(2), nonblocking: `from` -> `to`, at most `most` bytes.
Moved splice_some(int from, int to, std::size_t most, std::size_t& moved) {
  for (;;) {
    const ssize_t n = ::splice(from, nullptr, to, nullptr, most, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
    if (n > 0) {
      moved = static_cast<std::size_t>(n);
      return Moved::Some;
    }
    if (n == 0) return Moved::Ended;
    if (errno == EINTR) continue;
    return errno == EAGAIN ? Moved::None : Moved::Failed;
  }
}

/// One direction of a handed-over tunnel: `from` into its pipe, the pipe into `to`, until
/// neither moves. False with `why` on an error; `ended` once `from` reached its end.
struct Direction {
  const char* from;  // who is read, who is written: for the reason of a failure
  const char* to;
};

bool pump_direction(int from, int to, SplicePipe& p, bool& ended, std::uint64_t& relayed,
                    Direction names, std::string& why) {
  for (int round = 0; round < 16; ++round) {  // then the other tunnels' turn
    bool moved = false;
    std::size_t n = 0;
    if (!ended && p.held < p.capacity) {
      switch (splice_some(from, p.write, p.capacity - p.held, n)) {
        case Moved::Some:
          p.held += n;
          moved = true;
          break;
        case Moved::Ended:
          ended = true;
          break;
        case Moved::Failed:
          why = std::string("reading from ") + names.from + ": " + std::strerror(errno);
          return false;
        case Moved::None:
          break;
      }
    }
    if (p.held > 0) {
      switch (splice_some(p.read, to, p.held, n)) {
        case Moved::Some:
          p.held -= n;
          relayed += n;
          moved = true;
          break;
        case Moved::Failed:
        case Moved::Ended:
          why = std::string("writing to ") + names.to + ": " + std::strerror(errno);
          return false;
        case Moved::None:
          break;
      }
    }
    if (!moved) break;
  }
  return true;
}

}  // namespace

void Agent::take_over(Key key, Tunnel& t, std::string_view payload) {
  // Each TunnelSocket came with one descriptor, the next one in order.
  int fd = -1;
  if (auto session = sessions_.find(session_of(key));
      session != sessions_.end() && !session->second.passed.empty()) {
    fd = session->second.passed.front();
    session->second.passed.pop_front();
  }
  auto socket = agent::TunnelSocket::decode(payload);
  if (fd < 0 || !socket || !proxy_handover_ || t.upstream >= 0) {
    if (fd >= 0) ::close(fd);
    return drop_tunnel(key, true);  // a host that does not keep the protocol
  }
  t.upstream = fd;
  const std::uint64_t used = socket.value().used;
  const std::uint64_t sent = t.replay_base + t.replay.size();
  if (used < t.replay_base || used > sent || !open_pipe(t.down) || !open_pipe(t.up))
    return drop_tunnel(key, true);
  (void)::fcntl(t.upstream, F_SETFL, ::fcntl(t.upstream, F_GETFL) | O_NONBLOCK);
  // The head first, then what the program sent that the host had not taken: in order.
  t.to_upstream = std::move(socket.value().head);
  const std::string_view tail = std::string_view(t.replay).substr(used - t.replay_base);
  t.to_upstream.append(tail);
  t.relayed_up += tail.size();
  t.replay.clear();
  t.replay.shrink_to_fit();
}

bool Agent::relay(Key key, Tunnel& t) {
  std::string why;
  // To the program: what the host sent first (CONNECT's answer), then the upstream's bytes.
  while (t.waiting() > 0) {
    const ssize_t n = ::send(t.fd, t.to_client.data() + t.sent, t.waiting(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR)
        why = std::string("writing to the program's connection: ") + std::strerror(errno);
      break;
    }
    t.sent += static_cast<std::size_t>(n);
  }
  if (why.empty() && t.waiting() == 0 && !t.write_shut) {
    t.to_client.clear();
    t.sent = 0;
    if (pump_direction(t.upstream, t.fd, t.down, t.upstream_ended, t.relayed_down,
                       {"the upstream", "the program's connection"}, why) &&
        t.upstream_ended && t.down.held == 0) {
      ::shutdown(t.fd, SHUT_WR);
      t.write_shut = true;
    }
  }
  // To the upstream: the head and the replay, then the program's bytes.
  while (why.empty() && !t.to_upstream.empty()) {
    const ssize_t n = ::send(t.upstream, t.to_upstream.data(), t.to_upstream.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR)
        why = std::string("writing to the upstream: ") + std::strerror(errno);
      break;
    }
    t.to_upstream.erase(0, static_cast<std::size_t>(n));
  }
  if (why.empty() && t.to_upstream.empty() && !t.upstream_shut) {
    if (pump_direction(t.fd, t.upstream, t.up, t.client_ended, t.relayed_up,
                       {"the program's connection", "the upstream"}, why) &&
        t.client_ended && t.up.held == 0) {
      ::shutdown(t.upstream, SHUT_WR);
      t.upstream_shut = true;
    }
  }
  if (why.empty() && !(t.write_shut && t.upstream_shut)) return true;
  agent::TunnelDone done{t.relayed_down, t.relayed_up, why};
  send(Type::TunnelDone, key, done.encode());
  drop_tunnel(key, false);
  return false;
}

bool Agent::tunnel_frame(Key key, Frame& f) {
  if ((channel_of(key) & agent::kAgentChannel) == 0) return false;
  auto it = tunnels_.find(key);
  // A frame for a tunnel that ended here meanwhile: the host learns of the end by our
  // TunnelClose; nothing to answer.
  if (it == tunnels_.end()) return true;
  Tunnel& t = it->second;
  if (f.type == Type::TunnelSocket) {
    take_over(key, t, f.payload);
    return true;
  }
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
      if (!c || t.upstream >= 0) return true;  // handed over: the host's credit is moot
      t.credit += c.value().bytes;
      // What the host took is its own now: no replay will need it.
      const std::size_t taken = std::min<std::size_t>(c.value().bytes, t.replay.size());
      t.replay.erase(0, taken);
      t.replay_base += c.value().bytes;
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
  std::vector<Key> relayed;
  for (auto& [key, t] : tunnels_) {
    if (t.upstream >= 0) {
      relayed.push_back(key);
      continue;
    }
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
        const std::string_view data(buf.data(), static_cast<std::size_t>(n));
        send(Type::TunnelData, key, data);
        t.credit -= static_cast<std::uint64_t>(n);
        // Kept until credited, when the host may hand the socket over: it says how much of
        // this it took, and the rest goes from here.
        if (proxy_handover_) t.replay.append(data);
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
  for (Key key : relayed)
    (void)relay(key, tunnels_.at(key));
}

void Agent::poll_tunnels(std::vector<pollfd>& fds) const {
  if (proxy_fd_ >= 0 && !ending_) fds.push_back({proxy_fd_, POLLIN, 0});
  for (const auto& [key, t] : tunnels_) {
    if (t.upstream >= 0) {  // handed over: each socket waits for what its direction needs
      short client = 0, upstream = 0;
      if (!t.client_ended && t.up.held < t.up.capacity) client |= POLLIN;
      if (t.waiting() > 0 || t.down.held > 0) client |= POLLOUT;
      if (!t.upstream_ended && t.down.held < t.down.capacity) upstream |= POLLIN;
      if (!t.to_upstream.empty() || t.up.held > 0) upstream |= POLLOUT;
      if (client != 0) fds.push_back({t.fd, client, 0});
      if (upstream != 0) fds.push_back({t.upstream, upstream, 0});
      continue;
    }
    short events = 0;
    if (!t.client_ended && t.credit > 0 && room(key)) events |= POLLIN;
    if (t.waiting() > 0) events |= POLLOUT;
    if (events != 0) fds.push_back({t.fd, events, 0});
  }
}

}  // namespace sandboxio::agent_main
