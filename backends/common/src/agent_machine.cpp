// The host side of sandboxio-agent's protocol (see agent_machine.hpp): sessions, commands and
// files. Code contexts are in agent_code.cpp.
#include "sandboxio/backend/agent_machine.hpp"

#include <csignal>

namespace sandboxio::backend {

namespace {

/// Bytes of a write_file per FileData frame.
constexpr std::size_t kWriteChunk = agent::kChunk;

Problem agent_problem(const std::string& what) {
  return Problem{errc::RemoteProtocolViolation, "sandboxio-agent: " + what,
                 "The agent in the sandbox and this library disagree: use the same sandboxio "
                 "version for both."};
}

}  // namespace

Problem AgentMachine::agent_start_problem(const std::string& why) const {
  return Problem{errc::CreateFailed, "the agent did not answer: " + why,
                 "`sandboxio doctor` checks what " + std::string(scheme()) + ":// needs."};
}

void AgentMachine::agent_hello(OpId id) {
  agent_create_ = id;
  agent_send(agent::Type::Hello, 0, agent::Hello{}.encode());
}

std::optional<Problem> AgentMachine::take_welcome(std::string_view payload) {
  auto w = agent::Welcome::decode(payload);
  if (!w) return w.problem();
  if (w.value().version != agent::kVersion) {
    return agent_problem("protocol version " + std::to_string(w.value().version));
  }
  welcome_ = std::move(w).value();
  agent_ready_ = true;
  return std::nullopt;
}

void AgentMachine::agent_send(agent::Type type, std::uint32_t channel, std::string_view payload) {
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

void AgentMachine::agent_killed(std::uint32_t channel) {
  if (agent_killing_.erase(channel) == 0 || !agent_killing_.empty()) return;
  held_channels_.clear();
  if (const ConnId to = agent_conn(); to != 0) {
    for (Bytes& frame : held_)
      out_.push(request::Send{to, std::move(frame)});
  }
  held_.clear();
}

std::uint32_t AgentMachine::agent_call(AgentCall call) {
  const std::uint32_t channel = ++next_channel_;
  calls_.emplace(channel, std::move(call));
  return channel;
}

void AgentMachine::agent_lost(Problem problem, Instant now) {
  agent_ready_ = false;
  egress_lost(now);
  if (alive(agent_create_)) {
    const std::string why =
        agent_stderr_.empty() ? problem.detail : problem.detail + " (agent: " + agent_stderr_ + ")";
    fail(agent_create_, agent_start_problem(why), now);
  }
  auto calls = std::move(calls_);
  calls_.clear();
  contexts_.clear();
  agent_killing_.clear();  // what was held goes nowhere: its calls end below
  held_channels_.clear();
  held_.clear();
  for (auto& [channel, call] : calls) {
    if (call.kind == AgentCall::Kind::Probe) {
      if (call.probe) call.probe(std::nullopt, now);
      continue;
    }
    Op* op = find_op(call.op);
    if (!op || call.kind == AgentCall::Kind::Ignore) continue;
    if (call.kind == AgentCall::Kind::Context && op->kind == AgentOpState::Kind::Code) continue;
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

void AgentMachine::agent_frame(agent::Frame f, Instant now) {
  using agent::Type;
  if (f.channel == 0) {
    if (f.type == Type::Welcome) {
      if (auto wrong = take_welcome(f.payload)) return fail_machine(std::move(*wrong), now);
      // The create completes once the proxy listens: the first command can use it.
      if (egress_wanted()) return egress_listen([this](Instant t) { agent_welcomed(t); });
      return agent_welcomed(now);
    }
    if (f.type == Type::Failure) {
      auto failure = agent::Failure::decode(f.payload);
      return fail_machine(agent_problem(failure ? failure.value().message : "a session failure"),
                          now);
    }
    return;  // Pong, Log
  }
  if ((f.channel & agent::kAgentChannel) != 0) return egress_frame(f, now);
  if (f.type == Type::Exit) agent_killed(f.channel);  // also for a call already forgotten
  auto it = calls_.find(f.channel);
  if (it == calls_.end()) return;  // a call that ended (cancelled): its last frames
  AgentCall& call = it->second;
  if (call.kind == AgentCall::Kind::Egress) {
    if (f.type != Type::Done && f.type != Type::Failure) return;
    AgentCall done = std::move(call);
    calls_.erase(it);
    return egress_listened(f, done, now);
  }
  if (call.kind == AgentCall::Kind::Ignore) {
    if (f.type == Type::Done || f.type == Type::Failure) calls_.erase(it);
    return;
  }
  // A context whose create_context() went away is ended once it has started.
  if (call.kind == AgentCall::Kind::Context) return context_frame(f.channel, call, f, now);
  if (call.kind == AgentCall::Kind::Probe) {
    if (f.type == Type::Entries) return;
    if (f.type == Type::FileData) {
      if (call.data.size() < kProbeLimit)
        call.data += f.payload.substr(0, kProbeLimit - call.data.size());
      agent_send(Type::Credit, f.channel,
                 agent::Credit{static_cast<std::uint32_t>(f.payload.size())}.encode());
      return;
    }
    auto done = std::move(call.probe);
    std::optional<Bytes> data;
    if (f.type == Type::FileEnd) data = std::move(call.data);
    calls_.erase(it);
    if (done) done(std::move(data), now);
    return;
  }
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
    case AgentCall::Kind::Probe:
    case AgentCall::Kind::Egress:
      break;
  }
  malformed(agent_problem("an unexpected " + std::string(to_string(f.type)) + " for " + call.path));
}

void AgentMachine::handle_consumed(OpId id, std::size_t bytes, Instant now) {
  MachineCore::handle_consumed(id, bytes, now);
  const Op* op = find_op(id);
  if (op && op->channel != 0 && op->output.streaming && calls_.contains(op->channel)) {
    agent_send(agent::Type::Credit, op->channel,
               agent::Credit{static_cast<std::uint32_t>(bytes)}.encode());
  }
}

void AgentMachine::agent_start(OpId id, Command command, bool streaming, Instant now) {
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

void AgentMachine::agent_kill(OpId id, Termination why, Instant) {
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

void AgentMachine::agent_exit(std::uint32_t channel, const agent::Exit& exit, Instant now) {
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
  const auto wall = node.mapped().wall_started;
  if (!op.forced && exit.how == agent::Exit::How::Signalled && exit.value == SIGKILL && wall &&
      explain_kill(id, r, *wall, now)) {
    return;  // a SIGKILL nobody here sent: the backend looks for why, then finishes it
  }
  finish_command(id, std::move(r), now);
}

void AgentMachine::finish_command(OpId id, ExecResult result, Instant now) {
  const Op* o = find_op(id);
  if (!o) return;
  if (o->cancelled) return cancelled(id, now);
  complete(id, std::move(result), now);
}

void AgentMachine::agent_file(OpId id, AgentCall::Kind kind, agent::Type type,
                              agent::PathRequest request, Instant) {
  AgentCall call;
  call.kind = kind;
  call.op = id;
  call.path = request.path;
  const std::uint32_t channel = agent_call(std::move(call));
  find_op(id)->channel = channel;
  agent_send(type, channel, request.encode());
}

void AgentMachine::agent_probe(OpId id, std::string path,
                               std::function<void(std::optional<Bytes>, Instant)> done) {
  AgentCall call;
  call.kind = AgentCall::Kind::Probe;
  call.op = id;
  call.path = path;
  call.probe = std::move(done);
  const std::uint32_t channel = agent_call(std::move(call));
  agent::PathRequest request;
  request.path = std::move(path);
  agent_send(agent::Type::ReadFile, channel, request.encode());
}

void AgentMachine::agent_write(OpId id, std::string path, Bytes data, Instant now) {
  agent::PathRequest request;
  request.path = std::move(path);
  request.flags = agent::PathRequest::kParents;  // as every backend's write_file: parents made
  agent_file(id, AgentCall::Kind::Write, agent::Type::WriteFile, request, now);
  const std::uint32_t channel = find_op(id)->channel;
  std::string_view rest = data;
  while (!rest.empty()) {
    const std::size_t n = std::min(rest.size(), kWriteChunk);
    agent_send(agent::Type::FileData, channel, rest.substr(0, n));
    rest.remove_prefix(n);
  }
  agent_send(agent::Type::FileEnd, channel);
}

bool AgentMachine::agent_stop(OpId id, Termination why, Instant now) {
  const Op* op = find_op(id);
  if (op == nullptr) return false;
  if (op->kind == AgentOpState::Kind::Code) {
    code_stop(id, why, now);
    return true;
  }
  if (op->kind == AgentOpState::Kind::Exec && op->channel != 0) {
    agent_kill(id, why, now);
    return true;
  }
  return false;
}

void AgentMachine::agent_cancel_call(OpId id, Instant now) {
  Op* op = find_op(id);
  if (!op) return;
  auto call = calls_.find(op->channel);
  const bool context = call != calls_.end() && call->second.kind == AgentCall::Kind::Context;
  if (call != calls_.end() && call->second.kind == AgentCall::Kind::Read)
    agent_send(agent::Type::Signal, op->channel, agent::Signal{false, 0}.encode());
  calls_.erase(op->channel);
  if (context) end_context(op->channel);
  cancelled(id, now);
}

}  // namespace sandboxio::backend
