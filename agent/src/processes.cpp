// Processes: start, stdin, signals, output under credit, exits as waitpid said, and trees.
//
// A command's tree is every process it started, wherever it went: its own session (each
// command gets one, so a plain kill of the group reaches most of it), any process whose
// parent chain leads to a member, and the orphans that came to us (we are the subreaper) while
// the command ran. The agent rescans /proc every 50 ms while commands run, so a child that
// calls setsid, double-forks or clears its environment is already known when the tree is
// killed; an orphan first seen at kill time goes to the command being killed when no other
// command is running.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent.hpp"

extern char** environ;

namespace sandboxio::agent_main {
namespace {

struct ProcStat {
  pid_t ppid = 0;
  pid_t session = 0;
  char state = '?';
};

std::optional<ProcStat> read_stat(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  // "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
  const char* close_paren = std::strrchr(buf, ')');
  if (close_paren == nullptr) return std::nullopt;
  ProcStat s;
  int pgrp = 0;
  int ppid = 0;
  int session = 0;
  if (std::sscanf(close_paren + 2, "%c %d %d %d", &s.state, &ppid, &pgrp, &session) != 4)
    return std::nullopt;
  s.ppid = ppid;
  s.session = session;
  return s;
}

std::map<pid_t, ProcStat> all_processes() {
  std::map<pid_t, ProcStat> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    if (auto s = read_stat(static_cast<pid_t>(pid))) out[static_cast<pid_t>(pid)] = *s;
  }
  ::closedir(d);
  return out;
}

/// UID[:GID] -> ids; empty -> nothing to change.
bool parse_user(const std::string& user, uid_t& uid, gid_t& gid) {
  char* end = nullptr;
  const unsigned long u = std::strtoul(user.c_str(), &end, 10);
  if (end == user.c_str()) return false;
  uid = static_cast<uid_t>(u);
  gid = static_cast<gid_t>(u);
  if (*end == ':') {
    const char* g = end + 1;
    const unsigned long gv = std::strtoul(g, &end, 10);
    if (end == g) return false;
    gid = static_cast<gid_t>(gv);
  }
  return *end == '\0';
}

[[noreturn]] void child_fail(int error_pipe, int error) {
  (void)!::write(error_pipe, &error, sizeof error);
  ::_exit(127);
}

}  // namespace

