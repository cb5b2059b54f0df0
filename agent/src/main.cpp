// sandboxio-agent: arguments, the duties of an init, and the poll loop (see agent.hpp).
//
//   sandboxio-agent [--lifetime SECONDS] [--user USER[:GROUP]] [--outlive] [--socket PATH]
//                   [--seccomp] [--quiet]
//   sandboxio-agent --bridge [--socket PATH]
//
// stdin and stdout carry the agent protocol (the owner's session); bridge sessions come on the
// socket (bridge.cpp). stderr is for the agent's own last words; with --quiet (local://, where
// stderr is the session's own socket) they end once the protocol starts, and no bridge
// socket is made even as PID 1.
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "agent.hpp"

namespace sandboxio::agent_main {
namespace {

constexpr int kSignals[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE};

std::string python_path() {
  for (const char* dir : {"/usr/local/bin", "/usr/bin", "/bin"}) {
    const std::string p = std::string(dir) + "/python3";
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

}  // namespace

Agent::Agent(Options options) : options_(options), self_(::getpid()) {
  // Orphans of every command come to us (we are PID 1 in a container, and a subreaper
  // anywhere else), so that every descendant can be found and reaped.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  // Commands run as our uid; not being dumpable keeps them out of us anyway: no ptrace, no
  // /proc/<agent>/mem, fd (the protocol's pipes) or environ without CAP_SYS_PTRACE, which a
  // sandbox never has. Programs we exec are dumpable again (the kernel resets it on exec).
  ::prctl(PR_SET_DUMPABLE, 0);
  sigset_t set;
  sigemptyset(&set);
  for (int s : kSignals)
    sigaddset(&set, s);
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  signal_fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  ::fcntl(0, F_SETFL, ::fcntl(0, F_GETFL) | O_NONBLOCK);
  ::fcntl(1, F_SETFL, ::fcntl(1, F_GETFL) | O_NONBLOCK);
  ::fcntl(0, F_SETFD, FD_CLOEXEC);
  ::fcntl(1, F_SETFD, FD_CLOEXEC);
  widen_pipe(0);  // the container's stdin and stdout: the owner's frames come and go
  widen_pipe(1);  // in large pieces
  Session& owner = sessions_[0];
  owner.in_fd = 0;
  owner.out_fd = 1;
  struct stat st {};
  owner.socket = ::fstat(0, &st) == 0 && S_ISSOCK(st.st_mode);  // local://'s socket pair
}

std::span<char> io_buffer() {
  static std::vector<char> buffer(agent::kChunk);
  return buffer;
}

void widen_pipe(int fd) {
  (void)::fcntl(fd, F_SETPIPE_SZ, kPipeSize);
}

void Agent::send(Type type, Key channel, std::string_view payload) {
  auto it = sessions_.find(session_of(channel));
  if (it == sessions_.end()) return;
  agent::append_frame(it->second.outbox, type, channel_of(channel), payload);
}

void Agent::send_output(Key channel, agent::StreamId stream, std::string_view data) {
  auto it = sessions_.find(session_of(channel));
  if (it == sessions_.end()) return;
  agent::append_output(it->second.outbox, channel_of(channel), stream, data);
}

void Agent::log(const std::string& line) {
  for (auto& [id, session] : sessions_)
    agent::append_frame(session.outbox, Type::Log, 0, line);
}

bool Agent::drained() const {
  return std::all_of(sessions_.begin(), sessions_.end(),
                     [](const auto& kv) { return kv.second.queued() == 0; });
}

bool Agent::room(Key channel) const {
  auto it = sessions_.find(session_of(channel));
  return it == sessions_.end() || it->second.room();
}

void Agent::accept_bridge() {
  const int fd = ::accept4(options_.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return;
  // The socket's directory admits only root; the peer's credentials say so once more.
  ucred peer{};
  socklen_t len = sizeof peer;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || peer.uid != 0) {
    ::close(fd);
    return;
  }
  Session& s = sessions_[next_session_++];
  s.in_fd = s.out_fd = fd;
  s.socket = true;
}

ssize_t Agent::read_session(Session& s, std::span<char> buffer) {
  if (!s.socket) return ::read(s.in_fd, buffer.data(), buffer.size());
  iovec iov{buffer.data(), buffer.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(s.in_fd, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      // Each waits for its TunnelSocket; a host that sends more than tunnels can use them
      // (or sends some on a session that asked for none) loses them.
      if (s.passed.size() < agent::kMaxTunnels) {
        s.passed.push_back(fd);
      } else {
        ::close(fd);
      }
    }
  }
  return n;
}

namespace {
// Closes a session's descriptor. The owner's are 0 and 1: they stay taken (by /dev/null), or
// the next command's pipes would get them, and a pipe end already at its target number keeps
// its close-on-exec flag through dup2 and closes at exec.
void release_fd(int fd) {
  if (fd < 0) return;
  if (fd > 2) {
    ::close(fd);
    return;
  }
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0 || ::dup3(null_fd, fd, O_CLOEXEC) < 0) (void)::close(fd);
  if (null_fd >= 0 && null_fd != fd) ::close(null_fd);
}
}  // namespace

void Agent::end_session(std::uint32_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  release_fd(it->second.in_fd);
  if (it->second.out_fd != it->second.in_fd) release_fd(it->second.out_fd);
  for (int fd : it->second.passed)
    ::close(fd);
  sessions_.erase(it);
  if (id == 0) owner_gone_ = true;
  if (proxy_fd_ >= 0 && proxy_session_ == id) close_proxy();
  // Nobody is left to read what the session's commands print or to stop them: they end.
  for (auto& [key, p] : procs_)
    if (session_of(key) == id && !p.status) kill_tree(p, SIGKILL);
  for (auto& [key, t] : transfers_)
    if (session_of(key) == id) abandon(t);
  std::erase_if(transfers_, [id](const auto& kv) { return session_of(kv.first) == id; });
  std::vector<Key> contexts;
  for (const auto& [key, k] : kernels_)
    if (session_of(key) == id) contexts.push_back(key);
  for (Key key : contexts)
    context_end(key);
}

int Agent::poll_timeout(Clock::time_point now) const {
  Clock::time_point next = Clock::time_point::max();
  if (options_.lifetime) next = std::min(next, started_ + *options_.lifetime);
  if (ending_deadline_) next = std::min(next, *ending_deadline_);
  for (const auto& [channel, p] : procs_) {
    if (p.exited_at) next = std::min(next, *p.exited_at + kDrainGrace);
  }
  for (const auto& [id, s] : sessions_)
    if (!s.input_open && s.queued() == 0 && id != 0) next = now;  // a bridge to end
  // Ending, and the last process went while nothing was left to tell anyone (its session had
  // gone): nothing would wake the loop before the deadline, so it looks again now.
  if (ending_ && procs_.empty() && drained()) next = now;
  if (!procs_.empty() || cells_running()) next = std::min(next, next_scan_);
  for (const auto& [channel, k] : kernels_)
    if (k.proc.status) next = now;  // python3 ended: report it and start it again
  if (next == Clock::time_point::max()) return -1;
  if (next <= now) return 0;
  return static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1);
}

void Agent::shutdown(const char* why) {
  if (ending_) return;
  ending_ = true;
  log(std::string("ending: ") + why);
  kill_everything(SIGKILL);
  ending_deadline_ = Clock::now() + std::chrono::seconds(2);
}

void Agent::on_signal(int signo) {
  if (signo == SIGCHLD) return reap();
  if (signo == SIGPIPE) return;
  // docker stop, or a signal meant for the sandbox: it ends.
  shutdown(strsignal(signo));
}

void Agent::reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    child_exited(pid, status);
  }
}

