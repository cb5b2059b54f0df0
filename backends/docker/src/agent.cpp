// docker:// through sandboxio-agent (?agent=on). The create uploads the agent's static binary
// into the container before start (the archive API, so remote engines work too), makes it the
// container's entry point and attaches to its stdin, stdout and stderr: that one stream is the
// owner lease and carries the agent protocol both ways (stdout demultiplexed as usual). With
// outlive_owner the agent outlives that stream, and a later connect() reaches it through a
// bridge session: one exec of `sandboxio-agent --bridge`, relayed to the agent's root-only
// socket, carries the same protocol.
// States:
//   create:  created -> PUT .../archive (the agent) -> attach (the lease) -> start
//            -> Hello on the lease -> Welcome -> Done(SandboxInfo)
//   connect: GET .../json (the agent label) -> POST .../exec (--bridge) -> POST /exec/ID/start
//            (101) -> Hello -> Welcome -> Done(SandboxInfo); no bridge session (a plain reply,
//            or the bridge ends before the Welcome) -> Done without the agent (exec path)
//   direct:  (a create, after the Welcome; a connect, from its GET .../json) the init's pid ->
//            connect /proc/PID/root/.sandboxio/run/agent.sock, its listener checked to be that
//            pid -> Hello -> Welcome -> Done; before the Welcome, any failure -> Done over the
//            attach stream (create) or a bridge exec (connect). After it, every frame goes
//            there; its end is the agent's, and so the container's.
//   command: Start on a new channel [-> Stdin, StdinClose] -> Output... (credit granted as the
//            consumer takes it) -> Exit -> Done(ExecResult); a timeout or cancel sends
//            Signal(tree, SIGKILL) and the Exit that follows carries the forced termination
//   files:   ReadFile -> FileData... FileEnd | WriteFile, FileData..., FileEnd -> Done |
//            ListDir -> Entries... Done | Remove -> Done; any of them -> Failure (errno)
// When the stream ends, the container has ended: every call fails as SandboxGone.
#include <csignal>

#include "machine.hpp"
#include "sandboxio/codec/json.hpp"

