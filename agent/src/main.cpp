// sandboxio-agent: arguments, the duties of an init, and the poll loop (see agent.hpp).
//
//   sandboxio-agent [--lifetime SECONDS] [--user USER[:GROUP]] [--outlive]
//
// stdin and stdout carry the agent protocol; stderr is for the agent's own last words.
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

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
}

void Agent::send(Type type, std::uint32_t channel, std::string_view payload) {
  outbox_ += agent::frame(type, channel, payload);
}

void Agent::log(const std::string& line) {
  send(Type::Log, 0, line);
}

int Agent::poll_timeout(Clock::time_point now) const {
  Clock::time_point next = Clock::time_point::max();
  if (options_.lifetime) next = std::min(next, started_ + *options_.lifetime);
  if (ending_deadline_) next = std::min(next, *ending_deadline_);
  for (const auto& [channel, p] : procs_) {
    if (p.exited_at) next = std::min(next, *p.exited_at + kDrainGrace);
  }
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

void Agent::on_frame(Frame f) {
  using agent::PathRequest;
  if (!hello_ && f.type != Type::Hello) {
    send(Type::Failure, 0, agent::Failure{0, "the session must start with Hello"}.encode());
    return shutdown("a frame before Hello");
  }
  auto bad = [&](const Problem& p) {
    send(Type::Failure, f.channel, agent::Failure{0, p.detail}.encode());
  };
  switch (f.type) {
    case Type::Hello: {
      auto h = agent::Hello::decode(f.payload);
      if (!h) return bad(h.problem());
      if (h.value().min_version > agent::kVersion || h.value().max_version < agent::kVersion) {
        send(Type::Failure, 0,
             agent::Failure{0, "this agent speaks version " + std::to_string(agent::kVersion)}
                 .encode());
        return shutdown("no common protocol version");
      }
      hello_ = true;
      agent::Welcome w;
      w.agent = std::string(kAgentVersion);
      w.pid = static_cast<std::uint32_t>(self_);
      w.python = python_ = python_path();
      if (!w.python.empty()) w.features |= agent::kPython3;
      return send(Type::Welcome, 0, w.encode());
    }
    case Type::Start: {
      auto s = agent::Start::decode(f.payload);
      if (!s) return bad(s.problem());
      return start(f.channel, s.value());
    }
    case Type::Stdin:
      return stdin_data(f.channel, std::move(f.payload));
    case Type::StdinClose:
      return stdin_close(f.channel);
    case Type::Signal: {
      auto s = agent::Signal::decode(f.payload);
      if (!s) return bad(s.problem());
      return signal(f.channel, s.value());
    }
    case Type::Credit: {
      auto c = agent::Credit::decode(f.payload);
      if (!c) return bad(c.problem());
      return credit(f.channel, c.value().bytes);
    }
    case Type::ReadFile:
    case Type::WriteFile:
    case Type::ListDir:
    case Type::Stat:
    case Type::MakeDir:
    case Type::Remove: {
      auto r = PathRequest::decode(f.payload);
      if (!r) return bad(r.problem());
      if (f.type == Type::ReadFile) return read_file(f.channel, r.value());
      if (f.type == Type::WriteFile) return write_file(f.channel, r.value());
      if (f.type == Type::ListDir) return list_dir(f.channel, r.value());
      if (f.type == Type::Stat) return stat_path(f.channel, r.value());
      if (f.type == Type::MakeDir) return make_dir(f.channel, r.value());
      return remove_path(f.channel, r.value());
    }
    case Type::FileData:
      return file_data(f.channel, std::move(f.payload));
    case Type::FileEnd:
      return file_end(f.channel);
    case Type::ContextStart: {
      auto c = agent::ContextStart::decode(f.payload);
      if (!c) return bad(c.problem());
      return context_start(f.channel, std::move(c).value());
    }
    case Type::RunCode: {
      auto r = agent::RunCode::decode(f.payload);
      if (!r) return bad(r.problem());
      return run_code(f.channel, r.value());
    }
    case Type::ContextEnd:
      return context_end(f.channel);
    case Type::Ping: {
      auto p = agent::Ping::decode(f.payload);
      if (!p) return bad(p.problem());
      return send(Type::Pong, 0, p.value().encode());
    }
    case Type::Shutdown:
      return shutdown("the owner asked");
    default:
      send(Type::Failure, 0,
           agent::Failure{0, "unexpected frame " + std::string(agent::to_string(f.type))}.encode());
      return shutdown("a frame the host may not send");
  }
}

int Agent::run() {
  std::vector<char> buffer(std::size_t{64} << 10);
  for (;;) {
    const auto now = Clock::now();
    if (options_.lifetime && now >= started_ + *options_.lifetime) shutdown("the lifetime ended");
    if (!input_open_ && !options_.outlive) shutdown("the owner's stream closed");
    if (ending_ && (procs_.empty() || now >= *ending_deadline_) && outbox_.size() == outbox_sent_)
      return 0;
    if (ending_ && now >= *ending_deadline_) return 0;
    if (now >= next_scan_ && (!procs_.empty() || cells_running())) {
      track_trees();
      next_scan_ = now + std::chrono::milliseconds(50);
    }
    // Output moves only while the host-bound queue is short: a slow host slows the processes.
    for (auto it = procs_.begin(); it != procs_.end();) {
      Proc& p = it->second;
      ++it;
      if (outbox_.size() - outbox_sent_ < kOutboxHigh) pump_output(p);
      flush_stdin(p);
      if (p.exited_at && (now >= *p.exited_at + kDrainGrace || (p.out_fd < 0 && p.err_fd < 0)))
        finish(p);
    }
    for (auto& [channel, t] : transfers_) {
      if (t.reading && outbox_.size() - outbox_sent_ < kOutboxHigh) pump_read(channel, t);
    }
    std::erase_if(transfers_, [](const auto& kv) { return kv.second.reading && kv.second.fd < 0; });
    service_kernels();

    std::vector<pollfd> fds;
    fds.push_back({signal_fd_, POLLIN, 0});
    const bool want_input = input_open_ && outbox_.size() - outbox_sent_ < kOutboxHigh;
    fds.push_back({want_input ? 0 : -1, POLLIN, 0});
    fds.push_back({outbox_.size() > outbox_sent_ ? 1 : -1, POLLOUT, 0});
    std::vector<std::pair<std::uint32_t, int>> watched;
    for (auto& [channel, p] : procs_) {
      const bool room = p.credit > 0 && outbox_.size() - outbox_sent_ < kOutboxHigh;
      for (int fd : {p.out_fd, p.err_fd}) {
        if (fd >= 0 && room) {
          fds.push_back({fd, POLLIN, 0});
          watched.emplace_back(channel, fd);
        }
      }
      if (p.in_fd >= 0 && !p.stdin_buf.empty()) {
        fds.push_back({p.in_fd, POLLOUT, 0});
        watched.emplace_back(channel, p.in_fd);
      }
    }
    const bool room = outbox_.size() - outbox_sent_ < kOutboxHigh;
    for (auto& [channel, k] : kernels_) {
      const Cell* cell = k.sent && !k.cells.empty() ? &k.cells.front() : nullptr;
      // Output is read for a cell with credit (and, once it is done, only what it left), or
      // dropped between cells; events only while the host-bound queue has room.
      for (int fd : {k.proc.out_fd, k.proc.err_fd}) {
        const std::uint64_t drain =
            fd == k.proc.out_fd ? (cell ? cell->drain_out : 0) : (cell ? cell->drain_err : 0);
        if (fd >= 0 && room && (!cell || (cell->credit > 0 && (!cell->done || drain > 0))))
          fds.push_back({fd, POLLIN, 0});
      }
      if (k.evt_fd >= 0 && room) fds.push_back({k.evt_fd, POLLIN, 0});
      if (k.req_fd >= 0 && !k.requests.empty()) fds.push_back({k.req_fd, POLLOUT, 0});
    }
    const int ready = ::poll(fds.data(), fds.size(), poll_timeout(Clock::now()));
    if (ready < 0 && errno != EINTR) return 3;
    if (ready <= 0) continue;
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info{};
      while (::read(signal_fd_, &info, sizeof info) == sizeof info)
        on_signal(static_cast<int>(info.ssi_signo));
    }
    if (fds[2].revents & (POLLOUT | POLLERR | POLLHUP)) {
      const ssize_t n = ::write(1, outbox_.data() + outbox_sent_, outbox_.size() - outbox_sent_);
      if (n > 0) {
        outbox_sent_ += static_cast<std::size_t>(n);
        if (outbox_sent_ == outbox_.size()) {
          outbox_.clear();
          outbox_sent_ = 0;
        } else if (outbox_sent_ > (std::size_t{1} << 20)) {
          outbox_.erase(0, outbox_sent_);
          outbox_sent_ = 0;
        }
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        // Nobody reads us any more: the owner is gone.
        outbox_.clear();
        outbox_sent_ = 0;
        input_open_ = false;
      }
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::read(0, buffer.data(), buffer.size());
      if (n > 0) {
        reader_.feed(std::string_view(buffer.data(), static_cast<std::size_t>(n)),
                     [&](Frame f) { on_frame(std::move(f)); });
        if (reader_.error()) {
          send(Type::Failure, 0, agent::Failure{0, reader_.error()->detail}.encode());
          shutdown("a malformed frame");
          input_open_ = false;
        }
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        input_open_ = false;
      }
    }
  }
}

}  // namespace sandboxio::agent_main

int main(int argc, char** argv) {
  sandboxio::agent_main::Options options;
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
      auto id = sandboxio::agent_main::resolve_user(argv[++i]);
      std::string error;
      if (!id) {
        std::fprintf(stderr, "sandboxio-agent: %s\n", id.problem().detail.c_str());
        return 2;
      }
      if (!sandboxio::agent_main::take_identity(id.value(), error)) {
        std::fprintf(stderr, "sandboxio-agent: --user %s: %s\n", argv[i], error.c_str());
        return 2;
      }
      options.user = std::move(id).value();
    } else if (arg == "--outlive") {
      options.outlive = true;
    } else if (arg == "--version") {
      std::printf("%s\n", sandboxio::agent_main::kAgentVersion.data());
      return 0;
    } else {
      std::fprintf(
          stderr,
          "usage: sandboxio-agent [--lifetime SECONDS] [--user USER[:GROUP]] [--outlive]\n");
      return 2;
    }
  }
  return sandboxio::agent_main::Agent(options).run();
}
