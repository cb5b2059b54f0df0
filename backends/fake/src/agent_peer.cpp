// sandboxio-agent, simulated (sandboxio/fake_agent.hpp): each request is answered at once with
// what the agent would say first (Started, Entries, Done, Failure), and what a process says
// later (its output, its Exit, a cell's events and CodeDone) is a timeline of frames released
// as virtual time passes it.
#include <cerrno>
#include <csignal>

#include "sandboxio/codec/agent.hpp"
#include "sandboxio/codec/shell.hpp"
#include "sandboxio/fake_agent.hpp"
#include "shell.hpp"

namespace sandboxio::fake {

using agent::Type;

namespace {

struct Proc {
  int pid = 0;
  std::string cmdline;
  std::optional<Instant> ends_at;  // nullopt: until its command ends
  std::uint32_t channel = 0;       // the command that started it
  bool ended = false;
};

/// What one channel still has to say: frames, each due at its instant.
struct Timeline {
  enum class Kind { Exec, Cell } kind = Kind::Exec;
  std::uint32_t context = 0;  // a cell's context
  std::vector<std::pair<Instant, std::string>> frames{};
  std::size_t next = 0;
  [[nodiscard]] bool done() const { return next >= frames.size(); }
};

struct Context {
  std::map<std::string, std::string> vars{};
  Instant busy_until{};
};

struct PendingStart {
  agent::Start start;
  Bytes stdin_data{};
};

struct Upload {
  std::string path;
  std::uint32_t mode = 0644;
  Bytes data{};
  bool failed = false;
};

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

std::string failure(int error, const std::string& what) {
  std::string message = what;
  if (error == ENOENT) message += ": No such file or directory";
  if (error == EISDIR) message += ": Is a directory";
  if (error == ENOTDIR) message += ": Not a directory";
  if (error == ENOTEMPTY) message += ": Directory not empty";
  if (error == EEXIST) message += ": File exists";
  return agent::Failure{error, message}.encode();
}

agent::Entry entry_of(const std::string& path, const detail::Node& node) {
  agent::Entry e;
  const auto slash = path.rfind('/');
  e.name = slash == std::string::npos ? path : path.substr(slash + 1);
  e.kind = node.dir ? agent::Entry::Kind::Directory : agent::Entry::Kind::File;
  e.size = node.dir ? 0 : node.data.size();
  e.mode = node.mode;
  return e;
}

}  // namespace

struct AgentPeer::Impl {
  AgentPeerOptions options;
  agent::FrameReader reader{};
  detail::Vfs fs{};
  NetworkPolicy network = NetworkPolicy::deny_all();
  std::optional<Instant> born{};
  std::optional<Instant> welcome_at{};
  bool ended = false;
  int next_pid = 2;
  std::vector<Proc> procs{};
  std::map<std::uint32_t, Timeline> timelines{};
  std::map<std::uint32_t, Context> contexts{};
  std::map<std::uint32_t, PendingStart> waiting_stdin{};
  std::map<std::uint32_t, Upload> uploads{};
  Instant now{};

  explicit Impl(AgentPeerOptions o) : options(std::move(o)) {
    if (options.workdir.empty()) options.workdir = options.home;
    fs.make_dirs(options.home);
    fs.make_dirs(options.workdir);
  }

  std::string workdir() const { return options.workdir; }

