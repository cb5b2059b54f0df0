// e2b:// machine: its inputs, deadlines, 429 retries, cancellation, info and kill. The
// operation families live in control_plane.cpp, envd_process.cpp, envd_files.cpp and
// code_interpreter.cpp (see machine.hpp).
//   info: GET /sandboxes/{id} -> Done(SandboxInfo)
//   kill: DELETE /sandboxes/{id} -> Done (404: already gone)
// Every exchange goes through send(): a 429 is retried after Retry-After (bounded), up to
// kMaxRetries times, when its body was small enough to keep.
#include "machine.hpp"

#include <algorithm>

#include "sandboxio/duration.hpp"

namespace sandboxio::e2b {
namespace detail {

E2bMachine::E2bMachine(Config config)
    : HttpMachine("e2b", IsolationTier::Microvm, "E2B"), config_(std::move(config)) {
  http_.keep_alive(kIdlePerEndpoint, kIdleLimit);
}

// ---- inputs ----

void E2bMachine::handle_connect_failed(ConnId id, Problem problem, Instant now) {
  // An idle connection that died is forgotten; a reused one that died before any reply byte
  // carries its request again on a new connection, when that is safe.
  if (http_.forget_idle(id) || http_.retry_stale(id)) return;
  backend::Exchange* x = http_.find(id);
  if (!x) return;
  if (problem.code == errc::ConnectionFailed) {
    problem.code = errc::BackendUnavailable;
    problem.detail = "cannot reach E2B at " + x->origin + ": " + problem.detail;
    problem.hint =
        "Check E2B_API_URL / E2B_SANDBOX_URL / E2B_DOMAIN and the network; `sandboxio "
        "doctor` checks the control plane.";
  }
  http_.finish(id, std::move(problem), now);
}

void E2bMachine::handle_timeout(Instant now) {
  http_.expire_idle(now);
  if (renew_at_ && now >= *renew_at_ && !renewing_) renew_lease(now);
  std::vector<OpId> outlived;
  for (const auto& [id, op] : ops_) {
    if (op.backstop && now >= *op.backstop) outlived.push_back(id);
  }
  for (OpId id : outlived) {  // the stream outlived the kill: report what is known
    find_op(id)->backstop.reset();
    close_conns_of(id);
    finish_command(id, now);
  }
  for (OpId id : due(now)) {
    Op* op = find_op(id);
    if (!op) continue;
    switch (op->kind) {
      case OpState::Kind::Create:
        fail(id,
             Problem{
                 errc::CreateTimeout,
                 "creating the E2B sandbox took longer than " +
                     format_duration(std::chrono::duration_cast<nanoseconds>(op->create_timeout)),
                 {}},
             now);  // the reply that comes back is killed (created_after_all)
        break;
      case OpState::Kind::Command:
        kill_command(id, Termination::Timeout, now);
        break;
      case OpState::Kind::Code:
        stop_code(id, Termination::Timeout, now);
        break;
      case OpState::Kind::Control:
        close_conns_of(id);
        expire(id, now);
        break;
    }
  }
  std::vector<Retry> ready;
  for (auto it = retries_.begin(); it != retries_.end();) {
    if (now >= it->at) {
      ready.push_back(std::move(*it));
      it = retries_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& r : ready) {
    if (r.op != 0 && !alive(r.op)) continue;
    send(r.op, std::move(r.origin), std::move(r.request), std::move(r.then), r.attempt);
  }
}

OpId E2bMachine::submit_info(Instant now) {
  const OpId id = open(Operation::Info, now);
  if (!alive(id)) return id;
  if (auto p = need_sandbox(now, /*paused_ok=*/true)) return fail(id, std::move(*p), now);
  api_call(id, "GET", "/sandboxes/" + sandbox_, {}, [this, id](Result<Reply> r, Instant t) {
    const Reply* reply = reply_for(id, r, t);
    if (!reply) return;
    if (reply->status != 200) return void(fail(id, api_problem(*reply, "info"), t));
    auto doc = json::parse(reply->body);
    if (!doc) return void(fail(id, doc.problem(), t));
    const std::string state(doc.value().string_at("state").value_or("running"));
    complete(
        id,
        sandbox_info(state == "paused" ? SandboxState::Paused : SandboxState::Running, lifetime_),
        t);
  });
  return id;
}

OpId E2bMachine::submit_kill(Instant now) {
  renew_at_.reset();  // the lease ends with the sandbox
  released_ = true;
  const OpId id = open(Operation::Kill, now);
  if (!alive(id)) return id;
  if (sandbox_.empty())
    return fail(id, Problem{errc::SandboxError, "no sandbox yet: nothing to kill", {}}, now);
  if (gone_) {
    http_.close_idle(now);
    return complete(id, std::monostate{}, now), id;
  }
  api_call(id, "DELETE", "/sandboxes/" + sandbox_, {}, [this, id](Result<Reply> r, Instant t) {
    if (!alive(id)) return;
    if (!r) return void(fail(id, r.problem(), t));
    const int s = r.value().status;
    if (s != 204 && s != 200 && s != 404) return void(fail(id, api_problem(r.value(), "kill"), t));
    gone_ = true;
    http_.close_idle(t);  // nothing more to send: other sandboxes may reuse them
    complete(id, std::monostate{}, t);
  });
  return id;
}

void E2bMachine::submit_cancel(OpId id, Instant now) {
  Op* found = find_op(id);
  if (!found || found->cancelled) return;
  Op& op = *found;
  op.cancelled = true;
  switch (op.kind) {
    case OpState::Kind::Create:
      // The reply may still make a sandbox: it is killed when it comes (created_after_all),
      // and the driver keeps driving while busy().
      if (!sandbox_.empty()) {
        kill_created(sandbox_);
        sandbox_.clear();
      }
      return cancelled(id, now);
    case OpState::Kind::Command:
      return kill_command(id, Termination::Cancelled, now);
    case OpState::Kind::Code:
      return stop_code(id, Termination::Cancelled, now);
    case OpState::Kind::Control:
      close_conns_of(id);
      return cancelled(id, now);
  }
}

bool E2bMachine::busy() const {
  return !http_.empty() || !retries_.empty();
}

std::optional<Instant> E2bMachine::poll_deadline() const {
  std::optional<Instant> best = ops_deadline();
  for (const auto& [id, op] : ops_)
    best = earliest(best, op.backstop);
  for (const auto& r : retries_)
    best = earliest(best, r.at);
  best = earliest(best, renewing_ ? std::nullopt : renew_at_);
  return earliest(best, http_.idle_deadline());
}

Problem E2bMachine::gone_problem() const {
  return Problem{errc::SandboxGone,
                 "E2B sandbox " + sandbox_ +
                     " no longer exists (killed, reaped or its "
                     "timeout ran out)",
                 {}};
}

Problem E2bMachine::not_found(const std::string& id) {
  return Problem{errc::SandboxNotFound, "E2B has no sandbox \"" + id + "\"", {}};
}

std::optional<Problem> E2bMachine::need_key() const {
  if (!config_.api_key.empty()) return std::nullopt;
  return Problem{errc::CredentialsMissing, "E2B_API_KEY is not set",
                 "Export E2B_API_KEY (from https://e2b.dev/dashboard); sandboxio never reads "
                 "it from a DSN."};
}

// A control-plane reply that is not what was hoped for. E2B's body is
// {"code": <int>, "message": "..."}.
Problem E2bMachine::api_problem(const Reply& r, std::string_view what) const {
  const std::string msg = r.message();
  if (r.status == 401 || r.status == 403)
    return Problem{errc::AuthenticationError,
                   "E2B refused the API key (" + std::to_string(r.status) + "): " + msg,
                   "Check E2B_API_KEY: it must be a valid key of your E2B team."};
  if (r.status == 429)
    return Problem{errc::RateLimited,
                   "E2B kept answering 429 Too Many Requests to " + std::string(what) + " after " +
                       std::to_string(kMaxRetries) + " retries: " + msg,
                   {}};
  if (r.status >= 500)
    return Problem{
        errc::BackendUnavailable,
        "E2B answered " + std::to_string(r.status) + " to " + std::string(what) + ": " + msg,
        {}};
  return Problem{
      what == "create" ? errc::CreateFailed : errc::SandboxError,
      "E2B answered " + std::to_string(r.status) + " to " + std::string(what) + ": " + msg,
      {}};
}

std::optional<Problem> E2bMachine::need_sandbox(Instant now, bool paused_ok) const {
  if (sandbox_.empty())
    return Problem{errc::ApiMisuse, "no sandbox yet: call create() or connect() first", {}};
  if (gone_ || (expires_at_ && now >= *expires_at_)) return gone_problem();
  if (paused_ && !paused_ok)
    return Problem{errc::SandboxGone, "E2B sandbox " + sandbox_ + " is paused",
                   "Resume it first: e2b::extensions(m).submit_resume()."};
  return std::nullopt;
}

// ---- HTTP exchanges ----
Origin E2bMachine::envd_origin(std::string_view port) const {
  if (config_.sandbox) return *config_.sandbox;
  Origin o;
  o.endpoint.kind = Endpoint::Kind::Tcp;
  o.endpoint.address = std::string(port) + "-" + sandbox_ + "." + domain_;
  o.endpoint.port = 443;
  o.endpoint.tls = true;
  o.endpoint.server_name = o.endpoint.address;
  o.endpoint.ca_file = config_.ca_file;
  o.host = o.endpoint.address;
  return o;
}

http::Request E2bMachine::envd_request(std::string method, std::string target,
                                       std::string_view port) const {
  http::Request req;
  req.method = std::move(method);
  req.target = std::move(target);
  req.headers.push_back({"User-Agent", std::string(kUserAgent)});
  req.headers.push_back({"E2b-Sandbox-Id", sandbox_});
  req.headers.push_back({"E2b-Sandbox-Port", std::string(port)});
  if (!access_token_.empty()) req.headers.push_back({"X-Access-Token", access_token_});
  return req;
}

ConnId E2bMachine::api_call(OpId op, std::string method, std::string target, Bytes body,
                            Then then) {
  http::Request req;
  req.method = std::move(method);
  req.target = std::move(target);
  req.headers.push_back({"User-Agent", std::string(kUserAgent)});
  req.headers.push_back({"X-API-KEY", config_.api_key});
  if (!body.empty()) req.headers.push_back({"Content-Type", "application/json"});
  req.body = std::move(body);
  return send(op, config_.api, std::move(req), std::move(then));
}

ConnId E2bMachine::rpc(OpId op, std::string_view method, Bytes body, Then then) {
  http::Request req = envd_request("POST", "/" + std::string(method), kEnvdPort);
  req.headers.push_back({"Content-Type", "application/json"});
  req.headers.push_back({"Connect-Protocol-Version", "1"});
  req.body = std::move(body);
  return send(op, envd_origin(kEnvdPort), std::move(req), std::move(then));
}

ConnId E2bMachine::code_call(OpId op, std::string method, std::string target, Bytes body,
                             Then then) {
  http::Request req = envd_request(std::move(method), std::move(target), kCodePort);
  if (!body.empty()) req.headers.push_back({"Content-Type", "application/json"});
  req.body = std::move(body);
  return send(op, envd_origin(kCodePort), std::move(req), std::move(then));
}

ConnId E2bMachine::send(OpId op, Origin origin, http::Request req, Then then, int attempt) {
  auto head = http::write_request_head(req, origin.host, req.body.size());
  // A request is kept to be sent again after a 429, unless its body is large (a file):
  // that body goes to the link as it is, and a 429 on it is reported (RateLimited).
  const bool keep = req.body.size() <= kRetryBodyLimit;
  std::vector<Bytes> wire;
  if (head) {
    wire.push_back(std::move(head).value());
    if (keep && !req.body.empty()) {
      wire.push_back(req.body);
    } else if (!req.body.empty()) {
      wire.push_back(std::move(req.body));
    }
  }
  if (!keep) attempt = kMaxRetries;
  const std::string where = (origin.endpoint.tls ? "https://" : "http://") + origin.host;
  std::string what = req.method + " " + where + req.target.substr(0, req.target.find('?'));
  const Endpoint endpoint = origin.endpoint;
  auto retry = std::make_shared<Retry>();
  retry->op = op;
  retry->origin = std::move(origin);
  if (keep) retry->request = std::move(req);
  retry->attempt = attempt;
  Then wrapped = [this, retry, then = std::move(then)](Result<Reply> r, Instant now) mutable {
    if (r && r.value().status == 429 && retry->attempt < kMaxRetries &&
        (retry->op == 0 || alive(retry->op))) {
      // Too Many Requests: wait what Retry-After says (bounded), then send it again.
      std::chrono::seconds wait = 1s;
      if (auto h = r.value().header("Retry-After")) {
        const long long s = std::strtoll(std::string(*h).c_str(), nullptr, 10);
        if (s > 0) wait = std::chrono::seconds(s);
      }
      wait = std::min(wait, kMaxRetryAfter);
      retry->at = now + std::chrono::duration_cast<nanoseconds>(wait);
      retry->then = std::move(then);
      retry->attempt += 1;
      retries_.push_back(std::move(*retry));
      return;
    }
    then(std::move(r), now);
  };
  const ConnId id = http_.start(op, endpoint, std::move(wire), std::move(wrapped), std::move(what));
  http_.find(id)->origin = where;
  return id;
}

void E2bMachine::close_conns_of(OpId op) {
  http_.drop_op(op);
  retries_.erase(
      std::remove_if(retries_.begin(), retries_.end(), [op](const Retry& r) { return r.op == op; }),
      retries_.end());
}

}  // namespace detail

CapabilitySet declared_capabilities() {
  return CapabilitySet{Capability::NetworkPolicy, Capability::NetworkAllowList,
                       Capability::Filesystem,    Capability::Streaming,
                       Capability::StatefulCode,  Capability::RichOutput,
                       Capability::Reattach,      Capability::Stdin};
}

std::unique_ptr<Machine> make_machine(Config config) {
  return std::make_unique<detail::E2bMachine>(std::move(config));
}

Extensions& extensions(Machine& machine) {
  if (auto* e = dynamic_cast<Extensions*>(&machine.backend())) return *e;
  throw Error(errc::CapabilityNotSupported,
              std::string(machine.scheme()) + ":// has no E2B extensions (pause, resume, PTY)");
}

}  // namespace sandboxio::e2b