void Agent::on_frame(std::uint32_t session, Frame f) {
  using agent::PathRequest;
  Session& peer = sessions_.at(session);
  const Key zero = key_of(session, 0);
  // A malformed session ends: the owner's ends the sandbox, a bridge's only itself.
  auto broken = [&](const char* why) {
    if (session == 0) return shutdown(why);
    peer.input_open = false;
  };
  if (!peer.hello && f.type != Type::Hello) {
    send(Type::Failure, zero, agent::Failure{0, "the session must start with Hello"}.encode());
    return broken("a frame before Hello");
  }
  auto bad = [&](const Problem& p) {
    send(Type::Failure, key_of(session, f.channel), agent::Failure{0, p.detail}.encode());
  };
  const Key channel = key_of(session, f.channel);
  if (tunnel_frame(channel, f)) return;
  switch (f.type) {
    case Type::Hello: {
      auto h = agent::Hello::decode(f.payload);
      if (!h) return bad(h.problem());
      if (h.value().min_version > agent::kVersion || h.value().max_version < agent::kVersion) {
        send(Type::Failure, zero,
             agent::Failure{0, "this agent speaks version " + std::to_string(agent::kVersion)}
                 .encode());
        return broken("no common protocol version");
      }
      peer.hello = true;
      agent::Welcome w;
      w.agent = std::string(kAgentVersion);
      w.pid = static_cast<std::uint32_t>(self_);
      w.python = python_ = python_path();
      if (!w.python.empty()) w.features |= agent::kPython3;
      return send(Type::Welcome, zero, w.encode());
    }
    case Type::Start: {
      auto s = agent::Start::decode(f.payload);
      if (!s) return bad(s.problem());
      return start(channel, s.value());
    }
    case Type::Stdin:
      return stdin_data(channel, std::move(f.payload));
    case Type::StdinClose:
      return stdin_close(channel);
    case Type::Signal: {
      auto s = agent::Signal::decode(f.payload);
      if (!s) return bad(s.problem());
      return signal(channel, s.value());
    }
    case Type::Credit: {
      auto c = agent::Credit::decode(f.payload);
      if (!c) return bad(c.problem());
      return credit(channel, c.value().bytes);
    }
    case Type::ReadFile:
    case Type::WriteFile:
    case Type::ListDir:
    case Type::Stat:
    case Type::MakeDir:
    case Type::Remove: {
      auto r = PathRequest::decode(f.payload);
      if (!r) return bad(r.problem());
      if (f.type == Type::ReadFile) return read_file(channel, r.value());
      if (f.type == Type::WriteFile) return write_file(channel, r.value());
      if (f.type == Type::ListDir) return list_dir(channel, r.value());
      if (f.type == Type::Stat) return stat_path(channel, r.value());
      if (f.type == Type::MakeDir) return make_dir(channel, r.value());
      return remove_path(channel, r.value());
    }
    case Type::FileData:
      return file_data(channel, std::move(f.payload));
    case Type::FileEnd:
      return file_end(channel);
    case Type::ContextStart: {
      auto c = agent::ContextStart::decode(f.payload);
      if (!c) return bad(c.problem());
      return context_start(channel, std::move(c).value());
    }
    case Type::RunCode: {
      auto r = agent::RunCode::decode(f.payload);
      if (!r) return bad(r.problem());
      return run_code(channel, r.value());
    }
    case Type::ContextEnd:
      return context_end(channel);
    case Type::Ping: {
      auto p = agent::Ping::decode(f.payload);
      if (!p) return bad(p.problem());
      return send(Type::Pong, zero, p.value().encode());
    }
    case Type::Shutdown:
      return shutdown("the owner asked");
    case Type::EgressListen: {
      auto e = agent::EgressListen::decode(f.payload);
      if (!e) return bad(e.problem());
      return egress_listen(channel, e.value());
    }
    default:
      send(Type::Failure, zero,
           agent::Failure{0, "unexpected frame " + std::string(agent::to_string(f.type))}.encode());
      return broken("a frame the host may not send");
  }
}

