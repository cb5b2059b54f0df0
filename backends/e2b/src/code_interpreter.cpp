// e2b:// code on the code interpreter (port 49999). States of one run_code:
//   [no context: POST /contexts (an ephemeral one)] -> POST /execute (NDJSON lines: stdout,
//   stderr, result, error, end_of_execution) -> Done(ExecResult with rich results)
//   -> the ephemeral context is deleted
// A timeout or cancel interrupts the context (POST /contexts/{id}/restart) and reports the
// termination; a context that cannot be reached asks whether the sandbox is gone.
#include "machine.hpp"
#include "sandboxio/codec/json_writer.hpp"

namespace sandboxio::e2b::detail {

OpId E2bMachine::submit_run_code(CodeRequest request, Instant now) {
  const OpId id = open(Operation::RunCode, now, request.code);
  meter_in(id, request.code.size());
  if (!alive(id)) return id;
  traced(id, request.env);
  if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
  Op& op = (*find_op(id));
  op.kind = OpState::Kind::Code;
  op.exec_started = now;
  op.deadline = now + std::chrono::duration_cast<nanoseconds>(request.timeout);
  redactor_.add_secrets(request.env.secret_values());
  if (request.context) {
    op.context = *request.context;
    execute(id, std::move(request), now);
    return id;
  }
  // Stateless: a fresh context of its own, deleted afterwards.
  JsonWriter w;
  w.begin_object().key("language").value(request.language).end_object();
  code_call(id, "POST", "/contexts", std::move(w).str(),
            [this, id, request = std::move(request)](Result<Reply> r, Instant t) mutable {
              if (!alive(id)) return;
              if (!r) return void(fail(id, r.problem(), t));
              auto ctx = context_of(r.value());
              if (!ctx) return void(fail(id, ctx.problem(), t));
              Op& o = (*find_op(id));
              o.context = ctx.value().id;
              o.ephemeral_context = true;
              execute(id, std::move(request), t);
            });
  return id;
}

OpId E2bMachine::submit_create_context(std::string language, Instant now) {
  const OpId id = open(Operation::CreateContext, now);
  if (!alive(id)) return id;
  if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
  JsonWriter w;
  w.begin_object().key("language").value(language.empty() ? "python" : language).end_object();
  code_call(id, "POST", "/contexts", std::move(w).str(), [this, id](Result<Reply> r, Instant t) {
    if (!alive(id)) return;
    if (!r) return void(fail(id, r.problem(), t));
    auto ctx = context_of(r.value());
    if (!ctx) return void(fail(id, ctx.problem(), t));
    complete(id, std::move(ctx).value(), t);
  });
  return id;
}

// ---- code ----
void E2bMachine::execute(OpId id, CodeRequest request, Instant now) {
  JsonWriter w;
  w.begin_object().key("code").value(request.code);
  w.key("context_id").value(find_op(id)->context);
  if (!request.env.vars().empty()) {
    w.key("env_vars").begin_object();
    for (const auto& var : request.env.vars())
      w.key(var.name).value(var.value);
    w.end_object();
  }
  w.end_object();
  auto lines = std::make_shared<http::LineSplitter>();
  const ConnId conn = code_call(
      id, "POST", "/execute", std::move(w).str(), [this, id, lines](Result<Reply> r, Instant t) {
        if (!alive(id)) return;
        if (!r) return check_code_gone(id, r.problem(), t);
        const Reply& reply = r.value();
        if (reply.status == 404)
          return void(
              fail(id,
                   Problem{errc::CodeContextNotFound,
                           "no code context \"" + find_op(id)->context + "\" in this sandbox",
                           {}},
                   t));
        if (reply.status == 502) return check_code_gone(id, gone_problem(), t);
        if (reply.status != 200)
          return void(fail(id,
                           Problem{errc::ExecutionFailed,
                                   "the code interpreter answered " + std::to_string(reply.status) +
                                       ": " + reply.message(),
                                   {}},
                           t));
        if (auto rest = lines->finish()) {
          if (auto p = on_code_line(id, *rest)) return void(fail(id, *p, t));
        }
        finish_code(id, t);
      });
  http_.find(conn)->on_body = [this, id, lines](std::string_view piece,
                                                Instant) -> std::optional<Problem> {
    lines->feed(piece);
    while (auto line = lines->next_line()) {
      if (line->empty()) continue;
      if (auto p = on_code_line(id, *line)) return p;
    }
    return lines->error();
  };
  (void)now;
}

std::optional<Problem> E2bMachine::on_code_line(OpId id, const std::string& line) {
  auto doc = json::parse(line);
  if (!doc) return doc.problem();
  const json::Value& v = doc.value();
  const std::string_view type = v.string_at("type").value_or("");
  Op& op = (*find_op(id));
  if (type == "stdout" || type == "stderr") {
    Bytes& into = type == "stdout" ? op.output.out : op.output.err;
    into += v.string_at("text").value_or("");
  } else if (type == "result") {
    add_results(op, v);
  } else if (type == "error") {
    CodeError e;
    e.name = std::string(v.string_at("name").value_or("Error"));
    e.value = std::string(v.string_at("value").value_or(""));
    e.traceback = std::string(v.string_at("traceback").value_or(""));
    if (e.traceback.empty()) e.traceback = e.name + ": " + e.value + "\n";
    op.output.err += e.traceback;
    op.code_error = std::move(e);
  }
  return std::nullopt;
}

// A Jupyter-style bundle: text/plain first, then the richer forms.
void E2bMachine::add_results(Op& op, const json::Value& v) {
  struct Field {
    std::string_view key, mime;
  };
  static constexpr Field kFields[] = {
      {"text", "text/plain"},
      {"html", "text/html"},
      {"markdown", "text/markdown"},
      {"svg", "image/svg+xml"},
      {"png", "image/png"},
      {"jpeg", "image/jpeg"},
      {"pdf", "application/pdf"},
      {"latex", "text/latex"},
      {"json", "application/json"},
      {"javascript", "application/javascript"},
      {"data", "application/vnd.e2b.data+json"},
      {"chart", "application/vnd.e2b.chart+json"},
  };
  for (const Field& f : kFields) {
    const json::Value* field = v.find(f.key);
    if (!field || field->is_null()) continue;
    RichOutput out;
    out.mime_type = std::string(f.mime);
    out.data = field->is_string() ? field->text() : to_json_text(*field);
    op.results.push_back(std::move(out));
  }
}

void E2bMachine::check_code_gone(OpId id, Problem problem, Instant now) {
  if (gone_ || (expires_at_ && now >= *expires_at_)) {
    gone_ = true;
    return void(fail(id, gone_problem(), now));
  }
  fail(id, std::move(problem), now);
}

// A timed-out or cancelled cell: the only way to stop it is to restart its context (a fresh
// one is deleted instead).
void E2bMachine::stop_code(OpId id, Termination why, Instant now) {
  Op& op = (*find_op(id));
  op.deadline.reset();
  op.forced = why;
  op.stopping = true;
  close_conns_of(id);
  if (op.context.empty()) {
    // The context is still being made: its reply finds the operation gone and, when it was
    // a fresh one, nobody deletes it; the sandbox's kill does.
    return finish_code(id, now, /*wait_for_context=*/true);
  }
  if (!op.ephemeral_context)
    code_call(0, "POST", "/contexts/" + op.context + "/restart", {}, [](Result<Reply>, Instant) {});
  finish_code(id, now);
}

void E2bMachine::finish_code(OpId id, Instant now, bool wait_for_context) {
  Op* found = find_op(id);
  if (!found) return;
  Op& op = *found;
  if (wait_for_context) {
    op.stopping = true;
    if (op.cancelled) return cancelled(id, now);
    ExecResult r;
    r.termination = *op.forced;
    r.duration = now - op.exec_started;
    return complete(id, std::move(r), now);
  }
  if (op.ephemeral_context)
    code_call(0, "DELETE", "/contexts/" + op.context, {}, [](Result<Reply>, Instant) {});
  if (op.cancelled) return cancelled(id, now);
  ExecResult r;
  r.duration = now - op.exec_started;
  if (op.forced) {
    r.termination = *op.forced;
  } else {
    r.exit_code = op.code_error ? 1 : 0;
    r.error = std::move(op.code_error);
    r.stdout_bytes = std::move(op.output.out);
    r.stderr_bytes = std::move(op.output.err);
    r.results = std::move(op.results);
  }
  complete(id, std::move(r), now);
}

}  // namespace sandboxio::e2b::detail
