// The host side of sandboxio-agent's protocol: run_code and code contexts through the agent's
// python3 bootstrap, one python3 (one namespace) per context (see agent_machine.hpp).
#include <csignal>

#include "sandboxio/backend/agent_machine.hpp"

namespace sandboxio::backend {

void AgentMachine::context_start(OpId id, Instant) {
  AgentCall call;
  call.kind = AgentCall::Kind::Context;
  call.op = id;
  const std::uint32_t channel = agent_call(std::move(call));
  find_op(id)->channel = channel;
  agent::ContextStart start;
  if (options_) start.cwd = options_->workdir;
  agent_send(agent::Type::ContextStart, channel, start.encode());
}

void AgentMachine::code_start(OpId id, CodeRequest request, Instant now) {
  if (auto r = request.env.validate(); !r) return void(fail(id, r.problem(), now));
  redactor_.add_secrets(request.env.secret_values());
  Op& op = *find_op(id);
  op.kind = AgentOpState::Kind::Code;
  op.output.limit = Command{}.output_limit;  // what run() keeps in memory
  op.exec_started = now;
  op.deadline = now + std::chrono::duration_cast<std::chrono::nanoseconds>(request.timeout);
  if (request.context) {
    auto it = contexts_.find(*request.context);
    if (it == contexts_.end()) {
      return void(fail(id,
                       Problem{errc::CodeContextNotFound,
                               "no code context \"" + *request.context + "\" in this sandbox",
                               "create_context() makes one; a context ends with its sandbox."},
                       now));
    }
    op.context = it->second;
  } else {
    // A context of its own, pipelined: the agent has it before the cell arrives.
    AgentCall ctx;
    ctx.kind = AgentCall::Kind::Context;
    ctx.op = id;
    op.context = agent_call(std::move(ctx));
    op.own_context = true;
    agent::ContextStart start;
    if (options_) start.cwd = options_->workdir;
    agent_send(agent::Type::ContextStart, op.context, start.encode());
  }
  AgentCall cell;
  cell.kind = AgentCall::Kind::Code;
  cell.op = id;
  const std::uint32_t channel = agent_call(std::move(cell));
  op.channel = channel;
  agent::RunCode run;
  run.context = op.context;
  run.code = std::move(request.code);
  for (const auto& v : request.env.vars())
    run.env.push_back(v.name + "=" + v.value);
  agent_send(agent::Type::RunCode, channel, run.encode());
}

void AgentMachine::context_frame(std::uint32_t channel, AgentCall& call, agent::Frame& f,
                                 Instant now) {
  const OpId id = call.op;
  Op* op = find_op(id);
  const bool own = op && op->kind == AgentOpState::Kind::Code;  // a run_code's own context
  if (f.type == agent::Type::Started) {
    if (own) {
      call.kind = AgentCall::Kind::Ignore;  // the cell's frames carry the rest
      return;
    }
    calls_.erase(channel);
    if (!op) return end_context(channel);  // the create_context() went away meanwhile
    const std::string ctx = "ctx-" + std::to_string(channel);
    contexts_[ctx] = channel;
    return complete(id, CodeContext{ctx, "python"}, now);
  }
  calls_.erase(channel);
  if (!op) return;
  if (f.type == agent::Type::Failure) {
    auto failure = agent::Failure::decode(f.payload);
    if (!failure) return void(fail(id, failure.problem(), now));
    if (own) calls_.erase(op->channel);  // its cell is refused too: this says why
    return void(fail(
        id,
        Problem{errc::ExecutionFailed, "the code context did not start: " + failure.value().message,
                "Code contexts need python3 in the image."},
        now));
  }
  (void)fail(id,
             Problem{errc::RemoteProtocolViolation,
                     "sandboxio-agent: an unexpected " + std::string(to_string(f.type)) +
                         " for a code context",
                     {}},
             now);
}

void AgentMachine::code_frame(std::uint32_t channel, AgentCall& call, agent::Frame& f,
                              Instant now) {
  const OpId id = call.op;
  Op& op = *find_op(id);
  auto malformed = [&](const Problem& p) {
    calls_.erase(channel);
    if (op.own_context) end_context(op.context);
    (void)fail(id, p, now);
  };
  switch (f.type) {
    case agent::Type::Output: {
      auto o = agent::Output::decode(f.payload);
      if (!o) return malformed(o.problem());
      const std::size_t n = o.value().data.size();
      auto overflow = op.output.take(
          id, o.value().stream == agent::StreamId::Stderr ? StreamKind::Stderr : StreamKind::Stdout,
          o.value().data, out_);
      if (overflow) {
        code_stop(id, Termination::Cancelled, now);
        return malformed(std::move(*overflow));
      }
      agent_send(agent::Type::Credit, channel,
                 agent::Credit{static_cast<std::uint32_t>(n)}.encode());
      return;
    }
    case agent::Type::CodeEvent: {
      auto e = agent::CodeEvent::decode(f.payload);
      if (!e) return malformed(e.problem());
      if (e.value().kind == agent::CodeEvent::Kind::Result) {
        for (auto& [mime, data] : e.value().bundle)
          op.results.push_back(RichOutput{std::move(mime), std::move(data)});
      } else if (!op.forced) {  // an interrupt's KeyboardInterrupt is the timeout's, not the code's
        // As a terminal shows it: the traceback on stderr.
        (void)op.output.take(id, StreamKind::Stderr, e.value().traceback, out_);
        op.error = CodeError{std::move(e.value().name), std::move(e.value().value),
                             std::move(e.value().traceback)};
      }
      return;
    }
    case agent::Type::CodeDone: {
      auto d = agent::CodeDone::decode(f.payload);
      if (!d) return malformed(d.problem());
      return code_done(id, channel, d.value(), now);
    }
    case agent::Type::Failure: {
      auto failure = agent::Failure::decode(f.payload);
      if (!failure) return malformed(failure.problem());
      if (failure.value().error == ENOENT) {
        forget_context(op.context);
        return malformed(Problem{errc::CodeContextNotFound,
                                 "the code context is gone: " + failure.value().message,
                                 "create_context() makes a new one."});
      }
      return malformed(Problem{
          errc::RemoteProtocolViolation, "sandboxio-agent: " + failure.value().message, {}});
    }
    default:
      return malformed(Problem{
          errc::RemoteProtocolViolation,
          "sandboxio-agent: an unexpected " + std::string(to_string(f.type)) + " for a cell",
          {}});
  }
}

void AgentMachine::code_done(OpId id, std::uint32_t channel, const agent::CodeDone& done,
                             Instant now) {
  calls_.erase(channel);
  Op& op = *find_op(id);
  if (op.own_context) end_context(op.context);
  using How = agent::CodeDone::How;
  if (done.how == How::Lost) {
    forget_context(op.context);
    if (op.cancelled) return cancelled(id, now);
    return void(fail(id,
                     Problem{errc::CodeContextNotFound, "the code context is gone: " + done.message,
                             "create_context() makes a new one."},
                     now));
  }
  ExecResult r;
  r.duration = now - op.exec_started;
  r.context_restarted = done.fresh || done.how != How::Finished;
  if (done.how == How::Died) {
    const std::string note = "sandboxio: " + done.message +
                             "; the code context was started again and its variables are gone\n";
    (void)op.output.take(id, StreamKind::Stderr, note, out_);
  }
  op.output.fill(r);
  r.results = std::move(op.results);
  if (op.forced) {
    r.termination = *op.forced;  // interrupted (Finished) or restarted: nothing exited by itself
  } else if (done.how == How::Died && done.signalled) {
    r.termination = Termination::Signalled;
    r.signal = done.value;
    r.exit_code = 128 + done.value;
  } else if (done.how == How::Died) {
    r.exit_code = done.value;  // python3's own status (os._exit(3) says 3)
  } else {
    r.exit_code = op.error ? 1 : 0;
    r.error = std::move(op.error);
  }
  if (op.cancelled) return cancelled(id, now);
  complete(id, std::move(r), now);
}

void AgentMachine::code_stop(OpId id, Termination why, Instant now) {
  Op* op = find_op(id);
  if (!op) return;
  if (!op->forced) op->forced = why;
  if (!op->interrupted) {
    // First KeyboardInterrupt (what the cell started is killed); the context lives on if the
    // cell stops within the grace.
    op->interrupted = true;
    op->deadline = now + kInterruptGrace;
    agent_send(agent::Type::Signal, op->channel, agent::Signal{true, SIGINT}.encode());
    return;
  }
  op->deadline.reset();
  agent_send(agent::Type::Signal, op->channel, agent::Signal{true, SIGKILL}.encode());
}

void AgentMachine::forget_context(std::uint32_t channel) {
  std::erase_if(contexts_, [channel](const auto& kv) { return kv.second == channel; });
}

void AgentMachine::end_context(std::uint32_t channel) {
  AgentCall call;
  call.kind = AgentCall::Kind::Ignore;
  calls_[channel] = std::move(call);
  agent_send(agent::Type::ContextEnd, channel);
}

}  // namespace sandboxio::backend