std::optional<Agent::Spawned> Agent::spawn(const Spawn& s, int& error, std::string& what) {
  if (ending_) {  // everything was killed: nothing new may start that nobody would end
    error = ECANCELED;
    what = "the sandbox is ending";
    return std::nullopt;
  }
  uid_t uid = 0;
  gid_t gid = 0;
  if (!s.user.empty() && !parse_user(s.user, uid, gid)) {
    error = EINVAL;
    what = "user \"" + s.user + "\" is not UID[:GID]";
    return std::nullopt;
  }
  int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1}, report[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {out[0], out[1], err[0], err[1], in[0], in[1], report[0], report[1]})
      if (fd >= 0) ::close(fd);
  };
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
      (s.stdin_open && ::pipe2(in, O_CLOEXEC) != 0) || ::pipe2(report, O_CLOEXEC) != 0) {
    error = errno;
    what = "pipe";
    close_all();
    return std::nullopt;
  }
  widen_pipe(out[0]);
  widen_pipe(err[0]);
  // The sandbox's environment (the agent's own, as the image and create() set it) with the
  // command's variables over it.
  std::vector<std::string> argv_s = s.argv, env_s;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view var(*e);
    const std::string_view name = var.substr(0, var.find('='));
    bool overridden = false;
    for (const auto& mine : s.env)
      overridden = overridden || std::string_view(mine).substr(0, mine.find('=')) == name;
    if (!overridden) env_s.emplace_back(var);
  }
  env_s.insert(env_s.end(), s.env.begin(), s.env.end());
  std::vector<char*> argv, envp;
  for (auto& a : argv_s)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_s)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string cwd = s.cwd;  // empty: the agent's own (the image's working directory)

  const pid_t agent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child: its own session, plain signals, the pipes as 0/1/2 (and the extra ones at
    // their numbers), then the program.
    ::setsid();
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig)
      ::signal(sig, SIG_DFL);
    const int null_fd = s.stdin_open ? -1 : ::open("/dev/null", O_RDONLY);
    // Extra descriptors are first moved above every target, so that no dup2 overwrites one
    // that is still to be placed.
    std::vector<std::pair<int, int>> extra;
    for (const auto& [fd, target] : s.extra_fds)
      extra.emplace_back(::fcntl(fd, F_DUPFD_CLOEXEC, 64), target);
    // dup2 onto itself keeps close-on-exec: a pipe end already at its number is cleared.
    auto place = [](int fd, int target) {
      if (fd < 0) return false;
      if (fd == target) return ::fcntl(fd, F_SETFD, 0) == 0;
      return ::dup2(fd, target) >= 0;
    };
    if (!place(s.stdin_open ? in[0] : null_fd, 0) || !place(out[1], 1) || !place(err[1], 2))
      child_fail(report[1], errno);
    for (const auto& [fd, target] : extra)
      if (!place(fd, target)) child_fail(report[1], errno);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) child_fail(report[1], errno);
    if (!s.user.empty()) {
      if (::setgroups(0, nullptr) != 0 && errno != EPERM) child_fail(report[1], errno);
      if (::setgid(gid) != 0 || ::setuid(uid) != 0) child_fail(report[1], errno);
    } else if (const auto& id = options_.user) {
      // The sandbox's user (its groups are already ours). Leaving uid 0 clears every
      // capability the agent holds; no-new-privileges keeps them from coming back.
      if (::setgid(id->gid) != 0 || ::setuid(id->uid) != 0) child_fail(report[1], errno);
      if (id->uid != 0 && ::setuid(0) == 0) child_fail(report[1], EPERM);
    }
    // Should the agent die without ending it (SIGKILLed where it is not the PID namespace's
    // init: on a host, under a supervisor), the process goes with it. Set after the identity
    // changes, which clear it; an agent already gone by now is seen as a new parent.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != agent) ::_exit(127);
    environ = envp.data();  // execvp searches the PATH the command was given
    ::execvp(argv[0], argv.data());
    child_fail(report[1], errno);
  }
  ::close(out[1]);
  ::close(err[1]);
  if (in[0] >= 0) ::close(in[0]);
  ::close(report[1]);
  if (pid < 0) {
    error = errno;
    what = "fork";
    for (int fd : {out[0], err[0], in[1], report[0]})
      if (fd >= 0) ::close(fd);
    return std::nullopt;
  }
  // exec succeeded when the report pipe closes empty (it is close-on-exec).
  int failed = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &failed, sizeof failed);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == sizeof failed) {
    ::waitpid(pid, nullptr, 0);
    for (int fd : {out[0], err[0], in[1]})
      if (fd >= 0) ::close(fd);
    error = failed;
    what = "cannot run " + s.argv[0];
    return std::nullopt;
  }
  for (int fd : {out[0], err[0], in[1]})
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return Spawned{pid, out[0], err[0], in[1]};
}

void Agent::start(Key channel, const agent::Start& s) {
  if (channel_in_use(channel)) {
    return send(Type::Failure, channel, agent::Failure{0, "channel in use"}.encode());
  }
  int error = 0;
  std::string what;
  auto spawned = spawn(Spawn{s.argv, s.env, s.cwd, s.user, s.stdin_open, {}}, error, what);
  if (!spawned) {
    agent::Exit e;
    e.how = agent::Exit::How::StartFailed;
    e.value = error;
    e.message = what + ": " + std::strerror(error);
    return send(Type::Exit, channel, e.encode());
  }
  Proc p;
  p.channel = channel;
  p.pid = spawned->pid;
  p.out_fd = spawned->out_fd;
  p.err_fd = spawned->err_fd;
  p.in_fd = spawned->in_fd;
  p.credit = s.window;
  p.members.insert(p.pid);
  procs_.emplace(channel, std::move(p));
  spawned_[spawned->pid] = channel;
  send(Type::Started, channel, agent::Started{spawned->pid}.encode());
}

void Agent::stdin_data(Key channel, std::string data) {
  auto it = procs_.find(channel);
  if (it == procs_.end() || it->second.in_fd < 0) return;  // ended, or no stdin: dropped
  it->second.stdin_buf += data;
  flush_stdin(it->second);
}

void Agent::stdin_close(Key channel) {
  auto it = procs_.find(channel);
  if (it == procs_.end()) return;
  it->second.stdin_close = true;
  flush_stdin(it->second);
}

