// docker:// commands (run, stream, and run_code without the agent's python3) and the internal
// execs file operations use.
// States of one exec (Exec, keyed by its own number):
//   waiting (a kill is in flight: deferred_) -> POST /containers/{id}/exec (created)
//   -> POST /exec/{eid}/start, upgraded to the stream (started: stdin sent, then half-closed)
//   -> stream ended -> GET /exec/{eid}/json (inspect; still running: again every 20 ms)
//   -> exit code; a signal on a running container -> GET /containers/{id}/json (gone?) and,
//      for SIGKILL, GET /events (out of memory?) -> Done(ExecResult)
// A timeout, cancel or broken stream kills the tree by its token (kill_by_token, an internal
// exec of its own); a stream that outlives the kill by kKillBackstop is given up.
#include <algorithm>
#include <cctype>

#include "machine.hpp"
#include "sandboxio/codec/json.hpp"
#include "sandboxio/codec/shell.hpp"

namespace sandboxio::docker::detail {

namespace {

/// The container is gone: Docker answers 404 ("No such container", "No such exec"); Podman
/// answers an exec inspected after its container was removed with 500 and "no such container"
/// ("retrieving exec session ...: container ... does not exist in database: no such container").
bool container_gone(const backend::Reply& reply) {
  if (reply.status == 404) return true;
  if (reply.status != 500) return false;
  std::string text = reply.message();
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text.find("no such container") != std::string::npos;
}

}  // namespace

OpId DockerMachine::submit_run(Command command, Instant now) {
  return start_user_exec(Operation::Run, std::move(command), false, now);
}

OpId DockerMachine::submit_stream(Command command, Instant now) {
  return start_user_exec(Operation::Stream, std::move(command), true, now);
}

Problem DockerMachine::unsupported(Capability c, const std::string& what) {
  return Problem{errc::CapabilityNotSupported,
                 what + " needs the " + std::string(to_string(c)) +
                     " capability, which docker:// does not declare",
                 "Code contexts need the agent and python3 in the image: docker://IMAGE?agent=on "
                 "(or e2b://)."};
}

OpId DockerMachine::start_user_exec(Operation operation, Command command, bool streaming,
                                    Instant now) {
  const OpId id =
      open(operation, now,
           operation == Operation::RunCode && command.argv.size() == 3 ? command.argv[2]
                                                                       : shell_join(command.argv));
  meter_in(id, operation == Operation::RunCode && command.argv.size() == 3
                   ? command.argv[2].size()
                   : command.stdin_data.size());
  if (!alive(id)) return id;
  traced(id, command.env);
  if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
  if (command.argv.empty())
    return fail(id, Problem{errc::ExecutionFailed, "the command is empty", {}}, now);
  if (auto r = command.env.validate(); !r) return fail(id, r.problem(), now);
  if (!command.workdir.empty() && command.workdir[0] != '/')
    return fail(id, Problem{errc::InvalidPath, "the working directory must be absolute", {}}, now);
  redactor_.add_secrets(command.env.secret_values());
  Op& op = *find_op(id);
  op.kind = OpState::Kind::Exec;
  op.output.streaming = streaming;
  op.output.limit = command.output_limit;
  op.exec_started = now;
  op.deadline = now + std::chrono::duration_cast<nanoseconds>(command.timeout);
  if (via_agent()) {
    agent_start(id, std::move(command), streaming, now);
    return id;
  }
  Exec e;
  e.op = id;
  e.user = true;
  e.argv = std::move(command.argv);
  for (const auto& v : command.env.vars())
    e.env.push_back(v.name + "=" + v.value);
  e.workdir = std::move(command.workdir);
  e.attach_stdin = !command.stdin_data.empty();
  e.stdin_data = std::move(command.stdin_data);
  e.wall_started = wall_at(now);
  op.exec = launch(std::move(e));
  return id;
}

// Internal execs (file operations on tmpfs, removal, the killer) collect their output.
void DockerMachine::run_internal(OpId op, std::vector<std::string> argv, Bytes stdin_data,
                                 std::function<void(Result<ExecDone>, Instant)> then,
                                 std::size_t out_limit) {
  Exec e;
  e.op = op;
  e.argv = std::move(argv);
  e.attach_stdin = !stdin_data.empty();
  e.stdin_data = std::move(stdin_data);
  e.then = std::move(then);
  e.out_limit = out_limit;
  launch(std::move(e));
}

std::uint64_t DockerMachine::launch(Exec e) {
  const std::uint64_t key = ++next_exec_;
  e.token = config_.session + "x" + std::to_string(key);
  const std::string workdir =
      !e.workdir.empty() ? e.workdir : (options_ ? options_->workdir : std::string());
  std::string body =
      exec_body(e.argv, e.env, workdir, e.attach_stdin, e.user ? e.token : std::string(),
                e.as_root ? std::string() : exec_user_);
  const OpId op = e.op;
  const bool user = e.user;
  execs_.emplace(key, std::move(e));
  if (user && !killing_.empty()) {
    // A kill is in flight: commands submitted after it start once it is done, so that they
    // never see the processes it is killing.
    deferred_.push_back({key, std::move(body)});
    return key;
  }
  create_exec(key, op, std::move(body));
  return key;
}

void DockerMachine::create_exec(std::uint64_t key, OpId op, std::string body) {
  call(op, "POST", path("/containers/" + container_ + "/exec"), std::move(body),
       [this, key](Result<Reply> r, Instant t) {
         auto it = execs_.find(key);
         if (it == execs_.end()) return;
         if (!r) return exec_failed(key, r.problem(), t);
         const Reply& reply = r.value();
         if (container_gone(reply) || reply.status == 409) {
           gone_ = true;
           return exec_failed(key, gone_problem(), t);
         }
         if (reply.status != 201) {
           return exec_failed(key,
                              Problem{errc::ExecutionFailed,
                                      "the Docker engine refused the exec: " + reply.message(),
                                      {}},
                              t);
         }
         auto doc = json::parse(reply.body);
         if (!doc) return exec_failed(key, doc.problem(), t);
         it->second.id = std::string(doc.value().string_at("Id").value_or(""));
         if (it->second.kill_pending && it->second.user) {
           // Cancelled before it started: nothing runs yet; end it without starting.
           return exec_stream_ended(key, t);
         }
         start_exec(key);
       });
}

// Forgets an exec; when the last exec being killed is gone, deferred commands start.
void DockerMachine::erase_exec(std::uint64_t key) {
  execs_.erase(key);
  if (killing_.erase(key) == 0 || !killing_.empty()) return;
  auto deferred = std::move(deferred_);
  deferred_.clear();
  for (auto& [k, body] : deferred) {
    auto it = execs_.find(k);
    if (it == execs_.end()) continue;
    create_exec(k, it->second.op, std::move(body));
  }
}

void DockerMachine::start_exec(std::uint64_t key) {
  Exec& e = execs_.at(key);
  // A plain reply instead of the 101 means the daemon did not start it.
  const ConnId conn = upgrade(
      e.op, path("/exec/" + e.id + "/start"), std::string(kExecStart),
      [this, key](Result<Reply> r, Instant t) {
        if (!r) return exec_failed(key, r.problem(), t);
        if (container_gone(r.value()) || r.value().status == 409) {
          gone_ = true;
          return exec_failed(key, gone_problem(), t);
        }
        exec_failed(key,
                    Problem{errc::ExecutionFailed,
                            "the Docker engine did not start the exec: " + r.value().message(),
                            {}},
                    t);
      });
  http_.find(conn)->tag = key;
  e.conn = conn;
}

void DockerMachine::exec_upgraded(ConnId conn, Instant) {
  backend::Exchange& x = *http_.find(conn);
  auto it = execs_.find(x.tag);
  if (it == execs_.end()) return;
  Exec& e = it->second;
  if (x.parser->status() != 101) {
    // A plain reply instead of the stream: the daemon refused to start it.
    return;
  }
  e.started = true;
  // Stdin only after the 101: bytes sent earlier are dropped by the daemon.
  if (e.attach_stdin) {
    if (!e.stdin_data.empty()) out_.push(request::Send{conn, std::move(e.stdin_data)});
    e.stdin_data.clear();
    out_.push(request::HalfClose{conn});
  }
  if (e.kill_pending) {
    e.kill_pending = false;
    const Op* op = find_op(e.op);
    if (op && op->forced) start_killer(e.op);
  }
}

// Demultiplexes an exec's stream. Streams hand output over as events, bounded by the
// operation's unconsumed budget (backpressure); run() and internal execs collect it.
std::size_t DockerMachine::exec_bytes(ConnId conn, std::string_view data, Instant now) {
  auto it = execs_.find(http_.find(conn)->tag);
  if (it == execs_.end()) return data.size();
  Exec& e = it->second;
  Op* op = e.user ? find_op(e.op) : nullptr;
  std::size_t take = data.size();
  if (op && op->output.streaming) {
    const std::size_t room = op->output.room(limits_);
    if (room == 0) return 0;
    take = std::min(take, room + 8);  // a frame header more, so a frame can always finish
  }
  std::optional<Problem> overflow;
  e.demux.feed(data.substr(0, take), [&](docker::FrameType type, std::string_view piece) {
    if (type == docker::FrameType::SystemError) {
      e.err.append(piece.substr(0, 4096));
      return;
    }
    bool to_err = type == docker::FrameType::Stderr;
    if (type == docker::FrameType::Stdout && e.first_stdout) {
      e.first_stdout = false;
      if (piece.starts_with(kRuncError)) e.runc_error = true;
    }
    if (type == docker::FrameType::Stdout && e.runc_error) {
      to_err = true;
      if (e.user && e.err.size() < 4096) e.err.append(piece.substr(0, 4096));
    }
    if (!op) {
      if (e.user) return;  // the operation already ended: drop
      Bytes& dst = to_err ? e.err : e.out;
      if (dst.size() + piece.size() > e.out_limit) {
        overflow = Problem{errc::MessageTooLarge, "an internal command's output is too large", {}};
        return;
      }
      dst.append(piece);
      return;
    }
    if (!overflow)
      overflow =
          op->output.take(e.op, to_err ? StreamKind::Stderr : StreamKind::Stdout, piece, out_);
  });
  if (e.demux.error()) {
    exec_failed(it->first, *e.demux.error(), now);
    return data.size();
  }
  if (overflow) {
    const OpId opid = e.op;
    if (e.user) {
      kill_tree(opid, Termination::Cancelled, now);
      fail(opid, std::move(*overflow), now);
    } else {
      exec_failed(it->first, std::move(*overflow), now);
    }
    return data.size();
  }
  return take;
}

// The output stream of a running exec broke (reset, not ended): the rest of its output is
// lost, so the operation fails with ConnectionLost (what arrived was already handed over),
// and the command, which would run on unseen, is stopped by its token.
void DockerMachine::exec_stream_broke(std::uint64_t key, Problem problem, Instant now) {
  auto it = execs_.find(key);
  if (it == execs_.end()) return;
  const std::string token = it->second.token;
  problem.code = errc::ConnectionLost;
  problem.detail = "the connection carrying the command's output broke: " + problem.detail;
  if (problem.hint.empty())
    problem.hint =
        "The output that arrived was delivered; the command was stopped. Check the path to "
        "the Docker engine and run it again.";
  exec_failed(key, std::move(problem), now);
  if (!token.empty() && !gone_) kill_by_token(token, [](Result<ExecDone>, Instant) {});
}

void DockerMachine::exec_failed(std::uint64_t key, Problem problem, Instant now) {
  auto it = execs_.find(key);
  if (it == execs_.end()) return;
  Exec e = std::move(it->second);
  erase_exec(it->first);
  if (e.conn != 0) http_.drop(e.conn);
  if (e.user) {
    const Op* op = find_op(e.op);
    if (op && op->forced && problem.code == errc::SandboxGone) {
      return finish_user_exec(e, std::nullopt, now);
    }
    fail(e.op, std::move(problem), now);
  } else if (e.then) {
    e.then(std::move(problem), now);
  }
}

void DockerMachine::exec_stream_ended(std::uint64_t key, Instant now) {
  auto it = execs_.find(key);
  if (it == execs_.end()) return;
  Exec& e = it->second;
  e.conn = 0;
  e.backstop_at.reset();
  if (e.id.empty() || !e.started) {
    // Never started (cancelled first) or refused: report without asking the daemon.
    Exec done = std::move(e);
    erase_exec(key);
    if (done.user) return finish_user_exec(done, std::nullopt, now);
    if (done.then) done.then(Problem{errc::ExecutionFailed, "the exec did not start", {}}, now);
    return;
  }
  inspect_exec(key, now);
}

void DockerMachine::inspect_exec(std::uint64_t key, Instant) {
  const Exec& e = execs_.at(key);
  call(e.op, "GET", path("/exec/" + e.id + "/json"), {}, [this, key](Result<Reply> r, Instant t) {
    auto it = execs_.find(key);
    if (it == execs_.end()) return;
    Exec& ex = it->second;
    if (!r) return exec_failed(key, r.problem(), t);
    if (container_gone(r.value())) {  // the container went away under the exec
      Exec done = std::move(ex);
      erase_exec(key);
      gone_ = true;
      if (done.user) return finish_user_exec(done, std::nullopt, t, Termination::SandboxGone);
      if (done.then) done.then(gone_problem(), t);
      return;
    }
    if (r.value().status != 200) return exec_failed(key, daemon_error(r.value()), t);
    auto doc = json::parse(r.value().body);
    if (!doc) return exec_failed(key, doc.problem(), t);
    if (doc.value().bool_at("Running") == true) {
      // The stream ended but the process runs on (it closed its output): ask again shortly.
      ex.reinspect_at = t + kReinspectEvery;
      return;
    }
    std::optional<int> code;
    if (auto c = doc.value().int_at("ExitCode")) code = static_cast<int>(*c);
    const std::int64_t pid = doc.value().int_at("Pid").value_or(0);
    Exec done = std::move(ex);
    erase_exec(key);
    if (done.runc_error && pid == 0 && code == 126) {
      // runc could not start the program: 127 for a missing one, as a shell would say.
      const Bytes& text = done.err;
      if (text.find("not found") != std::string::npos ||
          text.find("no such file") != std::string::npos)
        code = 127;
    }
    if (!done.user) {
      if (done.then)
        done.then(ExecDone{code, done.runc_error, std::move(done.out), std::move(done.err)}, t);
      return;
    }
    const Op* op = find_op(done.op);
    const bool signalled = code && *code > 128 && *code <= 128 + 64;
    if (op && signalled && !op->forced) {
      // A SIGKILL may be the container ending (lifetime, kill): ask whether it still runs.
      const OpId opid = done.op;
      call(opid, "GET", path("/containers/" + container_ + "/json"), {},
           [this, done = std::move(done), code](Result<Reply> c, Instant t2) mutable {
             bool gone = false;
             if (c && c.value().status == 404) gone = true;
             if (c && c.value().status == 200) {
               auto d = json::parse(c.value().body);
               const json::Value* st = d ? d.value().find("State") : nullptr;
               gone = !st || st->bool_at("Running") != true;
             }
             if (gone_ || (expires_at_ && t2 >= *expires_at_)) gone = true;
             if (gone) {
               gone_ = true;
               return finish_user_exec(done, std::nullopt, t2, Termination::SandboxGone);
             }
             if (code == 137 && done.wall_started && wall_at(t2)) {
               return check_oom(std::move(done), *code, t2);
             }
             finish_user_exec(done, code, t2);
           });
      return;
    }
    finish_user_exec(done, code, t);
  });
}

// A SIGKILL while the container runs on: was it the memory limit? The daemon's event log
// says (an exec's OOM kill leaves the container running).
void DockerMachine::check_oom(Exec done, int code, Instant now) {
  const OpId opid = done.op;
  const auto started = *done.wall_started;
  query_oom(opid, started, now, [this, done = std::move(done), code](bool oom, Instant t) mutable {
    finish_user_exec(done, code, t, oom ? std::optional(Termination::OutOfMemory) : std::nullopt);
  });
}

// The engine stamps events with its own clock and the wall clock here is reckoned from the
// driver's anchor, so the window opens a second before the first command started; past that,
// counting (not looking for one event in a window) keeps one kill from explaining the next.
void DockerMachine::query_oom(OpId op, std::chrono::system_clock::time_point started, Instant now,
                              std::function<void(bool, Instant)> then) {
  if (!oom_since_) oom_since_ = started - 1s;
  const std::string filters =
      R"({"container":[")" + container_ + R"("],"type":["container"],"event":["oom"]})";
  const std::string target =
      path("/events?since=" + api_time(*oom_since_) + "&until=" + api_time(*wall_at(now) + 1s) +
           "&filters=" + percent_encode(filters));
  call(op, "GET", target, {}, [this, then = std::move(then)](Result<Reply> r, Instant t) {
    std::size_t events = 0;
    if (r && r.value().status == 200) {
      // One JSON object per line, each an "oom" event of this container.
      const std::string& body = r.value().body;
      for (std::size_t at = 0; at < body.size();) {
        auto end = body.find('\n', at);
        if (end == std::string::npos) end = body.size();
        if (std::string_view(body).substr(at, end - at).find("\"oom\"") != std::string_view::npos)
          ++events;
        at = end + 1;
      }
    }
    const bool oom = events > oom_seen_;
    oom_seen_ = std::max(oom_seen_, events);
    then(oom, t);
  });
}

void DockerMachine::finish_user_exec(Exec& e, std::optional<int> code, Instant now,
                                     std::optional<Termination> why) {
  Op* found = find_op(e.op);
  if (!found) return;
  Op& op = *found;
  ExecResult r;
  r.exit_code = code;
  r.duration = now - op.exec_started;
  op.output.fill(r);
  if (why) {
    r.termination = *why;
  } else if (op.forced) {
    r.termination = *op.forced;
  } else if (code && *code > 128 && *code <= 128 + 64) {
    r.termination = Termination::Signalled;
    r.signal = *code - 128;
  } else {
    r.termination = Termination::Exited;
  }
  if (op.cancelled) return cancelled(e.op, now);
  complete(e.op, std::move(r), now);
}

// Kills the operation's process tree: every process carrying its exec token, setsid
// escapees included. The stream then ends and the exec is inspected as usual.
void DockerMachine::kill_tree(OpId id, Termination why, Instant) {
  Op* found = find_op(id);
  if (!found) return;
  Op& op = *found;
  op.deadline.reset();
  if (op.forced) return;
  op.forced = why;
  auto ex = execs_.find(op.exec);
  if (ex == execs_.end()) return;
  killing_.insert(op.exec);
  if (!ex->second.started) {
    ex->second.kill_pending = true;  // killed as soon as it starts (or never started)
    return;
  }
  start_killer(id);
}

void DockerMachine::start_killer(OpId id) {
  const Op* op = find_op(id);
  if (!op) return;
  const std::uint64_t target = op->exec;
  auto ex = execs_.find(target);
  if (ex == execs_.end()) return;
  kill_by_token(ex->second.token, [this, target](Result<ExecDone>, Instant t) {
    // Whatever the killer said, the stream must end soon; if it does not, the backstop
    // reports without it.
    auto e = execs_.find(target);
    if (e != execs_.end() && e->second.conn != 0) e->second.backstop_at = t + kKillBackstop;
  });
}

// Kills the process tree of the exec that carries `token` (an internal exec of its own).
void DockerMachine::kill_by_token(const std::string& token,
                                  std::function<void(Result<ExecDone>, Instant)> then) {
  Exec e;
  e.argv = {"sh", "-c", std::string(kKillByTokenScript), "sh", token};
  e.then = std::move(then);
  e.as_root = true;  // the agent's user cannot be reached by its own processes; root can
  launch(std::move(e));
}

// The exec timers: re-inspecting a process that closed its output, and giving up on a stream
// that outlived the kill of its process tree.
void DockerMachine::exec_timers(Instant now) {
  std::vector<std::uint64_t> keys;
  for (const auto& [key, e] : execs_) {
    if ((e.reinspect_at && now >= *e.reinspect_at) || (e.backstop_at && now >= *e.backstop_at))
      keys.push_back(key);
  }
  for (auto key : keys) {
    auto it = execs_.find(key);
    if (it == execs_.end()) continue;
    Exec& e = it->second;
    if (e.reinspect_at && now >= *e.reinspect_at) {
      e.reinspect_at.reset();
      inspect_exec(key, now);
    } else if (e.backstop_at && now >= *e.backstop_at) {
      e.backstop_at.reset();
      // The stream outlived the kill: give up on it and report what is known.
      if (e.conn != 0) {
        http_.drop(e.conn);
        e.conn = 0;
      }
      exec_stream_ended(key, now);
    }
  }
}

}  // namespace sandboxio::docker::detail
