// fake:// commands: run, stream, run_code and contexts, as timelines of output in virtual time.
#include "machine.hpp"

namespace sandboxio::fake::impl {

OpId FakeMachine::submit_run(Command command, Instant now) {
  return start_exec(Operation::Run, std::move(command), now);
}

OpId FakeMachine::submit_stream(Command command, Instant now) {
  if (!profile_.capabilities.contains(Capability::Streaming)) {
    const OpId id = open(Operation::Stream, now, shell_join(command.argv));
    if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
    return fail(id, unsupported(Capability::Streaming, "stream()"), now);
  }
  return start_exec(Operation::Stream, std::move(command), now);
}

OpId FakeMachine::submit_run_code(CodeRequest request, Instant now) {
  const OpId id = open(Operation::RunCode, now, request.code);
  meter_in(id, request.code.size());
  if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
  if (options_) trace_env(ops_.at(id).record, options_->trace, request.env);
  if (auto p = need_sandbox(now); p) return fail(id, std::move(*p), now);
  if (request.language != "python") {
    return fail(id,
                Problem{errc::CapabilityNotSupported,
                        "fake:// runs only python code, not " + request.language,
                        {}},
                now);
  }
  std::map<std::string, std::string>* vars = nullptr;
  if (request.context) {
    if (!profile_.capabilities.contains(Capability::StatefulCode)) {
      return fail(id, unsupported(Capability::StatefulCode, "run_code() with a context"), now);
    }
    auto it = sandbox_->contexts.find(*request.context);
    if (it == sandbox_->contexts.end()) {
      return fail(
          id,
          Problem{errc::CodeContextNotFound, "no code context \"" + *request.context + "\"", {}},
          now);
    }
    vars = &it->second;
  }
  Call call = base_call(Operation::RunCode);
  call.code = request.code;
  for (const auto& v : request.env.vars())
    call.env[v.name] = v.value;
  redactor_.add_secrets(request.env.secret_values());

  detail::ShellEnv env = shell_env(request.env, {});
  env.python_vars = vars;
  std::optional<std::string> value;
  detail::Outcome outcome;
  if (const Response* r = code_rule(request.code)) {
    outcome = scripted(*r);
  } else {
    outcome = detail::run_python(env, request.code, &value);
  }
  call.network_attempts = outcome.network_attempts;
  record_call(std::move(call));
  Op& op = ops_.at(id);
  op.kind = Op::Kind::Exec;
  op.streaming = false;
  op.output_limit = std::size_t{64} << 20;
  if (value && profile_.capabilities.contains(Capability::RichOutput)) {
    op.results.push_back(RichOutput{"text/plain", *value});
  }
  begin_timeline(id, op, std::move(outcome), now, request.timeout, env.pid,
                 "python3 -c " + request.code);
  advance(now);
  return id;
}

OpId FakeMachine::submit_create_context(std::string language, Instant now) {
  const OpId id = open(Operation::CreateContext, now, {});
  if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
  if (auto p = need_sandbox(now); p) return fail(id, std::move(*p), now);
  if (!profile_.capabilities.contains(Capability::StatefulCode)) {
    return fail(id, unsupported(Capability::StatefulCode, "create_context()"), now);
  }
  if (language != "python") {
    return fail(id, Problem{errc::CapabilityNotSupported, "fake:// contexts run only python", {}},
                now);
  }
  const std::string ctx = "ctx-" + std::to_string(sandbox_->next_context++);
  sandbox_->contexts[ctx] = {};
  complete(id, CodeContext{ctx, language}, now);
  return id;
}

Call FakeMachine::base_call(Operation operation) const {
  Call c;
  c.operation = operation;
  c.sandbox_id = sandbox_ ? sandbox_->id : std::string();
  c.network = sandbox_ ? sandbox_->network : NetworkPolicy{};
  c.workdir = sandbox_ ? sandbox_->workdir : std::string();
  if (sandbox_) c.env = sandbox_->env;
  return c;
}

void FakeMachine::record_call(Call call) {
  world_->impl().locked([&](World::Impl& impl) { impl.record(std::move(call)); });
}

const Response* FakeMachine::code_rule(const std::string& code) {
  const Response* found = nullptr;
  world_->impl().locked([&](World::Impl& impl) {
    for (const auto& [needle, response] : impl.code_rules) {
      if (code.find(needle) != std::string::npos) {
        found = &response;
        return;
      }
    }
  });
  return found;
}

detail::Outcome FakeMachine::scripted(const Response& r) {
  detail::Outcome o;
  if (!r.stdout_bytes.empty())
    o.steps.push_back({nanoseconds(0), StreamKind::Stdout, r.stdout_bytes});
  if (!r.stderr_bytes.empty())
    o.steps.push_back({nanoseconds(0), StreamKind::Stderr, r.stderr_bytes});
  o.exit_code = r.exit_code;
  o.duration = r.duration;
  return o;
}

detail::ShellEnv FakeMachine::shell_env(const Env& extra, const std::string& workdir) {
  detail::ShellEnv env;
  env.fs = &sandbox_->fs;
  env.env = sandbox_->env;
  for (const auto& v : extra.vars())
    env.env[v.name] = v.value;
  env.cwd = workdir.empty() ? sandbox_->workdir : workdir;
  env.policy = &sandbox_->network;
  env.pid = sandbox_->next_pid++;
  env.find_processes = [sb = sandbox_](const std::string& pattern) {
    std::vector<int> pids;
    for (const auto& p : sb->processes) {
      if (p.alive_at(sb->observed) && p.cmdline.find(pattern) != std::string::npos)
        pids.push_back(p.pid);
    }
    return pids;
  };
  return env;
}

OpId FakeMachine::start_exec(Operation operation, Command command, Instant now) {
  const OpId id = open(operation, now, shell_join(command.argv));
  meter_in(id, command.stdin_data.size());
  if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
  if (options_) trace_env(ops_.at(id).record, options_->trace, command.env);
  if (auto p = need_sandbox(now); p) return fail(id, std::move(*p), now);
  if (command.argv.empty())
    return fail(id, Problem{errc::ExecutionFailed, "the command is an empty argument list", {}},
                now);
  if (auto r = command.env.validate(); !r) return fail(id, r.problem(), now);
  if (!command.stdin_data.empty() && !profile_.capabilities.contains(Capability::Stdin))
    return fail(id, unsupported(Capability::Stdin, "a command's stdin"), now);
  if (!command.workdir.empty()) {
    const detail::Node* n = sandbox_->fs.get(detail::Vfs::normalise("/", command.workdir));
    if (command.workdir[0] != '/' || n == nullptr || !n->dir) {
      return fail(id,
                  Problem{errc::ExecutionFailed,
                          "working directory " + command.workdir + " does not exist",
                          {}},
                  now);
    }
  }
  redactor_.add_secrets(command.env.secret_values());
  Call call = base_call(operation);
  call.argv = command.argv;
  for (const auto& v : command.env.vars())
    call.env[v.name] = v.value;
  if (!command.workdir.empty()) call.workdir = command.workdir;

  detail::ShellEnv env = shell_env(command.env, command.workdir);
  env.stdin_data = command.stdin_data;
  detail::Outcome outcome;
  const Response* rule = nullptr;
  world_->impl().locked([&](World::Impl& impl) {
    for (const auto& r : impl.rules) {
      if (r.match(command.argv)) {
        rule = &r.response;
        return;
      }
    }
  });
  outcome = rule != nullptr ? scripted(*rule) : detail::run_argv(env, command.argv);
  call.network_attempts = outcome.network_attempts;
  record_call(std::move(call));

  Op& op = ops_.at(id);
  op.kind = Op::Kind::Exec;
  op.streaming = operation == Operation::Stream;
  op.stream_buffer = limits_.stream_buffer;
  op.output_limit = command.output_limit;
  for (const auto& b : outcome.background) {
    sandbox_->processes.push_back({sandbox_->next_pid++, b.what, now + b.ends_at, id, false});
  }
  begin_timeline(id, op, std::move(outcome), now, command.timeout, env.pid,
                 shell_join(command.argv));
  advance(now);
  return id;
}

void FakeMachine::begin_timeline(OpId id, Op& op, detail::Outcome outcome, Instant now,
                                 std::chrono::milliseconds timeout, int pid, std::string cmdline) {
  op.outcome = std::move(outcome);
  op.ends_at = now + op.outcome.duration;
  op.timeout_at = now + std::chrono::duration_cast<nanoseconds>(timeout);
  sandbox_->processes.push_back({pid, std::move(cmdline), std::nullopt, id, false});
}

// Ends an exec. A kill (timeout, cancellation, sandbox end) takes its whole process tree,
// background children included; a normal exit leaves detached children running.
void FakeMachine::stop_exec(OpId id, bool kill_tree) {
  if (!sandbox_) return;
  for (auto& p : sandbox_->processes) {
    if (p.owner == id && (kill_tree || !p.ends_at)) p.ended = true;
  }
  // Forget what has ended, so that the table stays as small as what runs.
  std::erase_if(sandbox_->processes, [&](const FakeSandbox::Process& p) {
    return p.ended || (p.ends_at && *p.ends_at <= sandbox_->observed);
  });
}

// The world forgets a sandbox once it is gone (its id stays known for a while).
void FakeMachine::retire(const FakeSandbox& sb) {
  world_->impl().locked([&](World::Impl& impl) { impl.retire(sb.id); });
}

void FakeMachine::finish_exec(OpId id, Instant now, Termination why) {
  Op& op = ops_.at(id);
  stop_exec(id, why != Termination::Exited);
  ExecResult r;
  r.duration = now - op.started;
  r.termination = why;
  r.streamed = op.streaming;
  if (op.streaming) r.bytes_out = op.offsets[0] + op.offsets[1];  // the meter
  if (why == Termination::Exited) {
    if (op.outcome.signal) {
      r.termination = Termination::Signalled;
      r.signal = op.outcome.signal;
    }
    r.exit_code = op.outcome.exit_code;
    r.error = op.outcome.code_error;
  } else if (why == Termination::Timeout || why == Termination::Cancelled) {
    r.exit_code = 137;  // what the sandbox reports for the SIGKILL sandboxio sent
    r.signal = 9;
  }
  if (!op.streaming) {
    r.stdout_bytes = std::move(op.out);
    r.stderr_bytes = std::move(op.err);
  }
  r.results = std::move(op.results);
  complete(id, std::move(r), now);
}

// Releases output and completions up to `now`.
void FakeMachine::advance(Instant now) {
  if (sandbox_) sandbox_->observed = std::max(sandbox_->observed, now);
  if (sandbox_ && !sandbox_->gone && now >= sandbox_->expires_at) {
    end_sandbox(now, Termination::SandboxGone);
  }
  std::vector<OpId> ids;
  for (const auto& [id, op] : ops_)
    ids.push_back(id);
  for (OpId id : ids) {
    auto it = ops_.find(id);
    if (it == ops_.end() || it->second.finished) continue;
    Op& op = it->second;
    if (op.kind == Op::Kind::Create) {
      advance_create(id, op, now);
      continue;
    }
    if (op.kind == Op::Kind::Teardown) {
      if (now < op.ends_at) continue;
      if (!op.orphan) end_sandbox(now, Termination::Cancelled);
      op.finished = true;
      op.record.possible_orphan = op.orphan;
      push(event::Cancelled{id, op.orphan});
      close(op, Outcome::Cancelled, now, std::nullopt);
      ops_.erase(id);
      continue;
    }
    if (op.kind != Op::Kind::Exec) continue;
    const Instant limit = std::min(now, op.timeout_at);
    if (!deliver(id, op, limit)) continue;  // failed (output limit)
    if (now >= op.timeout_at &&
        (op.next_step < op.outcome.steps.size() || op.ends_at > op.timeout_at)) {
      finish_exec(id, op.timeout_at, Termination::Timeout);
      continue;
    }
    if (op.next_step >= op.outcome.steps.size() && now >= op.ends_at)
      finish_exec(id, std::max(op.ends_at, op.started), Termination::Exited);
  }
}

// Delivers timeline steps up to `limit`. Returns false when the op failed.
bool FakeMachine::deliver(OpId id, Op& op, Instant limit) {
  while (op.next_step < op.outcome.steps.size()) {
    detail::Step& step = op.outcome.steps[op.next_step];
    if (op.started + step.at > limit) return true;
    const int s = step.stream == StreamKind::Stdout ? 0 : 1;
    if (!op.streaming) {
      Bytes& sink = s == 0 ? op.out : op.err;
      if (op.out.size() + op.err.size() + step.data.size() > op.output_limit) {
        stop_exec(id, true);
        fail(id,
             Problem{errc::OutputLimitExceeded,
                     "the command wrote more than " + std::to_string(op.output_limit) +
                         " bytes; it was killed",
                     {}},
             limit);
        return false;
      }
      sink += step.data;
      op.next_step++;
      continue;
    }
    while (op.step_offset < step.data.size()) {
      if (op.blocked()) return true;
      const std::size_t room = op.stream_buffer - op.unconsumed;
      const std::size_t n = std::min({kChunk, room, step.data.size() - op.step_offset});
      OutputChunk chunk{step.stream, step.data.substr(op.step_offset, n), op.offsets[s]};
      op.offsets[s] += n;
      op.step_offset += n;
      op.unconsumed += n;
      push(event::Output{id, std::move(chunk)});
    }
    op.step_offset = 0;
    op.next_step++;
  }
  return true;
}

}  // namespace sandboxio::fake::impl
