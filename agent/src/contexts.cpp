// Code contexts: one python3 per context, running the bootstrap the agent carries
// (agent/python/bootstrap.py, compiled in as kBootstrap). Cells run one at a time, in the order
// they came:
//   RunCode -> the request goes to the bootstrap (fd 3) -> the cell's stdout and stderr (the
//   process's own pipes, so what its subprocesses print comes too) go out as Output under the
//   cell's credit -> its events (fd 4) go out as CodeEvent -> "done": the pipes are drained of
//   what they held at that moment -> CodeDone -> the next cell.
// An interrupt (Signal SIGINT on the cell) kills what the cell started and raises
// KeyboardInterrupt in it; a restart (SIGKILL) kills python3 and its tree and starts a fresh
// one. python3 ending by itself restarts the context too; the cell is told how it ended.
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent.hpp"
#include "bootstrap.inc"

namespace sandboxio::agent_main {
namespace {

void put_u32(std::string& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}

std::uint32_t get_u32(std::string_view in) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v = (v << 8) | static_cast<std::uint8_t>(in[static_cast<std::size_t>(i)]);
  return v;
}

void put_str(std::string& out, std::string_view s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

/// Bytes waiting in a pipe.
std::uint64_t pending(int fd) {
  int n = 0;
  if (fd < 0 || ::ioctl(fd, FIONREAD, &n) != 0 || n < 0) return 0;
  return static_cast<std::uint64_t>(n);
}

std::string describe(int status) {
  if (WIFSIGNALED(status))
    return "python3 was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "python3 exited with status " + std::to_string(WEXITSTATUS(status));
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

void Agent::context_start(Key channel, agent::ContextStart spec) {
  if (channel_in_use(channel))
    return send(Type::Failure, channel, agent::Failure{0, "channel in use"}.encode());
  if (python_.empty()) {
    return send(Type::Failure, channel,
                agent::Failure{ENOENT, "python3 is not in this sandbox's image"}.encode());
  }
  Kernel k;
  k.spec = std::move(spec);
  int error = 0;
  std::string what;
  if (!launch_kernel(channel, k, error, what)) {
    return send(Type::Failure, channel,
                agent::Failure{error, what + ": " + std::strerror(error)}.encode());
  }
  const pid_t pid = k.proc.pid;
  kernels_.emplace(channel, std::move(k));
  send(Type::Started, channel, agent::Started{pid}.encode());
}

bool Agent::launch_kernel(Key channel, Kernel& k, int& error, std::string& what) {
  int req[2] = {-1, -1}, evt[2] = {-1, -1};
  if (::pipe2(req, O_CLOEXEC) != 0 || ::pipe2(evt, O_CLOEXEC) != 0) {
    error = errno;
    what = "pipe";
    for (int fd : {req[0], req[1], evt[0], evt[1]})
      if (fd >= 0) ::close(fd);
    return false;
  }
  // python3 reads the bootstrap from fd 3 before the cells: the command line stays short in
  // `ps`, and no pattern a user greps for can match the bootstrap's text.
  const std::string n = std::to_string(kBootstrap.size());
  // An end of file before the whole bootstrap (the agent ended first) ends python3 too.
  const std::string stub = "import os\nb = b''\nwhile len(b) < " + n + ":\n    c = os.read(3, " +
                           n +
                           " - len(b))\n    if not c: os._exit(70)\n    b += c\n"
                           "exec(compile(b, '<sandboxio>', 'exec'))\n";
  Spawn s;
  s.argv = {python_, "-u", "-c", stub};
  s.env = k.spec.env;
  s.cwd = k.spec.cwd;
  s.extra_fds = {{req[0], 3}, {evt[1], 4}};
  auto spawned = spawn(s, error, what);
  ::close(req[0]);
  ::close(evt[1]);
  if (!spawned) {
    ::close(req[1]);
    ::close(evt[0]);
    return false;
  }
  k.proc = Proc{};
  k.proc.channel = channel;
  k.proc.pid = spawned->pid;
  k.proc.out_fd = spawned->out_fd;
  k.proc.err_fd = spawned->err_fd;
  k.proc.members.insert(spawned->pid);
  k.req_fd = req[1];
  k.evt_fd = evt[0];
  for (int fd : {k.req_fd, k.evt_fd})
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  k.requests.assign(kBootstrap);
  k.events.clear();
  k.sent = false;
  k.restart.reset();
  k.broken.clear();
  kernel_pids_[spawned->pid] = channel;
  return true;
}

void Agent::run_code(Key channel, const agent::RunCode& r) {
  if (channel_in_use(channel))
    return send(Type::Failure, channel, agent::Failure{0, "channel in use"}.encode());
  auto it = kernels_.find(key_of(session_of(channel), r.context));  // the session's own
  if (it == kernels_.end() || it->second.closing) {
    return send(Type::Failure, channel,
                agent::Failure{ENOENT, "no code context " + std::to_string(r.context)}.encode());
  }
  Cell cell;
  cell.channel = channel;
  cell.credit = r.window;
  cell.request = r.encode();  // the bootstrap reads RunCode as the codec wrote it
  it->second.cells.push_back(std::move(cell));
  next_cell(it->second);
}

void Agent::next_cell(Kernel& k) {
  if (k.sent || k.cells.empty() || k.proc.status || k.req_fd < 0) return;
  Cell& cell = k.cells.front();
  cell.before = k.proc.members;
  put_str(k.requests, cell.request);
  cell.request.clear();
  k.sent = true;
  if (cells_running()) next_scan_ = Clock::now();  // know the tree from the cell's start
  flush_requests(k);
}

void Agent::flush_requests(Kernel& k) {
  while (!k.requests.empty() && k.req_fd >= 0) {
    const ssize_t n = ::write(k.req_fd, k.requests.data(), k.requests.size());
    if (n > 0) {
      k.requests.erase(0, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      if (n < 0 && errno != EAGAIN) close_fd(k.req_fd);  // python3 is going: its exit says why
      return;
    }
  }
}

void Agent::context_end(Key channel) {
  auto it = kernels_.find(channel);
  if (it == kernels_.end()) {
    return send(
        Type::Failure, channel,
        agent::Failure{ENOENT, "no code context " + std::to_string(channel_of(channel))}.encode());
  }
  it->second.closing = true;
  if (!it->second.proc.status) kill_tree(it->second.proc, SIGKILL);
}

bool Agent::signal_cell(Key channel, const agent::Signal& s) {
  for (auto& [id, k] : kernels_) {
    for (auto cell = k.cells.begin(); cell != k.cells.end(); ++cell) {
      if (cell->channel != channel) continue;
      if (cell != k.cells.begin() || !k.sent) {  // still queued: it never runs
        agent::CodeDone done;
        done.message = "stopped before it ran";
        send(Type::CodeDone, channel, done.encode());
        k.cells.erase(cell);
        return true;
      }
      if (k.proc.status || cell->done) return true;  // it is ending anyway
      if (s.signo == SIGKILL) {
        k.restart = agent::CodeDone::How::Restarted;
        kill_tree(k.proc, SIGKILL);
      } else {
        // What the cell started dies; python3 itself gets the signal (KeyboardInterrupt).
        std::set<pid_t> spare = cell->before;
        spare.insert(k.proc.pid);
        kill_tree(k.proc, SIGKILL, spare);
        ::kill(k.proc.pid, s.signo);
      }
      return true;
    }
  }
  return false;
}

bool Agent::credit_cell(Key channel, std::uint32_t bytes) {
  for (auto& [id, k] : kernels_)
    for (Cell& cell : k.cells)
      if (cell.channel == channel) {
        cell.credit += bytes;
        return true;
      }
  return false;
}

bool Agent::cells_running() const {
  for (const auto& [id, k] : kernels_)
    if (k.sent && !k.cells.empty() && !k.proc.status) return true;
  return false;
}

void Agent::service_kernels() {
  std::vector<Key> channels;
  for (const auto& [channel, k] : kernels_)
    channels.push_back(channel);
  for (Key channel : channels) {
    auto it = kernels_.find(channel);
    if (it == kernels_.end()) continue;
    Kernel& k = it->second;
    flush_requests(k);
    read_events(k);
    pump_kernel(k);
    if (k.proc.status) kernel_exited(channel, k);
  }
}

void Agent::read_events(Kernel& k) {
  char buf[16384];
  while (k.evt_fd >= 0 && k.events.size() < agent::kMaxPayload + 4 && room(k.proc.channel)) {
    const ssize_t n = ::read(k.evt_fd, buf, sizeof buf);
    if (n > 0) {
      k.events.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    close_fd(k.evt_fd);
  }
  Cell* cell = k.sent && !k.cells.empty() ? &k.cells.front() : nullptr;
  std::size_t at = 0;
  while (k.events.size() - at >= 4) {
    const std::uint32_t length = get_u32(std::string_view(k.events).substr(at));
    if (length == 0 || length > agent::kMaxPayload) {
      // Code in the context wrote over the bootstrap's pipe: it is no longer to be trusted.
      k.broken = "python3 wrote a malformed event; the context was restarted";
      k.events.clear();
      if (!k.proc.status) kill_tree(k.proc, SIGKILL);
      return;
    }
    if (k.events.size() - at - 4 < length) break;
    const std::string_view event = std::string_view(k.events).substr(at + 4, length);
    at += 4 + length;
    const auto kind = static_cast<std::uint8_t>(event[0]);
    if (cell == nullptr || cell->done) continue;  // nobody asked: dropped
    if (kind == 3) {
      cell->done = true;
      cell->drain_out = pending(k.proc.out_fd);
      cell->drain_err = pending(k.proc.err_fd);
    } else {
      send(Type::CodeEvent, cell->channel, event);  // the host decodes and judges it
    }
  }
  k.events.erase(0, at);
}

void Agent::pump_kernel(Kernel& k) {
  Cell* cell = k.sent && !k.cells.empty() ? &k.cells.front() : nullptr;
  const std::span<char> buf = io_buffer();
  for (int* fd : {&k.proc.out_fd, &k.proc.err_fd}) {
    const bool is_out = fd == &k.proc.out_fd;
    std::uint64_t* drain = cell ? (is_out ? &cell->drain_out : &cell->drain_err) : nullptr;
    if (*fd < 0) {
      if (drain) *drain = 0;
      continue;
    }
    if (!room(k.proc.channel)) continue;
    std::uint64_t want = buf.size();
    if (cell) {
      want = std::min(want, cell->credit);
      if (cell->done) want = std::min(want, *drain);
      if (want == 0) continue;
    }
    const ssize_t n = ::read(*fd, buf.data(), want);
    if (n > 0) {
      if (!cell) continue;  // between cells (a thread still printing): nobody to tell
      send_output(cell->channel, is_out ? agent::StreamId::Stdout : agent::StreamId::Stderr,
                  std::string_view(buf.data(), static_cast<std::size_t>(n)));
      cell->credit -= static_cast<std::uint64_t>(n);
      if (cell->done) *drain -= std::min<std::uint64_t>(*drain, static_cast<std::uint64_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      close_fd(*fd);
      if (drain) *drain = 0;
    }
  }
  if (cell && cell->done && cell->drain_out == 0 && cell->drain_err == 0 && !k.proc.status) {
    agent::CodeDone done;
    done.fresh = k.fresh;
    k.fresh = false;
    send(Type::CodeDone, cell->channel, done.encode());
    k.cells.pop_front();
    k.sent = false;
    next_cell(k);
  }
}

void Agent::kernel_exited(Key channel, Kernel& k) {
  const int status = *k.proc.status;
  Cell* cell = k.sent && !k.cells.empty() ? &k.cells.front() : nullptr;
  // What python3 printed before it ended, as far as the cell's credit goes.
  if (cell) {
    while (cell->credit > 0 && (k.proc.out_fd >= 0 || k.proc.err_fd >= 0)) {
      const std::uint64_t before = cell->credit;
      cell->done = false;
      pump_kernel(k);
      if (cell->credit == before) break;
    }
  }
  for (int* fd : {&k.proc.out_fd, &k.proc.err_fd, &k.req_fd, &k.evt_fd})
    close_fd(*fd);
  const std::string why = !k.broken.empty() ? k.broken : describe(status);
  if (k.closing) {
    for (const Cell& c : k.cells) {
      agent::CodeDone done;
      done.how = agent::CodeDone::How::Lost;
      done.message = "the context was closed";
      send(Type::CodeDone, c.channel, done.encode());
    }
    send(Type::Done, channel, agent::Done{}.encode());
    kernels_.erase(channel);
    return;
  }
  if (cell) {
    agent::CodeDone done;
    done.how = k.restart ? *k.restart : agent::CodeDone::How::Died;
    done.fresh = k.fresh;
    done.signalled = WIFSIGNALED(status);
    done.value = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
    done.message = why;
    send(Type::CodeDone, cell->channel, done.encode());
    k.cells.pop_front();
  } else {
    log("code context " + std::to_string(channel_of(channel)) + ": " + why + "; started again");
  }
  int error = 0;
  std::string what;
  if (!launch_kernel(channel, k, error, what)) {
    for (const Cell& c : k.cells) {
      agent::CodeDone done;
      done.how = agent::CodeDone::How::Lost;
      done.message = "python3 could not start again: " + what + ": " + std::strerror(error);
      send(Type::CodeDone, c.channel, done.encode());
    }
    kernels_.erase(channel);
    return;
  }
  // A cell that ran when it ended knows (Died or Restarted); the next one learns that its
  // context is a fresh one.
  k.fresh = !cell;
  next_cell(k);
}

}  // namespace sandboxio::agent_main