void Agent::pump_session(std::uint32_t id, const pollfd& in, const pollfd& out) {
  static std::vector<char> buffer(agent::kChunk);  // not io_buffer(): frames may use that
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  Session& s = it->second;
  if (out.revents & (POLLOUT | POLLERR | POLLHUP)) {
    const ssize_t n = ::write(s.out_fd, s.outbox.data() + s.outbox_sent, s.queued());
    if (n > 0) {
      s.outbox_sent += static_cast<std::size_t>(n);
      if (s.outbox_sent == s.outbox.size()) {
        s.outbox.clear();
        s.outbox_sent = 0;
      } else if (s.outbox_sent > (std::size_t{1} << 20)) {
        s.outbox.erase(0, s.outbox_sent);
        s.outbox_sent = 0;
      }
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return end_session(id);  // nobody reads it any more: the peer is gone
    }
  }
  if (in.revents & (POLLIN | POLLHUP | POLLERR)) {
    const ssize_t n = read_session(s, buffer);
    if (n > 0) {
      s.reader.feed(std::string_view(buffer.data(), static_cast<std::size_t>(n)), [&](Frame f) {
        if (sessions_.contains(id)) on_frame(id, std::move(f));
      });
      it = sessions_.find(id);
      if (it != sessions_.end() && it->second.reader.error()) {
        send(Type::Failure, key_of(id, 0),
             agent::Failure{0, it->second.reader.error()->detail}.encode());
        if (id == 0) shutdown("a malformed frame");
        it->second.input_open = false;
      }
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      s.input_open = false;
    }
  }
}