namespace sandboxio::docker::detail {

namespace {

/// Bytes of a write_file per FileData frame.
constexpr std::size_t kWriteChunk = agent::kChunk;

Problem agent_problem(const std::string& what) {
  return Problem{errc::RemoteProtocolViolation, "sandboxio-agent: " + what,
                 "The agent in the container and this library disagree; use the same sandboxio "
                 "version for both, or docker://IMAGE?agent=off."};
}

}  // namespace

std::optional<Problem> DockerMachine::take_welcome(std::string_view payload) {
  auto w = agent::Welcome::decode(payload);
  if (!w) return w.problem();
  if (w.value().version != agent::kVersion) {
    return agent_problem("protocol version " + std::to_string(w.value().version));
  }
  welcome_ = std::move(w).value();
  agent_ready_ = true;
  return std::nullopt;
}

void DockerMachine::agent_serves(OpId id, Instant now) {
  direct_for_ = 0;
  agent_create_ = 0;
  if (alive(id)) complete(id, docker_info(SandboxState::Running), now);
}

void DockerMachine::upload_agent(OpId id, Instant now) {
  // On a read-only root the agent's directory is a volume of its own (create_body), and the
  // archive lands in it; elsewhere the archive makes the directory.
  const bool into_volume = config_.read_only;
  std::vector<tar::Entry> dirs;
  if (!into_volume) {
    tar::Entry dir;
    dir.name = std::string(kAgentDir.substr(1)) + "/";
    dir.type = FileType::Directory;
    dir.mode = 0755;
    dirs.push_back(std::move(dir));
  }
  tar::Entry file;
  file.name = std::string(kAgentPath.substr(into_volume ? kAgentDir.size() + 1 : 1));
  file.size = config_.agent_binary->size();
  file.mode = 0755;
  auto problem = put_archive(
      id, dirs, file, *config_.agent_binary,
      [this, id](Result<Reply> r, Instant t) {
        if (create_abandoned(id, t)) return;
        if (!r) {
          return remove_after_failed_start(id, "uploading the agent: " + r.problem().detail, t);
        }
        if (r.value().status != 200) {
          return remove_after_failed_start(id, "uploading the agent: " + r.value().message(), t);
        }
        attach_lease(id, t);
      },
      into_volume ? kAgentDir : std::string_view("/"));
  if (problem) remove_after_failed_start(id, "the agent's archive: " + problem->detail, now);
}

// connect() to a sandbox whose init is the agent: one exec of `sandboxio-agent --bridge` (as
// root: the agent's socket admits nobody else) relays a session to the agent that has served
// the sandbox all along, so commands, files and code contexts go through it as for the owner.
void DockerMachine::open_bridge(OpId id, Instant) {
  call(id, "POST", path("/containers/" + container_ + "/exec"),
       exec_body({std::string(kAgentPath), "--bridge"}, {}, {}, /*attach_stdin=*/true, {}, "0"),
       [this, id](Result<Reply> r, Instant t) {
         if (!alive(id)) return;
         if (!r) return void(fail(id, r.problem(), t));
         if (r.value().status == 404 || r.value().status == 409) {
           return void(fail(id, gone_problem(), t));
         }
         auto doc = json::parse(r.value().body);
         const auto exec_id = doc ? doc.value().string_at("Id") : std::nullopt;
         if (r.value().status != 201 || !exec_id) return bridge_unavailable(id, t);
         start_bridge(id, std::string(*exec_id), t);
       });
}

void DockerMachine::start_bridge(OpId id, const std::string& exec_id, Instant) {
  lease_ =
      upgrade(id, path("/exec/" + exec_id + "/start"), std::string(kExecStart),
              [this, id](Result<Reply> r, Instant t) {
                if (!alive(id)) return;
                if (!r || r.value().status != 101) {  // a plain reply: the engine did not start it
                  lease_ = 0;                         // this exchange is over: nothing to drop
                  return bridge_unavailable(id, t);
                }
                agent_hello(id, t);
              });
  bridge_ = true;
  config_.agent = true;  // the stream speaks the agent's protocol
}

void DockerMachine::bridge_unavailable(OpId id, Instant now) {
  // An agent that cannot take bridge sessions (it does not run as root, or an older one): the
  // exec path serves this handle, as with ?agent=off, and info() says so (no agent).
  drop_lease();
  bridge_ = false;
  config_.agent = false;
  agent_create_ = 0;
  agent_stderr_.clear();
  if (alive(id)) complete(id, docker_info(SandboxState::Running), now);
}

void DockerMachine::agent_hello(OpId id, Instant) {
  agent_create_ = id;
  agent_send(agent::Type::Hello, 0, agent::Hello{}.encode());
}

void DockerMachine::agent_send(agent::Type type, std::uint32_t channel, std::string_view payload) {
  // A command starts only once every command being killed has exited, so that nothing it
  // runs (a probe with pgrep, say) sees a process that was already told to die.
  if (type == agent::Type::Start && !agent_killing_.empty()) held_channels_.insert(channel);
  if (held_channels_.contains(channel)) {
    held_.push_back(agent::frame(type, channel, payload));
    return;
  }
  if (const ConnId to = agent_conn(); to != 0)
    out_.push(request::Send{to, agent::frame(type, channel, payload)});
}

void DockerMachine::agent_killed(std::uint32_t channel) {
  if (agent_killing_.erase(channel) == 0 || !agent_killing_.empty()) return;
  held_channels_.clear();
  if (const ConnId to = agent_conn(); to != 0) {
    for (Bytes& frame : held_)
      out_.push(request::Send{to, std::move(frame)});
  }
  held_.clear();
}

void DockerMachine::find_direct(OpId id, Instant) {
  direct_for_ = id;
  call(id, "GET", path("/containers/" + container_ + "/json"), {},
       [this, id](Result<Reply> r, Instant t) {
         if (!alive(id)) return;
         std::int64_t pid = 0;
         if (r && r.value().status == 200) {
           auto doc = json::parse(r.value().body);
           const json::Value* state = doc ? doc.value().find("State") : nullptr;
           pid = state ? state->int_at("Pid").value_or(0) : 0;
         }
         if (pid > 0) return open_direct(id, pid, t);
         agent_serves(id, t);
       });
}

void DockerMachine::open_direct(OpId id, std::int64_t pid, Instant) {
  direct_for_ = id;
  Endpoint socket;
  socket.kind = Endpoint::Kind::Unix;
  socket.address = "/proc/" + std::to_string(pid) + "/root" + std::string(agent::kSocketPath);
  socket.peer_pid = pid;
  direct_ = http_.start(id, socket, {agent::frame(agent::Type::Hello, 0, agent::Hello{}.encode())},
                        {}, "the agent's socket " + socket.address);
  http_.find(direct_)->upgraded = true;  // no HTTP on it: the agent's frames both ways
}

std::size_t DockerMachine::direct_bytes(std::string_view data, Instant now) {
  std::vector<agent::Frame> frames;
  direct_reader_.feed(data, [&](agent::Frame f) { frames.push_back(std::move(f)); });
  for (auto& f : frames) {
    if (f.channel != 0 || f.type != agent::Type::Welcome || direct_ready_) {
      agent_frame(std::move(f), now);
      continue;
    }
    if (take_welcome(f.payload)) {
      direct_ended(std::nullopt, now);  // not an agent this library speaks with: the other way
      return data.size();
    }
    direct_ready_ = true;
    config_.agent = true;
    agent_serves(direct_for_, now);
  }
  if (direct_ != 0 && direct_reader_.error()) direct_ended(*direct_reader_.error(), now);
  return data.size();
}

void DockerMachine::direct_ended(std::optional<Problem> malformed, Instant now) {
  if (direct_ != 0) http_.drop(direct_);
  direct_ = 0;
  direct_reader_ = agent::FrameReader{};
  if (direct_ready_) {
    direct_ready_ = false;
    if (malformed) {  // as on the attach stream: the agent and this library disagree
      agent_lost(*malformed, now);
      return fail_machine(std::move(*malformed), now);
    }
    // The agent closes a session only on a malformed frame (it says so first, and the
    // machine has failed then): otherwise its socket ends because the agent, the container's
    // init, has ended, and the container with it. The attach stream says the same a moment
    // later, through the engine.
    gone_ = true;
    return agent_lost(gone_problem(), now);
  }
  const OpId id = direct_for_;
  if (agent_ready_ || !alive(id)) return agent_serves(id, now);  // create: the attach stream
  direct_for_ = 0;
  agent_create_ = 0;
  open_bridge(id, now);  // connect: the exec's way in
}

std::uint32_t DockerMachine::agent_call(AgentCall call) {
  const std::uint32_t channel = ++next_channel_;
  calls_.emplace(channel, std::move(call));
  return channel;
}

std::size_t DockerMachine::lease_bytes(std::string_view data, Instant now) {
  if (!config_.agent) return data.size();  // the plain lease: nothing it says matters
  // The agent sends no more than the credit it was given, so the stream is always read whole:
  // a slow consumer of one command never holds up the others.
  std::vector<agent::Frame> frames;
  lease_demux_.feed(data, [&](docker::FrameType type, std::string_view piece) {
    if (type == docker::FrameType::Stdout) {
      agent_reader_.feed(piece, [&](agent::Frame f) { frames.push_back(std::move(f)); });
    } else if (agent_stderr_.size() < 4096) {
      agent_stderr_.append(piece.substr(0, 4096 - agent_stderr_.size()));
    }
  });
  for (auto& f : frames)
    agent_frame(std::move(f), now);
  if (const auto& e = lease_demux_.error() ? lease_demux_.error() : agent_reader_.error()) {
    Problem p = *e;
    drop_lease();  // the container ends with its lease
    gone_ = true;
    agent_lost(p, now);
    fail_machine(std::move(p), now);
  }
  return data.size();
}

void DockerMachine::agent_lost(Problem problem, Instant now) {
  if (!config_.agent) return;
  agent_ready_ = false;
  if (alive(agent_create_)) {
    const std::string why =
        agent_stderr_.empty() ? problem.detail : problem.detail + " (agent: " + agent_stderr_ + ")";
    // An engine of another architecture cannot run the agent built for this host's.
    const bool foreign = agent_stderr_.find("exec format error") != std::string::npos;
    fail(agent_create_,
         Problem{errc::CreateFailed, "the agent did not answer: " + why,
                 foreign ? "This engine cannot run the agent built for this machine's "
                           "architecture: use docker://IMAGE?agent=off, or an agent built for "
                           "the engine's (SBX_AGENT)."
                         : "docker://IMAGE?agent=off runs without it; `sandboxio doctor` checks "
                           "the engine."},
         now);
  }
  auto calls = std::move(calls_);
  calls_.clear();
  contexts_.clear();
  agent_killing_.clear();  // what was held goes nowhere: its calls end below
  held_channels_.clear();
  held_.clear();
  for (auto& [channel, call] : calls) {
    Op* op = find_op(call.op);
    if (!op || call.kind == AgentCall::Kind::Ignore) continue;
    if (call.kind == AgentCall::Kind::Context && op->kind == OpState::Kind::Code) continue;
    const bool runs = call.kind == AgentCall::Kind::Command || call.kind == AgentCall::Kind::Code;
    if (runs && op->forced) {
      ExecResult r;
      r.duration = now - op->exec_started;
      op->output.fill(r);
      r.termination = *op->forced;
      if (op->cancelled) {
        cancelled(call.op, now);
      } else {
        complete(call.op, std::move(r), now);
      }
    } else if (runs && gone_) {
      ExecResult r;
      r.duration = now - op->exec_started;
      op->output.fill(r);
      r.termination = Termination::SandboxGone;
      complete(call.op, std::move(r), now);
    } else {
      fail(call.op, gone_ ? gone_problem() : problem, now);
    }
  }
}

void DockerMachine::agent_frame(agent::Frame f, Instant now) {
  using agent::Type;
  if (f.channel == 0) {
    if (f.type == Type::Welcome) {
      if (auto wrong = take_welcome(f.payload)) return fail_machine(std::move(*wrong), now);
      if (alive(agent_create_) && !bridge_ && may_go_direct() && direct_for_ == 0) {
        return find_direct(agent_create_, now);  // agent_create_ until that is settled
      }
      if (alive(agent_create_)) agent_serves(agent_create_, now);
      return;
    }
    if (f.type == Type::Failure) {
      auto failure = agent::Failure::decode(f.payload);
      return fail_machine(agent_problem(failure ? failure.value().message : "a session failure"),
                          now);
    }
    return;  // Pong, Log
  }
  if (f.type == Type::Exit) agent_killed(f.channel);  // also for a call already forgotten
  auto it = calls_.find(f.channel);
  if (it == calls_.end()) return;  // a call that ended (cancelled): its last frames
  AgentCall& call = it->second;
  if (call.kind == AgentCall::Kind::Ignore) {
    if (f.type == Type::Done || f.type == Type::Failure) calls_.erase(it);
    return;
  }
  // A context whose create_context() went away is ended once it has started.
  if (call.kind == AgentCall::Kind::Context) return context_frame(f.channel, call, f, now);
  Op* op = find_op(call.op);
  if (!op) {
    calls_.erase(it);
    return;
  }
  if (call.kind == AgentCall::Kind::Code) return code_frame(f.channel, call, f, now);
  const OpId id = call.op;
  auto malformed = [&](const Problem& p) {
    calls_.erase(f.channel);
    fail(id, p, now);
  };
  if (call.kind == AgentCall::Kind::Command) {
    if (f.type == Type::Started) return;
    if (f.type == Type::Output) {
      auto o = agent::Output::decode(f.payload);
      if (!o) return malformed(o.problem());
      const std::size_t n = o.value().data.size();
      auto overflow = op->output.take(
          id, o.value().stream == agent::StreamId::Stderr ? StreamKind::Stderr : StreamKind::Stdout,
          o.value().data, out_);
      if (overflow) {
        agent_kill(id, Termination::Cancelled, now);
        calls_.erase(f.channel);
        return void(fail(id, std::move(*overflow), now));
      }
      // run() keeps what it takes: the agent may send more at once. A stream is credited as
      // its consumer takes the output (handle_consumed).
      if (!op->output.streaming)
        agent_send(Type::Credit, f.channel, agent::Credit{static_cast<std::uint32_t>(n)}.encode());
      return;
    }
    if (f.type == Type::Exit) {
      auto e = agent::Exit::decode(f.payload);
      if (!e) return malformed(e.problem());
      return agent_exit(f.channel, e.value(), now);
    }
    if (f.type == Type::Failure) {
      auto failure = agent::Failure::decode(f.payload);
      return malformed(agent_problem(failure ? failure.value().message : "a failed command"));
    }
    return malformed(agent_problem("an unexpected " + std::string(to_string(f.type))));
  }
  if (f.type == Type::Failure) {
    auto failure = agent::Failure::decode(f.payload);
    if (!failure) return malformed(failure.problem());
    return malformed(failure.value().problem(call.path));
  }
  // read_file() keeps at most kReadFileLimit: the agent stops sending, the call fails.
  auto too_large = [&] {
    agent_send(Type::Signal, f.channel, agent::Signal{false, 0}.encode());
    malformed(Problem{errc::OutputLimitExceeded,
                      call.path + " is larger than read_file() takes (2 GiB)",
                      "Stream it with stream({\"cat\", path}) instead."});
  };
  switch (call.kind) {
    case AgentCall::Kind::Read:
      if (f.type == Type::Entries) {  // the file as the agent opened it: its size, first
        auto opened = agent::Entries::decode(f.payload);
        if (!opened) return malformed(opened.problem());
        if (opened.value().entries.size() != 1 || !call.data.empty())
          return malformed(agent_problem("a read that does not start with its one entry"));
        const std::uint64_t size = opened.value().entries[0].size;
        if (size > kReadFileLimit) return too_large();
        // Address space only until written: a size that lies costs nothing resident, and the
        // limit above holds. A file still growing may need more.
        call.data.reserve(static_cast<std::size_t>(size));
        return;
      }
      if (f.type == Type::FileData) {
        if (call.data.size() + f.payload.size() > kReadFileLimit) return too_large();  // grew
        call.data += f.payload;
        agent_send(Type::Credit, f.channel,
                   agent::Credit{static_cast<std::uint32_t>(f.payload.size())}.encode());
        return;
      }
      if (f.type == Type::FileEnd) {
        Bytes data = std::move(call.data);
        calls_.erase(it);
        return complete(id, std::move(data), now);
      }
      break;
    case AgentCall::Kind::List:
      if (f.type == Type::Entries) {
        auto entries = agent::Entries::decode(f.payload);
        if (!entries) return malformed(entries.problem());
        for (const auto& e : entries.value().entries) {
          FileInfo info;
          info.name = e.name;
          info.path = (call.path == "/" ? "" : call.path) + "/" + e.name;
          info.type = e.kind == agent::Entry::Kind::File        ? FileType::File
                      : e.kind == agent::Entry::Kind::Directory ? FileType::Directory
                      : e.kind == agent::Entry::Kind::Symlink   ? FileType::Symlink
                                                                : FileType::Other;
          info.size = e.kind == agent::Entry::Kind::File ? e.size : 0;
          info.mode = e.mode;
          info.mtime_unix = e.mtime;
          call.entries.push_back(std::move(info));
        }
        return;
      }
      if (f.type == Type::Done) {
        auto entries = std::move(call.entries);
        calls_.erase(it);
        return complete(id, std::move(entries), now);
      }
      break;
    case AgentCall::Kind::Write:
    case AgentCall::Kind::Remove:
      if (f.type == Type::Done) {
        calls_.erase(it);
        return complete(id, std::monostate{}, now);
      }
      break;
    case AgentCall::Kind::Command:
    case AgentCall::Kind::Context:
    case AgentCall::Kind::Code:
    case AgentCall::Kind::Ignore:
      break;
  }
  malformed(agent_problem("an unexpected " + std::string(to_string(f.type)) + " for " + call.path));
}

void DockerMachine::handle_consumed(OpId id, std::size_t bytes, Instant now) {
  MachineCore::handle_consumed(id, bytes, now);
  const Op* op = find_op(id);
  if (op && op->channel != 0 && op->output.streaming && calls_.contains(op->channel)) {
    agent_send(agent::Type::Credit, op->channel,
               agent::Credit{static_cast<std::uint32_t>(bytes)}.encode());
  }
}

void DockerMachine::agent_start(OpId id, Command command, bool streaming, Instant now) {
  Op& op = *find_op(id);
  AgentCall call;
  call.kind = AgentCall::Kind::Command;
  call.op = id;
  call.wall_started = wall_at(now);
  const std::uint32_t channel = agent_call(std::move(call));
  op.channel = channel;
  agent::Start s;
  s.argv = std::move(command.argv);
  for (const auto& v : command.env.vars())
    s.env.push_back(v.name + "=" + v.value);
  s.cwd =
      !command.workdir.empty() ? command.workdir : (options_ ? options_->workdir : std::string());
  s.stdin_open = !command.stdin_data.empty();
  s.window =
      streaming
          ? static_cast<std::uint32_t>(std::min<std::size_t>(limits_.stream_buffer, UINT32_MAX))
          : agent::kDefaultWindow;
  agent_send(agent::Type::Start, channel, s.encode());
  if (s.stdin_open) {
    std::string_view data = command.stdin_data;
    while (!data.empty()) {
      const std::size_t n = std::min<std::size_t>(data.size(), kWriteChunk);
      agent_send(agent::Type::Stdin, channel, data.substr(0, n));
      data.remove_prefix(n);
    }
    agent_send(agent::Type::StdinClose, channel);
  }
}

void DockerMachine::agent_kill(OpId id, Termination why, Instant) {
  Op* op = find_op(id);
  if (!op) return;
  op->deadline.reset();
  if (op->forced) return;
  op->forced = why;
  // The agent kills every process the command started (it follows them through setsid,
  // double forks and cleared environments); the Exit that follows ends the operation.
  if (!held_channels_.contains(op->channel)) agent_killing_.insert(op->channel);
  agent_send(agent::Type::Signal, op->channel, agent::Signal{true, SIGKILL}.encode());
}

void DockerMachine::agent_exit(std::uint32_t channel, const agent::Exit& exit, Instant now) {
  auto node = calls_.extract(channel);
  Op* found = find_op(node.mapped().op);
  if (!found) return;
  Op& op = *found;
  const OpId id = node.mapped().op;
  ExecResult r;
  if (exit.how == agent::Exit::How::StartFailed) {
    // As a shell says it: 127 for a program that is not there, 126 for one that cannot run.
    const std::string text = "sandboxio-agent: " + exit.message + "\n";
    (void)op.output.take(id, StreamKind::Stderr, text, out_);
    r.exit_code = exit.value == ENOENT ? 127 : 126;
  } else if (exit.how == agent::Exit::How::Signalled) {
    r.exit_code = 128 + exit.value;  // what a shell would report; `signal` says which
    r.signal = exit.value;
  } else {
    r.exit_code = exit.value;  // exactly as waitpid said: 200 is an exit code, not a signal
  }
  r.duration = now - op.exec_started;
  op.output.fill(r);
  if (op.forced) {
    r.termination = *op.forced;
  } else if (exit.how == agent::Exit::How::Signalled && exit.value == SIGKILL &&
             (gone_ || (expires_at_ && now >= *expires_at_))) {
    // The agent ends every command when the sandbox's lifetime is over (its clock started
    // after expires_at_ was fixed, so it never fires before it): the sandbox went away.
    r.termination = Termination::SandboxGone;
  } else if (exit.how == agent::Exit::How::Signalled) {
    r.termination = Termination::Signalled;
  }
  auto finish = [this, id](ExecResult result, Instant t) {
    const Op* o = find_op(id);
    if (!o) return;
    if (o->cancelled) return cancelled(id, t);
    complete(id, std::move(result), t);
  };
  const auto wall = node.mapped().wall_started;
  if (!op.forced && exit.how == agent::Exit::How::Signalled && exit.value == SIGKILL && wall &&
      wall_at(now)) {
    // A SIGKILL nobody here sent: the kernel's out-of-memory killer, or something in the
    // sandbox. The engine's event log for the command's window says which.
    const std::string filters =
        R"({"container":[")" + container_ + R"("],"type":["container"],"event":["oom"]})";
    const std::string target =
        path("/events?since=" + api_time(*wall - 1s) + "&until=" + api_time(*wall_at(now) + 1s) +
             "&filters=" + percent_encode(filters));
    call(id, "GET", target, {}, [finish, r = std::move(r)](Result<Reply> reply, Instant t) mutable {
      if (reply && reply.value().status == 200 &&
          reply.value().body.find("\"oom\"") != std::string::npos) {
        r.termination = Termination::OutOfMemory;
      }
      finish(std::move(r), t);
    });
    return;
  }
  finish(std::move(r), now);
}

void DockerMachine::agent_file(OpId id, AgentCall::Kind kind, agent::Type type,
                               agent::PathRequest request, Instant) {
  AgentCall call;
  call.kind = kind;
  call.op = id;
  call.path = request.path;
  const std::uint32_t channel = agent_call(std::move(call));
  find_op(id)->channel = channel;
  agent_send(type, channel, request.encode());
}

}  // namespace sandboxio::docker::detail
