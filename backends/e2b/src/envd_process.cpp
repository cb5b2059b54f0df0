// e2b:// commands on envd's process service. States of one command:
//   POST /process.Process/Start (a Connect server stream, held back while a stream()'s
//   consumer is behind) -> start event (pid; stdin goes out with process.Process/SendInput,
//   then CloseStdin) -> data events -> end event -> the stream ends -> Done(ExecResult)
// A timeout, cancel or output past its limit kills the tree: SIGKILL to the pid, and a
// killer that matches the command's token (kill_tree); a stream that outlives the kill by
// kKillBackstop is given up. A 502/404 start asks the control plane whether the sandbox is gone.
#include <algorithm>

#include "machine.hpp"
#include "sandboxio/codec/base64.hpp"
#include "sandboxio/codec/json_writer.hpp"
#include "sandboxio/codec/shell.hpp"

namespace sandboxio::e2b::detail {

OpId E2bMachine::submit_run(Command command, Instant now) {
  return start_command(Operation::Run, std::move(command), false, now);
}

OpId E2bMachine::submit_stream(Command command, Instant now) {
  return start_command(Operation::Stream, std::move(command), true, now);
}

OpId E2bMachine::submit_run_pty(Command command, std::uint16_t cols, std::uint16_t rows,
                                Instant now) {
  pty_ = std::pair<std::uint16_t, std::uint16_t>{cols, rows};
  const OpId id = start_command(Operation::Run, std::move(command), false, now);
  pty_.reset();
  return id;
}

OpId E2bMachine::start_command(Operation operation, Command command, bool streaming, Instant now) {
  const OpId id = open(operation, now, shell_join(command.argv));
  meter_in(id, command.stdin_data.size());
  if (!alive(id)) return id;
  traced(id, command.env);
  if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
  if (command.argv.empty())
    return fail(id, Problem{errc::ExecutionError, "an empty command", {}}, now);
  redactor_.add_secrets(command.env.secret_values());
  Op& op = (*find_op(id));
  op.kind = OpState::Kind::Command;
  op.output.streaming = streaming;
  op.output.limit = command.output_limit;
  op.exec_started = now;
  op.deadline = now + std::chrono::duration_cast<nanoseconds>(command.timeout);
  op.token = config_.session + "-" + std::to_string(id) + "-" + std::to_string(++tokens_);
  op.stdin_data = std::move(command.stdin_data);
  auto launch = [this, id, script = shell_join(command.argv), env = std::move(command.env),
                 cwd = std::move(command.workdir), timeout = command.timeout, pty = pty_](Instant) {
    if (!alive(id)) return;
    start_process(id, script, env, cwd, !find_op(id)->stdin_data.empty(),
                  timeout + kEnvdLifetimeSlack, true, pty);
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

// POST process.Process/Start: `bash -l -c SCRIPT` (what envd and E2B's SDKs run), the token in
// its environment. `user` operations stream into the operation; internal ones (the killer)
// only need to run.
void E2bMachine::start_process(OpId id, const std::string& script, const Env& env,
                               const std::string& cwd, bool stdin_open,
                               std::chrono::milliseconds lifetime, bool user,
                               std::optional<std::pair<std::uint16_t, std::uint16_t>> pty) {
  JsonWriter w;
  w.begin_object().key("process").begin_object();
  w.key("cmd").value("/bin/bash");
  w.key("args").begin_array().value("-l").value("-c").value(script).end_array();
  w.key("envs").begin_object();
  for (const auto& var : env.vars())
    w.key(var.name).value(var.value);
  if (user) w.key(kExecTokenVar).value(find_op(id)->token);
  w.end_object();
  if (!cwd.empty()) w.key("cwd").value(cwd);
  w.end_object();
  if (pty) {
    w.key("pty").begin_object().key("size").begin_object();
    w.key("cols").value(static_cast<std::int64_t>(pty->first));
    w.key("rows").value(static_cast<std::int64_t>(pty->second));
    w.end_object().end_object();
  }
  w.key("stdin").value(stdin_open);
  w.end_object();
  http::Request req = envd_request("POST", "/process.Process/Start", kEnvdPort);
  req.headers.push_back({"Content-Type", "application/connect+json"});
  req.headers.push_back({"Connect-Protocol-Version", "1"});
  req.headers.push_back({"Connect-Timeout-Ms", std::to_string(lifetime.count())});
  req.body = connect::envelope(std::move(w).str());
  if (!user) {  // the killer
    ++kills_in_flight_;
    send(0, envd_origin(kEnvdPort), std::move(req),
         [this](Result<Reply>, Instant t) { kill_step_done(t); });
    return;
  }
  auto reader = std::make_shared<connect::EnvelopeReader>();
  const ConnId conn = send(id, envd_origin(kEnvdPort), std::move(req),
                           [this, id, reader](Result<Reply> r, Instant t) {
                             if (!alive(id)) return;
                             command_stream_ended(id, std::move(r), *reader, t);
                           });
  backend::Exchange& c = *http_.find(conn);
  c.streams_output = true;
  c.on_head = [](const http::ResponseParser& p, Instant) -> std::optional<Problem> {
    if (p.status() != 200) return std::nullopt;  // an error body, read whole
    const auto type = p.header("Content-Type");
    if (!type || !type->starts_with("application/connect+json"))
      return Problem{errc::RemoteProtocolViolation,
                     "envd answered a process stream with Content-Type \"" +
                         std::string(type.value_or("")) + "\"",
                     {}};
    return std::nullopt;
  };
  c.on_body = [this, id, reader](std::string_view piece, Instant t) -> std::optional<Problem> {
    reader->feed(piece);
    while (auto e = reader->next()) {
      if (!alive(id)) return std::nullopt;
      if (auto p = on_process_message(id, *e, t)) return p;
    }
    return reader->error();
  };
}

std::optional<Problem> E2bMachine::on_process_message(OpId id, const connect::Envelope& e,
                                                      Instant now) {
  if (!e.end_stream()) {
    if (auto fast = compact_data(e.message);
        fast && (fast->first == "stdout" || fast->first == "stderr" || fast->first == "pty")) {
      auto bytes = base64_decode(fast->second);
      if (!bytes)
        return Problem{errc::RemoteProtocolViolation, "envd sent output that is not base64", {}};
      return take_output(id, fast->first == "stderr" ? StreamKind::Stderr : StreamKind::Stdout,
                         std::move(*bytes), now);
    }
  }
  auto doc = json::parse(e.message);
  if (!doc) return doc.problem();
  Op& op = (*find_op(id));
  if (e.end_stream()) {
    op.stream_error = connect::error_of(doc.value());
    return std::nullopt;
  }
  const json::Value* event = doc.value().find("event");
  if (!event) return std::nullopt;
  if (const json::Value* start = event->find("start")) {
    op.pid = static_cast<std::uint32_t>(start->int_at("pid").value_or(0));
    if (op.kill_pending) {
      op.kill_pending = false;
      signal_process(id);
    } else if (!op.stdin_data.empty() && !op.stdin_sent) {
      send_stdin(id);
    }
  } else if (const json::Value* data = event->find("data")) {
    for (const std::string_view key : {"stdout", "stderr", "pty"}) {
      const StreamKind kind = key == "stderr" ? StreamKind::Stderr : StreamKind::Stdout;
      const auto text = data->string_at(key);
      if (!text) continue;
      auto bytes = base64_decode(*text);
      if (!bytes)
        return Problem{errc::RemoteProtocolViolation, "envd sent output that is not base64", {}};
      if (auto p = take_output(id, kind, std::move(*bytes), now)) return p;
    }
  } else if (const json::Value* end = event->find("end")) {
    op.end = *end;
  }
  return std::nullopt;
}

std::optional<Problem> E2bMachine::take_output(OpId id, StreamKind kind, Bytes bytes, Instant now) {
  Op& op = *find_op(id);
  if (bytes.empty() || op.forced) return std::nullopt;
  if (auto p = op.output.take(id, kind, bytes, out_)) {
    // Past the limit: the command is killed and the run fails with what it said.
    kill_tree(id);
    close_conns_of(id);
    fail(id, std::move(*p), now);
  }
  return std::nullopt;
}

void E2bMachine::send_stdin(OpId id) {
  Op& op = (*find_op(id));
  op.stdin_sent = true;
  JsonWriter w;
  w.begin_object().key("process").begin_object().key("pid").value(
      static_cast<std::int64_t>(*op.pid));
  w.end_object().key("input").begin_object().key("stdin").value(base64_encode(op.stdin_data));
  w.end_object().end_object();
  op.stdin_data.clear();
  const std::int64_t pid = *op.pid;
  rpc(id, "process.Process/SendInput", std::move(w).str(), [this, pid](Result<Reply>, Instant) {
    JsonWriter c;
    c.begin_object().key("process").begin_object().key("pid").value(pid).end_object().end_object();
    rpc(0, "process.Process/CloseStdin", std::move(c).str(), [](Result<Reply>, Instant) {});
  });
}

void E2bMachine::signal_process(OpId id) {
  Op& op = (*find_op(id));
  if (!op.pid) {
    op.kill_pending = true;
    return;
  }
  JsonWriter w;
  w.begin_object().key("process").begin_object().key("pid").value(
      static_cast<std::int64_t>(*op.pid));
  w.end_object().key("signal").value("SIGNAL_SIGKILL").end_object();
  ++kills_in_flight_;
  rpc(0, "process.Process/SendSignal", std::move(w).str(),
      [this](Result<Reply>, Instant t) { kill_step_done(t); });
}

// One part of a kill (the signal, the killer) ended; commands waiting for kills start once
// none is in flight.
void E2bMachine::kill_step_done(Instant now) {
  if (kills_in_flight_ > 0) --kills_in_flight_;
  if (kills_in_flight_ > 0) return;
  auto waiting = std::move(after_kills_);
  after_kills_.clear();
  for (auto& launch : waiting)
    launch(now);
}

// SIGKILL to the process envd started, and a killer for everything carrying its token
// (background and setsid children included). The sandbox and its files are untouched.
void E2bMachine::kill_tree(OpId id) {
  signal_process(id);
  std::string script(kKillByTokenScript);
  start_process(0, "sh -c " + shell_quote(script) + " sh " + shell_quote(find_op(id)->token), {},
                {}, false, 60s, false);
}

void E2bMachine::kill_command(OpId id, Termination why, Instant now) {
  Op& op = (*find_op(id));
  if (op.forced) return;
  op.forced = why;
  op.deadline.reset();
  op.backstop = now + kKillBackstop;
  kill_tree(id);
}

void E2bMachine::command_stream_ended(OpId id, Result<Reply> r, connect::EnvelopeReader& reader,
                                      Instant now) {
  Op& op = (*find_op(id));
  if (r && r.value().status != 200) {
    const Reply& reply = r.value();
    if (reply.status == 502 || reply.status == 404) return check_gone(id, now);
    return void(fail(id,
                     Problem{errc::ExecutionFailed,
                             "envd did not start the command (" + std::to_string(reply.status) +
                                 "): " + reply.message(),
                             {}},
                     now));
  }
  if (r) reader.finish();
  if (op.end || op.forced) return finish_command(id, now);
  if (op.stream_error) {
    return void(fail(id,
                     Problem{errc::ExecutionFailed,
                             "envd ended the command with " + op.stream_error->code + ": " +
                                 op.stream_error->message,
                             {}},
                     now));
  }
  // Cut without an end: the sandbox may have ended under it.
  check_gone(id, now);
}

// A command's stream was cut: gone sandbox (its timeout ran out, it was killed) or a lost
// connection to a sandbox that still runs.
void E2bMachine::check_gone(OpId id, Instant now) {
  if (gone_ || (expires_at_ && now >= *expires_at_)) {
    gone_ = true;
    return finish_command(id, now);
  }
  api_call(id, "GET", "/sandboxes/" + sandbox_, {}, [this, id](Result<Reply> r, Instant t) {
    if (!alive(id)) return;
    if (r && r.value().status == 404) {
      gone_ = true;
      return finish_command(id, t);
    }
    fail(id,
         Problem{errc::ConnectionLost,
                 "the connection to envd was cut mid-command; the sandbox still runs",
                 {}},
         t);
  });
}

void E2bMachine::finish_command(OpId id, Instant now) {
  Op* found = find_op(id);
  if (!found) return;
  Op& op = *found;
  close_conns_of(id);
  if (op.cancelled) return cancelled(id, now);
  ExecResult r;
  r.duration = now - op.exec_started;
  op.output.fill(r);
  if (op.forced) {
    r.termination = *op.forced;
  } else if (op.end) {
    const std::string status(op.end->string_at("status").value_or(""));
    const bool exited = op.end->bool_at("exited").value_or(false);
    const auto code = op.end->int_at("exitCode").value_or(0);
    if (exited) {
      r.exit_code = static_cast<int>(code);
    } else if (auto sig = signal_of(status)) {
      r.termination = Termination::Signalled;
      r.signal = *sig;
      r.exit_code = 128 + *sig;
    } else {
      r.exit_code = static_cast<int>(code);
    }
  } else {
    r.termination = Termination::SandboxGone;
  }
  complete(id, std::move(r), now);
}

}  // namespace sandboxio::e2b::detail