int Agent::run() {
  for (;;) {
    const auto now = Clock::now();
    if (options_.lifetime && now >= started_ + *options_.lifetime) shutdown("the lifetime ended");
    // The owner's stream closed: the sandbox ends with it, unless it outlives its owner.
    const auto owner = sessions_.find(0);
    const bool owner_closed = owner != sessions_.end() && !owner->second.input_open;
    if (!options_.outlive && (owner_gone_ || owner_closed)) {
      shutdown("the owner's stream closed");
    } else if (owner_closed) {
      end_session(0);
    }
    // A bridge whose peer stopped talking ends once it has been told everything.
    std::vector<std::uint32_t> done;
    for (const auto& [id, session] : sessions_)
      if (id != 0 && !session.input_open && session.queued() == 0) done.push_back(id);
    for (std::uint32_t id : done)
      end_session(id);
    if (ending_ && (procs_.empty() || now >= *ending_deadline_) && drained()) return 0;
    if (ending_ && now >= *ending_deadline_) return 0;
    if (now >= next_scan_ && (!procs_.empty() || cells_running())) {
      track_trees();
      next_scan_ = now + std::chrono::milliseconds(50);
    }
    // Output moves only while its session's queue is short: a slow host slows the processes.
    for (auto it = procs_.begin(); it != procs_.end();) {
      Proc& p = it->second;
      ++it;
      if (room(p.channel)) pump_output(p);
      flush_stdin(p);
      if (p.exited_at && (now >= *p.exited_at + kDrainGrace || (p.out_fd < 0 && p.err_fd < 0)))
        finish(p);
    }
    for (auto& [channel, t] : transfers_) {
      if (t.reading && room(channel)) pump_read(channel, t);
    }
    std::erase_if(transfers_, [](const auto& kv) { return kv.second.reading && kv.second.fd < 0; });
    service_kernels();
    pump_tunnels();

    std::vector<pollfd> fds;
    fds.push_back({signal_fd_, POLLIN, 0});
    fds.push_back({ending_ ? -1 : options_.listen_fd, POLLIN, 0});
    std::vector<std::uint32_t> polled;  // sessions, two entries each (input, output)
    for (auto& [id, s] : sessions_) {
      polled.push_back(id);
      fds.push_back({s.input_open && s.room() ? s.in_fd : -1, POLLIN, 0});
      fds.push_back({s.queued() > 0 ? s.out_fd : -1, POLLOUT, 0});
    }
    for (auto& [channel, p] : procs_) {
      const bool open = p.credit > 0 && room(channel);
      for (int fd : {p.out_fd, p.err_fd})
        if (fd >= 0 && open) fds.push_back({fd, POLLIN, 0});
      if (p.in_fd >= 0 && !p.stdin_buf.empty()) fds.push_back({p.in_fd, POLLOUT, 0});
    }
    for (auto& [channel, k] : kernels_) {
      const bool open = room(channel);
      const Cell* cell = k.sent && !k.cells.empty() ? &k.cells.front() : nullptr;
      // Output is read for a cell with credit (and, once it is done, only what it left), or
      // dropped between cells; events only while the session's queue has room.
      for (int fd : {k.proc.out_fd, k.proc.err_fd}) {
        const std::uint64_t drain =
            fd == k.proc.out_fd ? (cell ? cell->drain_out : 0) : (cell ? cell->drain_err : 0);
        if (fd >= 0 && open && (!cell || (cell->credit > 0 && (!cell->done || drain > 0))))
          fds.push_back({fd, POLLIN, 0});
      }
      if (k.evt_fd >= 0 && open) fds.push_back({k.evt_fd, POLLIN, 0});
      if (k.req_fd >= 0 && !k.requests.empty()) fds.push_back({k.req_fd, POLLOUT, 0});
    }
    const std::size_t proxy_at = fds.size();  // poll_tunnels() puts the listener first
    poll_tunnels(fds);
    const int ready = ::poll(fds.data(), fds.size(), poll_timeout(Clock::now()));
    if (ready < 0 && errno != EINTR) return 3;
    if (ready <= 0) continue;
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info{};
      while (::read(signal_fd_, &info, sizeof info) == sizeof info)
        on_signal(static_cast<int>(info.ssi_signo));
    }
    for (std::size_t i = 0; i < polled.size(); ++i)
      pump_session(polled[i], fds[2 + 2 * i], fds[3 + 2 * i]);
    if (fds[1].revents & POLLIN) accept_bridge();
    if (proxy_at < fds.size() && fds[proxy_at].fd == proxy_fd_ && (fds[proxy_at].revents & POLLIN))
      accept_tunnels();
  }
}

}  // namespace sandboxio::agent_main

