// Bridge sessions: the PID-1 agent listens on a Unix socket that only root may reach, and
// `sandboxio-agent --bridge` (run by one `docker exec`) relays its stdin and stdout to it. That
// is how a sandbox that outlives its owner is re-attached: the new owner speaks the same
// protocol, over the exec's stream, to the agent that has been running all along.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "agent.hpp"

namespace sandboxio::agent_main {
namespace {

bool address_of(const std::string& path, sockaddr_un& addr, std::string& error) {
  addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    error = "socket path \"" + path + "\" is empty or too long";
    return false;
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return true;
}

}  // namespace

int listen_for_bridges(const std::string& path, std::string& error) {
  if (::geteuid() != 0) {
    // Commands run as the agent's own user: they could reach a socket that user owns.
    error = "the agent is not root, so no socket would keep the sandbox's user out";
    return -1;
  }
  sockaddr_un addr;
  if (!address_of(path, addr, error)) return -1;
  const std::string dir = path.substr(0, path.rfind('/'));
  if (!dir.empty() && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    error = "mkdir " + dir + ": " + std::strerror(errno);
    return -1;
  }
  // The directory keeps everyone but root out: it must be root's own, and not a link that
  // something in the image placed there.
  struct stat st {};
  if (!dir.empty()) {
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
        ::chmod(dir.c_str(), 0700) != 0) {
      error = dir + " is not a directory of root's";
      return -1;
    }
  }
  ::unlink(path.c_str());  // a socket left by an earlier agent
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::chmod(path.c_str(), 0600) != 0 || ::listen(fd, 8) != 0) {
    error = "bind " + path + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

int run_bridge(const std::string& path) {
  ::signal(SIGPIPE, SIG_IGN);  // a side that went away is a write error, not our death
  sockaddr_un addr;
  std::string error;
  if (!address_of(path, addr, error)) {
    std::fprintf(stderr, "sandboxio-agent --bridge: %s\n", error.c_str());
    return 2;
  }
  const int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0 || ::connect(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    std::fprintf(stderr, "sandboxio-agent --bridge: cannot reach the agent at %s: %s\n",
                 path.c_str(), std::strerror(errno));
    return 2;
  }
  // Two one-way relays, each through a bounded buffer: a side that does not read stops the
  // other side being read.
  constexpr std::size_t kBuffer = std::size_t{256} << 10;
  struct Relay {
    int from, to;
    std::string buf{};
    bool eof = false;
  };
  Relay up{0, sock}, down{sock, 1};
  std::vector<char> chunk(kBuffer);
  bool shut = false;
  for (;;) {
    if (up.eof && up.buf.empty() && !shut) {
      ::shutdown(sock, SHUT_WR);  // the host is done: the agent ends this session
      shut = true;
    }
    if (down.eof && down.buf.empty()) return 0;  // the agent ended the session
    pollfd fds[4] = {
        {!up.eof && up.buf.size() < kBuffer ? up.from : -1, POLLIN, 0},
        {!up.buf.empty() ? up.to : -1, POLLOUT, 0},
        {!down.eof && down.buf.size() < kBuffer ? down.from : -1, POLLIN, 0},
        {!down.buf.empty() ? down.to : -1, POLLOUT, 0},
    };
    if (::poll(fds, 4, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    int i = 0;
    for (Relay* r : {&up, &down}) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t n = ::read(r->from, chunk.data(), kBuffer - r->buf.size());
        if (n > 0) {
          r->buf.append(chunk.data(), static_cast<std::size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          r->eof = true;
        }
      }
      if (fds[i + 1].revents & (POLLOUT | POLLERR | POLLHUP)) {
        const ssize_t n = ::write(r->to, r->buf.data(), r->buf.size());
        if (n > 0) {
          r->buf.erase(0, static_cast<std::size_t>(n));
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          return r == &down ? 0 : 1;  // the host went away, or the agent did
        }
      }
      i += 2;
    }
  }
}

}  // namespace sandboxio::agent_main