void Agent::flush_stdin(Proc& p) {
  if (p.in_fd < 0) return;
  while (!p.stdin_buf.empty()) {
    const ssize_t n = ::write(p.in_fd, p.stdin_buf.data(), p.stdin_buf.size());
    if (n > 0) {
      p.stdin_buf.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    p.stdin_buf.clear();  // the process closed its stdin: what is left has nowhere to go
    break;
  }
  if (p.stdin_close || p.status) {
    ::close(p.in_fd);
    p.in_fd = -1;
  }
}

bool Agent::channel_in_use(Key channel) const {
  if (procs_.contains(channel) || transfers_.contains(channel) || kernels_.contains(channel))
    return true;
  for (const auto& [id, k] : kernels_)
    for (const Cell& c : k.cells)
      if (c.channel == channel) return true;
  return false;
}

void Agent::signal(Key channel, const agent::Signal& s) {
  if (signal_cell(channel, s) || cancel_transfer(channel)) return;
  auto it = procs_.find(channel);
  if (it == procs_.end()) return;
  if (s.tree) return kill_tree(it->second, s.signo);
  if (!it->second.status) ::kill(it->second.pid, s.signo);
}

void Agent::credit(Key channel, std::uint32_t bytes) {
  if (credit_cell(channel, bytes)) return;
  if (auto it = procs_.find(channel); it != procs_.end()) it->second.credit += bytes;
  if (auto it = transfers_.find(channel); it != transfers_.end()) it->second.credit += bytes;
}

bool Agent::pump_output(Proc& p) {
  const std::span<char> buf = io_buffer();
  bool moved = false;
  for (int* fd : {&p.out_fd, &p.err_fd}) {
    if (*fd < 0 || p.credit == 0) continue;
    const std::size_t want = std::min<std::uint64_t>(buf.size(), p.credit);
    const ssize_t n = ::read(*fd, buf.data(), want);
    if (n > 0) {
      send_output(p.channel, fd == &p.out_fd ? agent::StreamId::Stdout : agent::StreamId::Stderr,
                  std::string_view(buf.data(), static_cast<std::size_t>(n)));
      p.credit -= static_cast<std::uint64_t>(n);
      moved = true;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      ::close(*fd);
      *fd = -1;
    }
  }
  return moved;
}

void Agent::child_exited(pid_t pid, int status) {
  if (auto kernel = kernel_pids_.find(pid); kernel != kernel_pids_.end()) {
    // A context's python3: service_kernels() reports it and starts a fresh one.
    if (auto it = kernels_.find(kernel->second); it != kernels_.end())
      it->second.proc.status = status;
    kernel_pids_.erase(kernel);
    return;
  }
  auto spawned = spawned_.find(pid);
  if (spawned == spawned_.end()) return;  // a descendant (an orphan we inherited): reaped
  auto it = procs_.find(spawned->second);
  spawned_.erase(spawned);
  if (it == procs_.end()) return;
  it->second.status = status;
  it->second.exited_at = Clock::now();
  flush_stdin(it->second);
}

void Agent::finish(Proc& p) {
  // The main process ended and its pipes are at their end (or held open past the grace by a
  // child it left running; that child stays, as it would after `docker exec`).
  while (p.credit > 0 && pump_output(p)) {
  }
  if ((p.out_fd >= 0 || p.err_fd >= 0) && p.credit == 0) return;  // the host must read first
  for (int fd : {p.out_fd, p.err_fd, p.in_fd})
    if (fd >= 0) ::close(fd);
  agent::Exit e;
  const int status = *p.status;
  if (WIFSIGNALED(status)) {
    e.how = agent::Exit::How::Signalled;
    e.value = WTERMSIG(status);
    e.core_dumped = WCOREDUMP(status);
  } else {
    e.value = WEXITSTATUS(status);
  }
  const Key channel = p.channel;
  send(Type::Exit, channel, e.encode());
  procs_.erase(channel);
}

void Agent::track_trees() {
  const auto all = all_processes();
  // Every tree: the commands', and the code contexts' (python3 and what its cells started).
  std::vector<Proc*> trees;
  for (auto& [channel, p] : procs_)
    trees.push_back(&p);
  for (auto& [channel, k] : kernels_)
    if (!k.proc.status) trees.push_back(&k.proc);
  std::set<pid_t> known;
  for (const Proc* p : trees)
    known.insert(p->members.begin(), p->members.end());
  for (Proc* p : trees) {
    // Membership spreads along parent links and the command's own session.
    bool grew = true;
    while (grew) {
      grew = false;
      for (const auto& [pid, st] : all) {
        if (st.state == 'Z' || p->members.contains(pid)) continue;
        if (p->members.contains(st.ppid) || (st.session == p->pid && p->pid > 0)) {
          p->members.insert(pid);
          known.insert(pid);
          grew = true;
        }
      }
    }
    // Gone, or dead and waiting for its parent (a kill would "succeed" on it for ever).
    std::erase_if(p->members, [&](pid_t pid) {
      auto it = all.find(pid);
      return it == all.end() || it->second.state == 'Z';
    });
  }
  // Orphans that came to us and belong to nobody yet: when one command (or one context with
  // a running cell) runs, they are its.
  std::vector<Proc*> active;
  for (auto& [channel, p] : procs_)
    active.push_back(&p);
  for (auto& [channel, k] : kernels_)
    if (!k.proc.status && !k.cells.empty()) active.push_back(&k.proc);
  if (active.size() == 1) {
    for (const auto& [pid, st] : all) {
      if (st.ppid == self_ && !known.contains(pid) && !spawned_.contains(pid) &&
          !kernel_pids_.contains(pid) && st.state != 'Z')
        active.front()->members.insert(pid);
    }
  }
}

std::set<pid_t> Agent::tree_of(Proc& p) {
  track_trees();
  return p.members;
}

void Agent::kill_tree(Proc& p, int signo, const std::set<pid_t>& spare) {
  // A kill first freezes the tree: SIGSTOP to every member, repeated until a scan finds
  // nobody new. A stopped process forks no more, and a child forked just before its parent
  // stopped still has that parent, so the next scan finds it; without this, a child forked
  // between a scan and its parent's death is an orphan no scan can place (a `setsid` child
  // of a shell killed at that moment). Members in `spare` are left alone (an interrupted
  // cell's python3, and what the context's earlier cells left running).
  if (signo == SIGKILL) {
    std::set<pid_t> stopped;
    for (int round = 0; round < 50; ++round) {
      bool grew = false;
      for (pid_t pid : tree_of(p)) {
        if (pid <= 1 || pid == self_ || spare.contains(pid) || stopped.contains(pid)) continue;
        if (::kill(pid, SIGSTOP) == 0) grew = true;
        stopped.insert(pid);
      }
      if (!grew) break;
    }
  }
  // Then the signal, repeated until a scan finds nobody new (a fork bomb gets a few rounds).
  std::set<pid_t> killed;
  for (int round = 0; round < 20; ++round) {
    const std::set<pid_t> members = tree_of(p);
    bool any = false;
    for (pid_t pid : members) {
      if (pid <= 1 || pid == self_ || spare.contains(pid)) continue;
      if (::kill(pid, signo) == 0) any = true;
      killed.insert(pid);
    }
    // Its session's group, new members too (unless the main process, a member, is spared).
    if (p.pid > 0 && !p.status && !spare.contains(p.pid)) ::kill(-p.pid, signo);
    if (!any || signo != SIGKILL) break;
    reap();
  }
  if (signo != SIGKILL) return;
  // A SIGKILL is not instant (a process in the middle of an exec, on a loaded machine): what
  // is reported killed is gone before the report, within a bound (then it is left to die).
  for (int wait = 0; wait < 200 && !killed.empty(); ++wait) {
    reap();
    const auto all = all_processes();
    std::erase_if(killed, [&](pid_t pid) {
      auto it = all.find(pid);
      return it == all.end() || it->second.state == 'Z';
    });
    if (!killed.empty()) ::poll(nullptr, 0, 1);
  }
}

void Agent::kill_everything(int signo) {
  // As PID 1, everything in the sandbox; anywhere else (tests on a host), only descendants.
  // A process forked between a scan and its parent's death is an orphan of ours by the next
  // scan: repeat until a scan finds nobody alive (a few rounds, as for one tree).
  for (int round = 0; round < 20; ++round) {
    const auto all = all_processes();
    auto ours = [&](pid_t pid) {
      if (self_ == 1) return true;
      for (int depth = 0; depth < 4096 && pid > 1; ++depth) {
        auto it = all.find(pid);
        if (it == all.end()) return false;
        if (it->second.ppid == self_) return true;
        pid = it->second.ppid;
      }
      return false;
    };
    bool any = false;
    for (const auto& [pid, st] : all) {
      if (pid != self_ && pid > 1 && st.state != 'Z' && ours(pid) && ::kill(pid, signo) == 0)
        any = true;
    }
    if (!any || signo != SIGKILL) break;
    reap();
  }
}

}  // namespace sandboxio::agent_main