int main(int argc, char** argv) {
  using namespace sandboxio::agent_main;
  Options options;
  const char* user = nullptr;
  std::string socket_path;
  bool bridge = false;
  bool seccomp = false;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--lifetime" && i + 1 < argc) {
      char* end = nullptr;
      const long seconds = std::strtol(argv[++i], &end, 10);
      if (end == nullptr || *end != '\0' || seconds <= 0) {
        std::fprintf(stderr, "sandboxio-agent: --lifetime takes a positive number of seconds\n");
        return 2;
      }
      options.lifetime = std::chrono::seconds(seconds);
    } else if (arg == "--user" && i + 1 < argc) {
      user = argv[++i];
    } else if (arg == "--socket" && i + 1 < argc) {
      socket_path = argv[++i];
    } else if (arg == "--outlive") {
      options.outlive = true;
    } else if (arg == "--bridge") {
      bridge = true;
    } else if (arg == "--seccomp") {
      seccomp = true;
    } else if (arg == "--quiet") {
      quiet = true;
    } else if (arg == "--version") {
      std::printf("%s\n", kAgentVersion.data());
      return 0;
    } else {
      std::fprintf(stderr,
                   "usage: sandboxio-agent [--lifetime SECONDS] [--user USER[:GROUP]] [--outlive] "
                   "[--socket PATH] [--seccomp] [--quiet]\n"
                   "       sandboxio-agent --bridge [--socket PATH]\n");
      return 2;
    }
  }
  if (bridge) return run_bridge(socket_path.empty() ? std::string(kSocketPath) : socket_path);
  // As PID 1 (a container), bridge sessions are taken at the usual place; elsewhere (tests on a
  // host) only where --socket says. The socket is made before --user changes the agent's file
  // identity, so that it stays root's. With --quiet (local://, where runsc makes the agent PID 1
  // too) the launcher's stdio is the only session: nothing there would ever bridge.
  if (socket_path.empty() && ::getpid() == 1 && !quiet) socket_path = kSocketPath;
  if (!socket_path.empty()) {
    std::string error;
    options.listen_fd = listen_for_bridges(socket_path, error);
    if (options.listen_fd < 0)
      std::fprintf(stderr, "sandboxio-agent: no bridge sessions: %s\n", error.c_str());
  }
  if (user != nullptr) {
    auto id = resolve_user(user);
    std::string error;
    if (!id) {
      std::fprintf(stderr, "sandboxio-agent: %s\n", id.problem().detail.c_str());
      return 2;
    }
    if (!take_identity(id.value(), error)) {
      std::fprintf(stderr, "sandboxio-agent: --user %s: %s\n", user, error.c_str());
      return 2;
    }
    options.user = std::move(id).value();
  }
  if (seccomp) {
    // Before anything is served: no command ever runs without it.
    std::string error;
    if (!install_seccomp(error)) {
      std::fprintf(stderr, "sandboxio-agent: --seccomp: %s\n", error.c_str());
      return 2;
    }
  }
  if (quiet) {
    // stderr is the session's socket: from here on, only frames go there.
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) {
      ::dup2(null, 2);
      ::close(null);
    }
  }
  return Agent(options).run();
}
