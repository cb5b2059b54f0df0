// modal:// commands on the sandbox's task command router. States of one command:
//   TaskExecStart (argv as given, env as a secret source, timeout_secs) -> three calls side by
//   side: TaskExecStdioRead for stdout and for stderr (server streams from offset 0, resumed
//   from the bytes taken when one breaks), TaskExecStdinWrite (the input and EOF), and
//   TaskExecWait (asked again when its 55 s deadline passes) -> the exit and both streams'
//   ends -> Done(ExecResult)
// A stream()'s output is held back while its consumer is behind: the stream's HTTP/2 window
// is not given back, so the router stops sending that stream and no other.
#include <cmath>

#include "machine.hpp"
#include "sandboxio/codec/shell.hpp"

namespace sandboxio::modal::detail {
namespace {

// The exception of a failed `python3 -c` cell, from the traceback Python printed last on stderr
// ("ValueError: boom" -> name and value).
std::optional<CodeError> code_error(const Bytes& err) {
  const auto at = err.rfind("Traceback (most recent call last):");
  if (at == std::string::npos) return std::nullopt;
  CodeError e;
  e.traceback = err.substr(at);
  std::string_view rest = e.traceback;
  while (!rest.empty() && rest.back() == '\n')
    rest.remove_suffix(1);
  const std::string_view last = rest.substr(rest.rfind('\n') + 1);
  const auto colon = last.find(": ");
  e.name = std::string(last.substr(0, colon));
  if (colon != std::string_view::npos) e.value = std::string(last.substr(colon + 2));
  return e;
}

}  // namespace

OpId ModalMachine::submit_run(Command command, Instant now) {
  return start_command(Operation::Run, std::move(command), false, now);
}

OpId ModalMachine::submit_stream(Command command, Instant now) {
  return start_command(Operation::Stream, std::move(command), true, now);
}

OpId ModalMachine::start_command(Operation operation, Command command, bool streaming,
                                 Instant now) {
  const OpId id = open(operation, now, shell_join(command.argv));
  meter_in(id, command.stdin_data.size());
  if (!alive(id)) return id;
  traced(id, command.env);
  if (auto p = need_sandbox()) return fail(id, std::move(*p), now);
  if (command.argv.empty())
    return fail(id, Problem{errc::ExecutionError, "an empty command", {}}, now);
  redactor_.add_secrets(command.env.secret_values());
  Op& op = *find_op(id);
  op.kind = OpState::Kind::Command;
  op.output.streaming = streaming;
  op.output.limit = command.output_limit;
  op.exec_started = now;
  op.deadline = now + std::chrono::duration_cast<Instant::duration>(command.timeout);
  op.stdin_data = std::move(command.stdin_data);
  op.token = next_exec_id();
  command.env.set(std::string(kExecTokenVar), op.token);
  // The router kills the exec at its timeout, in whole seconds: the next one up.
  const auto secs =
      static_cast<std::uint32_t>(std::ceil(static_cast<double>(command.timeout.count()) / 1000.0));
  auto launch = [this, id, argv = std::move(command.argv), env = std::move(command.env),
                 workdir =
                     command.workdir.empty() && options_ ? options_->workdir : command.workdir,
                 secs](Instant t) {
    if (alive(id)) start_exec(id, argv, env, workdir, std::max<std::uint32_t>(secs, 1), t);
  };
  // A command submitted while another one is being killed waits for the kill: what it sees
  // (a process list, a port) must not include what was killed.
  if (kills_in_flight_ > 0) {
    after_kills_.push_back(std::move(launch));
  } else {
    launch(now);
  }
  return id;
}

void ModalMachine::start_exec(OpId id, const std::vector<std::string>& argv, const Env& env,
                              const std::string& workdir, std::optional<std::uint32_t> timeout_secs,
                              Instant now) {
  Op& op = *find_op(id);
  op.exec_id = next_exec_id();
  router(
      id, "TaskExecStart", msg::exec_start(task_, op.exec_id, argv, env, workdir, timeout_secs),
      [this, id](std::string, Instant t) {
        Op* o = find_op(id);
        if (!o) return;
        o->reads_open = 2;
        read_stdio(id, 0, t);
        if (!alive(id)) return;
        read_stdio(id, 1, t);
        if (!alive(id)) return;
        if (o->kind == OpState::Kind::Command) {
          // The input, then EOF: a program that reads stdin sees its end.
          router(
              id, "TaskExecStdinWrite", msg::stdin_write(task_, o->exec_id, 0, o->stdin_data, true),
              [](std::string, Instant) {}, t);
          if (!alive(id)) return;
        } else if (o->fs_op == "WriteFile") {
          // A file's bytes: fs-tools reads them from stdin, sent as a client stream.
          const backend::CallId call = grpc_.call(
              router_spec(id, "TaskExecStdinWriteStream", kUnaryTimeout),
              msg::stdin_stream_start(task_, o->exec_id), false, {},
              [this, id](backend::GrpcReply r, Instant t2) {
                if (!alive(id) || r.status.ok()) return;
                fail(id, status_problem(r, "TaskExecStdinWriteStream"), t2);
              },
              t);
          if (!alive(id)) return;
          const std::string_view data = o->stdin_data;
          for (std::size_t at = 0; at < data.size() && grpc_.active(call); at += kStdinPiece)
            grpc_.send(call, msg::stdin_stream_data(data.substr(at, kStdinPiece)), false);
          grpc_.send(call, msg::stdin_stream_end(), true);
          o->stdin_data.clear();
        }
        wait_exec(id, t);
      },
      now, kUnaryTimeout,
      [this, id](const backend::GrpcReply& r, Instant t) {
        if (r.status.code != grpc::Code::NotFound) return false;
        gone_ = true;  // the router has no such task: the sandbox has ended
        fail(id, gone_problem(), t);
        return true;
      });
}

std::optional<Problem> ModalMachine::take_output(OpId id, StreamKind kind, std::string_view bytes) {
  Op* op = find_op(id);
  if (!op) return std::nullopt;
  if (op->kind == OpState::Kind::File) {
    Bytes& to = kind == StreamKind::Stderr ? op->fs_err : op->fs_out;
    if (to.size() + bytes.size() > kReadFileLimit)
      return Problem{errc::MessageTooLarge,
                     op->path + " is larger than read_file's bound of " +
                         std::to_string(kReadFileLimit) + " bytes",
                     {}};
    to.append(bytes);
    return std::nullopt;
  }
  return op->output.take(id, kind, bytes, out_);
}

// TaskExecStdioRead from the bytes taken so far: a stream that broke is read again from there.
void ModalMachine::read_stdio(OpId id, int fd, Instant now) {
  Op& op = *find_op(id);
  const StreamKind kind = fd == 1 ? StreamKind::Stderr : StreamKind::Stdout;
  const std::uint64_t offset = op.kind == OpState::Kind::File
                                   ? (fd == 1 ? op.fs_err : op.fs_out).size()
                                   : op.output.offsets[fd == 1 ? 1 : 0];
  grpc_.call(
      router_spec(id, "TaskExecStdioRead", std::nullopt),
      msg::stdio_read(task_, op.exec_id, offset, fd), true,
      [this, id, kind](std::string_view message, Instant) -> std::optional<Problem> {
        auto data = msg::stdio_data(message);
        if (!data)
          return Problem{errc::RemoteProtocolViolation,
                         "TaskExecStdioRead: a message that is not protobuf",
                         {}};
        return take_output(id, kind, *data);
      },
      [this, id, fd](backend::GrpcReply r, Instant t) {
        Op* o = find_op(id);
        if (!o) return;
        if (!r.status.ok()) {
          if (r.status.code == grpc::Code::Unavailable && r.status.synthesized && !o->exit &&
              o->reads_resumed++ < kReadResumes)
            return read_stdio(id, fd, t);  // the stream broke: read on from where it was
          Problem p = status_problem(r, "TaskExecStdioRead");
          if (o->kind == OpState::Kind::Command && p.code == errc::OutputLimitExceeded) {
            o->fail_with = std::move(p);  // the command is killed first
            return kill_command(id, Termination::Exited, t);
          }
          return void(fail(id, std::move(p), t));
        }
        --o->reads_open;
        exec_progress(id, t);
      },
      now);
}

void ModalMachine::wait_exec(OpId id, Instant now) {
  router(
      id, "TaskExecWait", msg::exec_ref(task_, find_op(id)->exec_id),
      [this, id](std::string reply, Instant t) {
        auto exit = msg::exec_exit(reply);
        if (!exit || (!exit->code && !exit->signal))
          return void(fail(id,
                           Problem{errc::RemoteProtocolViolation,
                                   "TaskExecWait answered neither an exit code nor a signal",
                                   {}},
                           t));
        find_op(id)->exit = *exit;
        exec_progress(id, t);
      },
      now, kWaitTimeout,
      [this, id](const backend::GrpcReply& r, Instant t) {
        if (r.status.code != grpc::Code::DeadlineExceeded) return false;
        wait_exec(id, t);  // still running: ask again, as the SDKs do
        return true;
      });
}

void ModalMachine::exec_progress(OpId id, Instant now) {
  Op* op = find_op(id);
  if (!op || !op->exit || op->reads_open > 0 || op->killing) return;
  if (op->kind == OpState::Kind::File) return file_done(id, now);
  const bool signal_like = op->exit->signal || (op->exit->code && *op->exit->code > 128);
  if (signal_like && !op->gone_checked) {
    // Killed from outside: by the sandbox's end, or by something in it? Modal says which.
    op->gone_checked = true;
    control(
        id, "SandboxWaitV2", msg::sandbox_wait(sandbox_id(), 0),
        [this, id](std::string reply, Instant t) {
          if (msg::message_field(reply, 1)) {
            gone_ = true;
            find_op(id)->forced = Termination::SandboxGone;
          }
          finish_command(id, t);
        },
        now);
    return;
  }
  finish_command(id, now);
}

void ModalMachine::kill_command(OpId id, Termination why, Instant now) {
  Op* op = find_op(id);
  if (!op || op->killing) return;
  op->killing = true;
  if (!op->forced) op->forced = why;
  op->deadline = now + std::chrono::duration_cast<Instant::duration>(kKillBackstop);
  const std::string killer = next_exec_id();
  const std::vector<std::string> argv{"sh", "-c", std::string(kKillByTokenScript), "sh", op->token};
  // The killer's calls are the machine's own (op 0): they run to their end even when the
  // command's result was given first (the backstop), so that the commands waiting for the
  // kill start only once it is done.
  ++kills_in_flight_;
  auto done = [this, id](backend::GrpcReply, Instant t) {
    if (Op* o = find_op(id); o && o->killing) {
      o->killing = false;
      o->exit = o->exit.value_or(ExecExit{});
      o->reads_open = 0;
      finish_command(id, t);
    }
    kill_done(t);
  };
  grpc_.call(
      router_spec(0, "TaskExecStart", kUnaryTimeout),
      msg::exec_start(task_, killer, argv, Env{}, {}, 10), true, {},
      [this, killer, done](backend::GrpcReply r, Instant t) {
        if (!r.status.ok()) return done(std::move(r), t);
        grpc_.call(router_spec(0, "TaskExecWait", kWaitTimeout), msg::exec_ref(task_, killer), true,
                   {}, done, t);
      },
      now);
}

void ModalMachine::kill_done(Instant now) {
  if (kills_in_flight_ > 0) --kills_in_flight_;
  if (kills_in_flight_ > 0) return;
  auto waiting = std::move(after_kills_);
  after_kills_.clear();
  for (auto& launch : waiting)
    launch(now);
}

void ModalMachine::finish_command(OpId id, Instant now) {
  Op* found = find_op(id);
  if (!found) return;
  Op& op = *found;
  grpc_.cancel_op(id);  // what is still in flight (a timeout, a cancel) is not waited for
  ExecResult r;
  r.duration = now - op.exec_started;
  op.output.fill(r);
  if (op.exit && op.exit->code) r.exit_code = op.exit->code;
  if (op.exit && op.exit->signal) r.exit_code = 128 + *op.exit->signal;
  if (op.forced && *op.forced != Termination::Exited) {
    r.termination = *op.forced;
  } else if (op.exit && op.exit->signal) {
    r.termination = Termination::Signalled;
    r.signal = op.exit->signal;
  } else if (r.exit_code && *r.exit_code > 128 && *r.exit_code <= 128 + 64) {
    r.termination = Termination::Signalled;
    r.signal = *r.exit_code - 128;
  }
  if (op.record.operation == Operation::RunCode && r.exit_code != 0)
    r.error = code_error(r.stderr_bytes);
  if (op.cancelled) return cancelled(id, now);
  if (op.fail_with) return void(fail(id, std::move(*op.fail_with), now));
  complete(id, std::move(r), now);
}

}  // namespace sandboxio::modal::detail
