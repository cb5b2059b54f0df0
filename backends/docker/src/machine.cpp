// docker:// machine: its inputs, deadlines, cancellation, info and kill. The operation
// families live in create.cpp, exec.cpp, files.cpp and managed.cpp (see machine.hpp).
//
// States of the operations here:
//   info:  GET /containers/{id}/json -> Done(SandboxInfo) | Failed
//   kill:  DELETE /containers/{id} -> Done; 409 (removal under way) -> POST .../wait -> DELETE
//          again, at most three times (create.cpp, delete_until_gone)
#include "machine.hpp"

#include "sandboxio/codec/json.hpp"
#include "sandboxio/duration.hpp"

namespace sandboxio::docker {
namespace detail {

DockerMachine::DockerMachine(Config config)
    : AgentMachine("docker",
                   config.runtime == "runsc" ? IsolationTier::Gvisor : IsolationTier::Container,
                   "the Docker engine"),
      config_(std::move(config)) {}

// ---- inputs ----

void DockerMachine::handle_connect_failed(ConnId id, Problem problem, Instant now) {
  if (egress_conn(id)) return egress_connect_failed(id, problem, now);
  backend::Exchange* x = http_.find(id);
  if (!x) return;
  if (problem.code == errc::ConnectionFailed || problem.code == errc::ProtocolError) {
    problem.code = errc::BackendUnavailable;
    problem.detail =
        "cannot reach the Docker engine at " + describe_endpoint() + ": " + problem.detail;
    problem.hint =
        "Start dockerd (or Docker Desktop), or point DOCKER_HOST at a running engine; "
        "`sandboxio doctor` checks it.";
  }
  if (id == direct_) return direct_ended(std::nullopt, now);
  if (x->upgraded && id != lease_) {  // an exec's output stream broke
    const std::uint64_t key = x->tag;
    http_.drop(id);
    return exec_stream_broke(key, std::move(problem), now);
  }
  if (id == lease_) {
    lease_ = 0;
    if (x->upgraded) {
      http_.drop(id);
      return lease_lost(std::move(problem), now);
    }
  }
  http_.finish(id, std::move(problem), now);
}

std::size_t DockerMachine::handle_bytes(ConnId id, std::string_view data, Instant now) {
  if (egress_conn(id)) return egress_bytes(id, data, now);
  backend::Exchange* x = http_.find(id);
  if (!x) return data.size();
  if (id == direct_) return direct_bytes(data, now);
  if (x->upgraded) return id == lease_ ? lease_bytes(data, now) : exec_bytes(id, data, now);
  const auto fed = http_.feed(id, data, now);
  if (!fed.upgraded) return fed.used;
  data.remove_prefix(fed.used);
  x = http_.find(id);
  if (id == lease_) {  // the attach stream is open (with the agent, it speaks its protocol)
    Then then = std::move(x->then);
    x->then = {};
    Reply r;
    r.status = x->parser->status();
    if (then) then(std::move(r), now);
    return fed.used + lease_bytes(data, now);
  }
  exec_upgraded(id, now);
  if (!http_.find(id)) return fed.used + data.size();
  return fed.used + exec_bytes(id, data, now);
}

void DockerMachine::handle_eof(ConnId id, Instant now) {
  if (egress_conn(id)) return egress_eof(id, now);
  backend::Exchange* x = http_.find(id);
  if (!x) return;
  if (id == direct_) return direct_ended(std::nullopt, now);
  if (x->upgraded && id == lease_ && bridge_ && !agent_ready_ && alive(agent_create_)) {
    return bridge_unavailable(agent_create_, now);  // the bridge found no agent to talk to
  }
  if (x->upgraded && id == lease_) {  // the container's main process ended (lifetime, kill)
    http_.drop(id);
    lease_ = 0;
    gone_ = true;
    return lease_lost(gone_problem(), now);
  }
  if (x->upgraded) {
    const std::uint64_t key = x->tag;
    http_.drop(id);
    return exec_stream_ended(key, now);
  }
  http_.eof(id, now);
}

void DockerMachine::handle_timeout(Instant now) {
  egress_timeout(now);
  for (OpId id : due(now)) {
    Op* op = find_op(id);
    if (!op) continue;
    if (op->kind == OpState::Kind::Create) {
      if (id == agent_create_) drop_lease();  // the agent ends the container with its lease
      fail(id,
           Problem{errc::CreateTimeout,
                   "creating the container took longer than " +
                       format_duration(std::chrono::duration_cast<nanoseconds>(op->create_timeout)),
                   {}},
           now);  // the continuation that comes back removes what was made
    } else if (!agent_stop(id, Termination::Timeout, now)) {  // not through the agent
      if (op->kind == OpState::Kind::Exec) {
        kill_tree(id, Termination::Timeout, now);
      } else {
        expire_operation(id, now);
      }
    }
  }
  exec_timers(now);
}

// A control operation (info, kill, a file transfer, listing) passed its deadline: its
// exchanges and internal execs are dropped, and it fails with OperationTimeout.
void DockerMachine::expire_operation(OpId id, Instant now) {
  for (auto it = execs_.begin(); it != execs_.end();) {
    if (it->second.op == id && !it->second.user) {
      if (it->second.conn != 0) http_.drop(it->second.conn);
      killing_.erase(it->first);
      it = execs_.erase(it);
    } else {
      ++it;
    }
  }
  http_.drop_op(id);
  expire(id, now);
}

OpId DockerMachine::submit_info(Instant now) {
  const OpId id = open(Operation::Info, now);
  if (!alive(id)) return id;
  if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
  call(id, "GET", path("/containers/" + container_ + "/json"), {},
       [this, id](Result<Reply> r, Instant t) {
         const Reply* reply = reply_for(id, r, t);
         if (!reply) return;
         if (reply->status != 200) return void(fail(id, daemon_error(*reply), t));
         auto doc = json::parse(reply->body);
         if (!doc) return void(fail(id, doc.problem(), t));
         const json::Value* state = doc.value().find("State");
         const std::string_view status = state ? state->string_at("Status").value_or("") : "";
         complete(id, docker_info(state_of(status)), t);
       });
  return id;
}

OpId DockerMachine::submit_kill(Instant now) {
  const OpId id = open(Operation::Kill, now);
  if (!alive(id)) return id;
  if (container_.empty()) {
    complete(id, std::monostate{}, now);
    return id;
  }
  remove_container(id, now);
  return id;
}

void DockerMachine::submit_cancel(OpId id, Instant now) {
  Op* op = find_op(id);
  if (!op || op->cancelled) return;
  op->cancelled = true;
  // Through the agent, the Exit or CodeDone that follows ends it as cancelled.
  if (agent_stop(id, Termination::Cancelled, now)) return;
  if (op->kind == OpState::Kind::Exec) {
    kill_tree(id, Termination::Cancelled, now);
  } else if (op->channel != 0) {
    // A file transfer through the agent: forget it (a read is cancelled there too; a write
    // already sent finishes). A code context being started is ended (the agent takes the two
    // in order).
    agent_cancel_call(id, now);
  } else if (op->kind == OpState::Kind::Create && id == agent_create_) {
    drop_lease();  // waiting for the agent's Welcome: the container ends with its lease
    cancelled(id, now);
  } else if (op->kind == OpState::Kind::Create && id == pulling_) {
    // Pulling the image: nothing is made yet, and closing the pull's connection stops it.
    pulling_ = 0;
    http_.drop_op(id);
    cancelled(id, now);
  } else if (op->kind == OpState::Kind::Create) {
    op->deadline.reset();  // the continuation in flight sees `cancelled` and tears down
  } else {
    http_.drop_op(id);  // short control exchanges: drop them
    cancelled(id, now);
  }
}

bool DockerMachine::busy() const {
  return http_.size() > (lease_ != 0 ? 1u : 0u) + (direct_ != 0 ? 1u : 0u);
}

std::optional<Instant> DockerMachine::poll_deadline() const {
  std::optional<Instant> best = earliest(ops_deadline(), egress_deadline());
  for (const auto& [key, e] : execs_) {
    best = earliest(best, e.reinspect_at);
    best = earliest(best, e.backstop_at);
  }
  return best;
}

Problem DockerMachine::gone_problem() const {
  return Problem{
      errc::SandboxGone,
      "container " + short_id() + " no longer exists (killed, reaped or its lifetime ended)",
      {}};
}

Problem DockerMachine::not_found(const std::string& id) const {
  return Problem{errc::SandboxNotFound, "no container \"" + id + "\" on this Docker engine", {}};
}

std::string DockerMachine::describe_endpoint() const {
  const Endpoint& e = config_.endpoint;
  if (e.kind == Endpoint::Kind::Unix) return "unix://" + e.address;
  return std::string(e.tls ? "tcp+tls://" : "tcp://") + e.address + ":" + std::to_string(e.port);
}

std::optional<Problem> DockerMachine::need_sandbox(Instant now) const {
  if (container_.empty())
    return Problem{errc::ApiMisuse, "no sandbox yet: call create() or connect() first", {}};
  if (gone_ || (expires_at_ && now >= *expires_at_)) return gone_problem();
  return std::nullopt;
}

void DockerMachine::drop_lease() {
  if (direct_ != 0) http_.drop(direct_);  // the agent's other way in goes with it
  direct_ = 0;
  direct_ready_ = false;
  if (lease_ == 0) return;
  http_.drop(lease_);
  lease_ = 0;
}

// ---- HTTP exchanges ----
ConnId DockerMachine::call(OpId op, std::string method, std::string target, Bytes body, Then then) {
  http::Request req;
  req.method = std::move(method);
  req.target = std::move(target);
  if (!body.empty() || req.method == "POST" || req.method == "PUT")
    req.headers.push_back({"Content-Type", "application/json"});
  req.body = std::move(body);
  return send(op, std::move(req), std::move(then));
}

ConnId DockerMachine::send(OpId op, http::Request req, Then then) {
  auto wire = http::write_request(req, "docker");
  std::vector<Bytes> pieces;
  if (wire) pieces.push_back(std::move(wire).value());
  return send_wire(op, req.method, req.target, std::move(pieces), std::move(then));
}

ConnId DockerMachine::upgrade(OpId op, std::string target, std::string body, Then then) {
  http::Request req;
  req.method = "POST";
  req.target = std::move(target);
  req.headers = {
      {"Content-Type", "application/json"}, {"Connection", "Upgrade"}, {"Upgrade", "tcp"}};
  req.body = std::move(body);
  const ConnId conn = send(op, std::move(req), std::move(then));
  http_.find(conn)->may_upgrade = true;
  return conn;
}

// A request already written (head and body, in pieces) on a connection of its own.
ConnId DockerMachine::send_wire(OpId op, std::string_view method, std::string_view target,
                                std::vector<Bytes> wire, Then then) {
  std::string what = std::string(method) + " " + std::string(target.substr(0, target.find('?')));
  return http_.start(op, config_.endpoint, std::move(wire), std::move(then), std::move(what));
}

}  // namespace detail

CapabilitySet declared_capabilities() {
  return CapabilitySet{Capability::NetworkPolicy, Capability::Filesystem, Capability::Streaming,
                       Capability::ResourceCaps,  Capability::Reattach,   Capability::Stdin};
}

std::unique_ptr<Machine> make_machine(Config config) {
  return std::make_unique<detail::DockerMachine>(std::move(config));
}

}  // namespace sandboxio::docker