  // ---- the session ----
  void frame(agent::Frame f, std::string& reply, bool& close) {
    switch (f.type) {
      case Type::Hello:
        welcome_at = now + options.welcome_delay;
        return welcome(reply);
      case Type::Ping:
        agent::append_frame(reply, Type::Pong, 0, f.payload);
        return;
      case Type::Shutdown:
        end(close);
        return;
      case Type::Start:
        return start(f.channel, f.payload, reply);
      case Type::Stdin:
        if (auto it = waiting_stdin.find(f.channel); it != waiting_stdin.end())
          it->second.stdin_data += f.payload;
        return;
      case Type::StdinClose:
        if (auto it = waiting_stdin.find(f.channel); it != waiting_stdin.end()) {
          PendingStart p = std::move(it->second);
          waiting_stdin.erase(it);
          launch(f.channel, p.start, std::move(p.stdin_data), reply);
        }
        return;
      case Type::Signal:
        return signal(f.channel, f.payload, reply);
      case Type::Credit:
        return;  // output is not paced here
      case Type::ReadFile:
        return read_file(f.channel, f.payload, reply);
      case Type::WriteFile:
        return write_file(f.channel, f.payload, reply);
      case Type::FileData:
        if (auto it = uploads.find(f.channel); it != uploads.end()) it->second.data += f.payload;
        return;
      case Type::FileEnd:
        return file_end(f.channel, reply);
      case Type::ListDir:
      case Type::Stat:
      case Type::MakeDir:
      case Type::Remove:
        return path_call(f.type, f.channel, f.payload, reply);
      case Type::ContextStart:
        return context_start(f.channel, reply);
      case Type::RunCode:
        return run_code(f.channel, f.payload, reply);
      case Type::EgressListen: {
        // The proxy "listens": nothing in the simulation connects to it, so no tunnel opens
        // (the egress rows need a real sandbox; see network.allow_list).
        auto e = agent::EgressListen::decode(f.payload);
        if (!e) {
          agent::append_frame(reply, Type::Failure, f.channel,
                              agent::Failure{0, e.problem().detail}.encode());
          return;
        }
        agent::append_frame(reply, Type::Done, f.channel, agent::Done{e.value().port}.encode());
        return;
      }
      case Type::ContextEnd:
        contexts.erase(f.channel);
        agent::append_frame(reply, Type::Done, f.channel, agent::Done{}.encode());
        return;
      default:
        agent::append_frame(
            reply, Type::Failure, 0,
            agent::Failure{0, "unexpected frame " + std::string(agent::to_string(f.type))}
                .encode());
        return;
    }
  }

  void end(bool& close) {
    ended = true;
    close = true;
    timelines.clear();
    procs.clear();
  }

  // ---- processes ----
  detail::ShellEnv shell_env(const std::vector<std::string>& extra, const std::string& cwd) {
    detail::ShellEnv env;
    env.fs = &fs;
    env.env = options.env;
    env.env["HOME"] = options.home;
    for (const auto& kv : extra) {
      const auto eq = kv.find('=');
      if (eq != std::string::npos) env.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    env.cwd = cwd;
    env.policy = &network;
    env.pid = next_pid++;
    env.find_processes = [this](const std::string& pattern) {
      std::vector<int> pids;
      for (const auto& p : procs)
        if (alive(p) && p.cmdline.find(pattern) != std::string::npos) pids.push_back(p.pid);
      return pids;
    };
    return env;
  }

  bool alive(const Proc& p) const { return !p.ended && (!p.ends_at || *p.ends_at > now); }

  void start(std::uint32_t channel, std::string_view payload, std::string& reply) {
    auto s = agent::Start::decode(payload);
    if (!s) {
      agent::append_frame(reply, Type::Failure, channel,
                          agent::Failure{0, s.problem().detail}.encode());
      return;
    }
    if (timelines.count(channel) != 0 || waiting_stdin.count(channel) != 0) {
      agent::append_frame(reply, Type::Failure, channel,
                          agent::Failure{0, "channel in use"}.encode());
      return;
    }
    if (s.value().stdin_open) {
      // The interpreters take stdin whole: the command runs once the host closes it.
      waiting_stdin[channel] = PendingStart{std::move(s.value()), {}};
      return;
    }
    launch(channel, s.value(), {}, reply);
  }

  void launch(std::uint32_t channel, const agent::Start& s, Bytes stdin_data, std::string& reply) {
    const std::string cwd = detail::Vfs::normalise("/", s.cwd.empty() ? workdir() : s.cwd);
    const detail::Node* dir = fs.get(cwd);
    if (s.argv.empty() || dir == nullptr || !dir->dir) {
      agent::Exit e;
      e.how = agent::Exit::How::StartFailed;
      e.value = ENOENT;
      e.message = s.argv.empty() ? "cannot run an empty command: No such file or directory"
                                 : "cannot change to " + cwd + ": No such file or directory";
      agent::append_frame(reply, Type::Exit, channel, e.encode());
      return;
    }
    detail::ShellEnv env = shell_env(s.env, cwd);
    env.stdin_data = std::move(stdin_data);
    detail::Outcome outcome = detail::run_argv(env, s.argv);
    agent::append_frame(reply, Type::Started, channel, agent::Started{env.pid}.encode());
    procs.push_back({env.pid, shell_join(s.argv), std::nullopt, channel, false});
    for (const auto& b : outcome.background)
      procs.push_back({next_pid++, b.what, now + b.ends_at, channel, false});
    Timeline t;
    add_output(t, channel, now, outcome);
    agent::Exit e;
    if (outcome.signal) {
      e.how = agent::Exit::How::Signalled;
      e.value = *outcome.signal;
    } else {
      e.value = outcome.exit_code;
    }
    t.frames.emplace_back(now + outcome.duration, agent::frame(Type::Exit, channel, e.encode()));
    timelines[channel] = std::move(t);
  }

  static void add_output(Timeline& t, std::uint32_t channel, Instant start,
                         const detail::Outcome& outcome, const std::string* skip = nullptr) {
    for (const auto& step : outcome.steps) {
      if (skip != nullptr && step.stream == StreamKind::Stderr && step.data == *skip) continue;
      const auto stream =
          step.stream == StreamKind::Stderr ? agent::StreamId::Stderr : agent::StreamId::Stdout;
      for (std::size_t at = 0; at < step.data.size(); at += agent::kChunk) {
        std::string bytes;
        agent::append_output(bytes, channel, stream,
                             std::string_view(step.data).substr(at, agent::kChunk));
        t.frames.emplace_back(start + step.at, std::move(bytes));
      }
    }
  }

  /// Ends the processes `channel` started: all of them for a tree kill, else its own.
  void end_procs(std::uint32_t channel, bool tree) {
    for (auto& p : procs)
      if (p.channel == channel && (tree || !p.ends_at)) p.ended = true;
    std::erase_if(procs, [this](const Proc& p) { return !alive(p); });
  }

  void signal(std::uint32_t channel, std::string_view payload, std::string& reply) {
    auto s = agent::Signal::decode(payload);
    if (!s) return;
    auto it = timelines.find(channel);
    if (it == timelines.end() || it->second.done()) {
      uploads.erase(channel);  // a transfer stopped: nothing more is said
      return;
    }
    Timeline& t = it->second;
    t.frames.resize(t.next);
    if (t.kind == Timeline::Kind::Exec) {
      end_procs(channel, s.value().tree);
      agent::Exit e;
      e.how = agent::Exit::How::Signalled;
      e.value = s.value().signo;
      agent::append_frame(reply, Type::Exit, channel, e.encode());
      timelines.erase(it);
      return;
    }
    Context& ctx = contexts[t.context];
    ctx.busy_until = now;
    agent::CodeDone done;
    if (s.value().signo == SIGKILL) {
      done.how = agent::CodeDone::How::Restarted;
      ctx.vars.clear();
    } else {
      agent::CodeEvent e;
      e.kind = agent::CodeEvent::Kind::Error;
      e.name = "KeyboardInterrupt";
      e.traceback = "Traceback (most recent call last):\nKeyboardInterrupt\n";
      agent::append_frame(reply, Type::CodeEvent, channel, e.encode());
    }
    agent::append_frame(reply, Type::CodeDone, channel, done.encode());
    timelines.erase(it);
  }

  // ---- files ----
  void read_file(std::uint32_t channel, std::string_view payload, std::string& reply) {
    auto r = agent::PathRequest::decode(payload);
    if (!r) return;
    const std::string path = detail::Vfs::normalise("/", r.value().path);
    const detail::Node* node = fs.get(path);
    if (node == nullptr || node->dir) {
      agent::append_frame(reply, Type::Failure, channel,
                          failure(node == nullptr ? ENOENT : EISDIR, r.value().path));
      return;
    }
    agent::append_frame(reply, Type::Entries, channel,
                        agent::Entries{{entry_of(path, *node)}}.encode());
    for (std::size_t at = 0; at < node->data.size(); at += agent::kChunk)
      agent::append_frame(reply, Type::FileData, channel,
                          std::string_view(node->data).substr(at, agent::kChunk));
    agent::append_frame(reply, Type::FileEnd, channel, {});
  }

  void write_file(std::uint32_t channel, std::string_view payload, std::string& reply) {
    auto r = agent::PathRequest::decode(payload);
    if (!r) return;
    Upload u;
    u.path = detail::Vfs::normalise("/", r.value().path);
    u.mode = r.value().mode & 07777;
    if ((r.value().flags & agent::PathRequest::kParents) != 0) {
      const detail::Node* blocker = nullptr;
      for (std::string p = parent_of(u.path); p != "/"; p = parent_of(p))
        if (const detail::Node* n = fs.get(p); n != nullptr && !n->dir) blocker = n;
      if (blocker == nullptr) fs.make_dirs(parent_of(u.path));
    }
    const detail::Node* node = fs.get(u.path);
    int error = 0;
    if (!fs.parent_is_dir(u.path)) {
      const detail::Node* parent = fs.get(parent_of(u.path));
      error = parent == nullptr ? ENOENT : ENOTDIR;
    } else if (node != nullptr && node->dir) {
      error = EISDIR;
    }
    if (error != 0) {
      u.failed = true;
      agent::append_frame(reply, Type::Failure, channel, failure(error, r.value().path));
    }
    uploads[channel] = std::move(u);
  }

  void file_end(std::uint32_t channel, std::string& reply) {
    auto it = uploads.find(channel);
    if (it == uploads.end()) return;
    Upload u = std::move(it->second);
    uploads.erase(it);
    if (u.failed) return;
    const std::uint64_t size = u.data.size();
    fs.put_file(u.path, std::move(u.data), u.mode);
    agent::append_frame(reply, Type::Done, channel, agent::Done{size}.encode());
  }

  void path_call(Type type, std::uint32_t channel, std::string_view payload, std::string& reply) {
    auto r = agent::PathRequest::decode(payload);
    if (!r) return;
    const std::string path = detail::Vfs::normalise("/", r.value().path);
    const detail::Node* node = fs.get(path);
    auto fail = [&](int error) {
      agent::append_frame(reply, Type::Failure, channel, failure(error, r.value().path));
    };
    auto done = [&](std::uint64_t size = 0) {
      agent::append_frame(reply, Type::Done, channel, agent::Done{size}.encode());
    };
    switch (type) {
      case Type::Stat:
        if (node == nullptr) return fail(ENOENT);
        agent::append_frame(reply, Type::Entries, channel,
                            agent::Entries{{entry_of(path, *node)}}.encode());
        return;
      case Type::ListDir: {
        if (node == nullptr) return fail(ENOENT);
        if (!node->dir) return fail(ENOTDIR);
        agent::Entries all;
        for (const auto& child : fs.children(path))
          all.entries.push_back(entry_of(child, *fs.get(child)));
        const std::uint64_t count = all.entries.size();
        if (count != 0) agent::append_frame(reply, Type::Entries, channel, all.encode());
        return done(count);
      }
      case Type::MakeDir:
        if ((r.value().flags & agent::PathRequest::kParents) != 0) {
          if (node != nullptr && !node->dir) return fail(EEXIST);
          fs.make_dirs(path);
          return done();
        }
        if (node != nullptr) return fail(EEXIST);
        if (!fs.parent_is_dir(path)) return fail(ENOENT);
        fs.make_dir(path);
        return done();
      case Type::Remove: {
        if (node == nullptr) return fail(ENOENT);
        const bool recursive = (r.value().flags & agent::PathRequest::kRecursive) != 0;
        if (node->dir && !recursive && fs.has_children(path)) return fail(ENOTEMPTY);
        (void)fs.remove(path, recursive);
        return done();
      }
      default:
        return;
    }
  }

  // ---- code ----
  void context_start(std::uint32_t channel, std::string& reply) {
    if (!options.python) {
      agent::append_frame(
          reply, Type::Failure, channel,
          agent::Failure{ENOENT, "python3 is not in this sandbox's image"}.encode());
      return;
    }
    contexts[channel] = Context{{}, now};
    agent::append_frame(reply, Type::Started, channel, agent::Started{next_pid++}.encode());
  }

  void run_code(std::uint32_t channel, std::string_view payload, std::string& reply) {
    auto rc = agent::RunCode::decode(payload);
    if (!rc) return;
    auto ctx = contexts.find(rc.value().context);
    if (ctx == contexts.end()) {
      agent::append_frame(
          reply, Type::Failure, channel,
          agent::Failure{ENOENT, "no code context " + std::to_string(rc.value().context)}.encode());
      return;
    }
    detail::ShellEnv env = shell_env(rc.value().env, workdir());
    env.python_vars = &ctx->second.vars;
    std::optional<std::string> value;
    detail::Outcome outcome = detail::run_python(env, rc.value().code, &value);
    // Cells of one context run one after another.
    const Instant start = std::max(now, ctx->second.busy_until);
    const Instant end = start + outcome.duration;
    ctx->second.busy_until = end;
    Timeline t;
    t.kind = Timeline::Kind::Cell;
    t.context = rc.value().context;
    // The traceback travels in the error event; the host shows it on stderr itself.
    add_output(t, channel, start, outcome,
               outcome.code_error ? &outcome.code_error->traceback : nullptr);
    if (value) {
      agent::CodeEvent e;
      e.bundle.emplace_back("text/plain", *value);
      t.frames.emplace_back(end, agent::frame(Type::CodeEvent, channel, e.encode()));
    }
    if (outcome.code_error) {
      agent::CodeEvent e;
      e.kind = agent::CodeEvent::Kind::Error;
      e.name = outcome.code_error->name;
      e.value = outcome.code_error->value;
      e.traceback = outcome.code_error->traceback;
      t.frames.emplace_back(end, agent::frame(Type::CodeEvent, channel, e.encode()));
    }
    t.frames.emplace_back(end, agent::frame(Type::CodeDone, channel, agent::CodeDone{}.encode()));
    timelines[channel] = std::move(t);
  }

  // ---- time ----
  std::optional<Instant> wake() const {
    if (ended) return std::nullopt;
    std::optional<Instant> at = welcome_at;
    auto consider = [&](Instant t) {
      if (!at || t < *at) at = t;
    };
    if (born && options.lifetime) consider(*born + *options.lifetime);
    for (const auto& [channel, t] : timelines)
      if (!t.done()) consider(t.frames[t.next].first);
    return at;
  }

  void welcome(std::string& reply) {
    if (!welcome_at || *welcome_at > now) return;
    welcome_at.reset();
    agent::Welcome w;
    w.agent = "sandboxio-agent (simulated)";
    w.pid = 1;
    if (options.python) {
      w.features = agent::kPython3;
      w.python = "/usr/bin/python3";
    }
    agent::append_frame(reply, Type::Welcome, 0, w.encode());
  }

  void release(std::string& reply, bool& close) {
    if (ended) return;
    welcome(reply);
    if (born && options.lifetime && now >= *born + *options.lifetime) return end(close);
    // Everything due, in the order of its instant (one channel's frames keep their order).
    for (;;) {
      std::uint32_t best = 0;
      std::optional<Instant> at;
      for (const auto& [channel, t] : timelines) {
        if (t.done() || t.frames[t.next].first > now) continue;
        if (!at || t.frames[t.next].first < *at) {
          at = t.frames[t.next].first;
          best = channel;
        }
      }
      if (!at) break;
      Timeline& t = timelines[best];
      reply += t.frames[t.next++].second;
      if (t.done()) {
        if (t.kind == Timeline::Kind::Exec) end_procs(best, false);
        timelines.erase(best);
      }
    }
  }
};

AgentPeer::AgentPeer(AgentPeerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
AgentPeer::~AgentPeer() = default;

void AgentPeer::on_bytes(std::string_view data, Instant now, std::string& reply, bool& close) {
  Impl& s = *impl_;
  if (s.ended) return;
  s.now = std::max(s.now, now);
  if (!s.born) s.born = s.now;
  s.release(reply, close);
  std::vector<agent::Frame> frames;
  s.reader.feed(data, [&](agent::Frame f) { frames.push_back(std::move(f)); });
  for (auto& f : frames) {
    if (s.ended) return;
    s.frame(std::move(f), reply, close);
  }
  if (s.reader.error()) {
    agent::append_frame(reply, Type::Failure, 0,
                        agent::Failure{0, s.reader.error()->detail}.encode());
    s.end(close);
    return;
  }
  s.release(reply, close);
}

std::optional<Instant> AgentPeer::wake() const {
  return impl_->wake();
}

void AgentPeer::on_wake(Instant now, std::string& reply, bool& close) {
  impl_->now = std::max(impl_->now, now);
  impl_->release(reply, close);
}

std::vector<std::string> AgentPeer::processes() const {
  std::vector<std::string> out;
  for (const auto& p : impl_->procs)
    if (impl_->alive(p)) out.push_back(p.cmdline);
  return out;
}

}  // namespace sandboxio::fake
