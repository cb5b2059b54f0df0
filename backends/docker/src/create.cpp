// docker:// create and connect. States of a create:
//   POST /containers/create --404 no such image--> POST /images/create (pull) --> create again
//   created --> POST .../attach (the owner lease, a 101 held open; not with outlive_owner)
//           --> POST .../start --> Done(SandboxInfo)
// A step that comes back after a timeout or cancel removes what exists (create_abandoned); a
// cancel during the pull closes it and ends at once (nothing exists yet); a start that fails
// removes the container (remove_after_failed_start). With the agent, its Welcome is followed
// by the direct socket where this client may reach it (agent.cpp, find_direct). connect:
// GET .../json, managed and running --> Done; when the agent is the container's init, first a
// session with it: its direct socket, else a bridge exec (agent.cpp, open_direct,
// open_bridge). kill: DELETE ...?force=1; a 409 waits with
// POST .../wait?condition=removed and then asks again (delete_until_gone).
#include <algorithm>

#include "machine.hpp"
#include "sandboxio/codec/json.hpp"

namespace sandboxio::docker::detail {

OpId DockerMachine::submit_create(const CreateOptions& options, Instant now) {
  const OpId id = open(Operation::Create, now);
  if (Op* o = find_op(id)) trace_record(o->record, options.trace);
  if (!alive(id)) return id;
  if (!container_.empty())
    return fail(id,
                Problem{errc::ApiMisuse, "this machine already holds a sandbox",
                        "Make one machine per sandbox."},
                now);
  if (auto r = options.validate(); !r) return fail(id, r.problem(), now);
  if (config_.image.empty())
    return fail(id, Problem{errc::InvalidDsn, "docker:// needs an image: docker://IMAGE", {}}, now);
  adopt(egress_setup(options));
  Op& op = *find_op(id);
  op.kind = OpState::Kind::Create;
  op.create_timeout = options.create_timeout;
  op.deadline = now + std::chrono::duration_cast<nanoseconds>(options.create_timeout);
  create_container(id, /*pulled=*/false, now);
  sweep_unstarted();
  return id;
}

OpId DockerMachine::submit_connect(std::string sandbox_id, const CreateOptions& options,
                                   Instant now) {
  const OpId id = open(Operation::Connect, now);
  if (Op* o = find_op(id)) trace_record(o->record, options.trace);
  if (!alive(id)) return id;
  if (!container_.empty())
    return fail(id, Problem{errc::ApiMisuse, "this machine already holds a sandbox", {}}, now);
  if (sandbox_id.empty() || sandbox_id.find_first_of("/?#% ") != std::string::npos) {
    return fail(id, not_found(sandbox_id), now);
  }
  adopt(options);
  call(id, "GET", path("/containers/" + sandbox_id + "/json"), {},
       [this, id, sandbox_id](Result<Reply> r, Instant t) {
         if (!alive(id)) return;
         if (!r) return void(fail(id, r.problem(), t));
         if (r.value().status == 404) return void(fail(id, not_found(sandbox_id), t));
         if (r.value().status != 200) return void(fail(id, daemon_error(r.value()), t));
         auto doc = json::parse(r.value().body);
         if (!doc) return void(fail(id, doc.problem(), t));
         const json::Value* cfg = doc.value().find("Config");
         const json::Value* labels = cfg ? cfg->find("Labels") : nullptr;
         const auto managed = labels ? labels->string_at(labels::kManaged) : std::nullopt;
         if (managed != "true") {
           return void(fail(id,
                            Problem{errc::SandboxNotFound,
                                    "container " + sandbox_id + " is not managed by sandboxio",
                                    "connect() attaches only to sandboxes sandboxio created."},
                            t));
         }
         const json::Value* state = doc.value().find("State");
         if (!state || state->bool_at("Running") != true) {
           return void(fail(id, gone_problem(), t));
         }
         container_ = std::string(doc.value().string_at("Id").value_or(sandbox_id));
         if (auto life = labels->string_at(labels::kLifetime)) {
           lifetime_ = std::chrono::seconds(std::atoll(std::string(*life).c_str()));
         }
         if (auto u = labels->string_at(kUserLabel)) exec_user_ = std::string(*u);
         name_sandbox(container_, id);
         if (config_.bridge && labels->string_at(kAgentLabel) == "on") {
           // Straight to the agent's socket where this client may reach it, else a bridge exec.
           const std::int64_t pid = state->int_at("Pid").value_or(0);
           if (may_go_direct() && pid > 0) return open_direct(id, pid, t);
           return open_bridge(id, t);
         }
         complete(id, docker_info(SandboxState::Running), t);
       });
  return id;
}

// A create step came back after the operation ended (timeout) or was cancelled: remove what
// exists and report. Returns true when the step must not go on.
bool DockerMachine::create_abandoned(OpId id, Instant now) {
  const bool gone = !alive(id);
  const bool cancel = !gone && find_op(id)->cancelled;
  if (!gone && !cancel) return false;
  if (!container_.empty()) {
    const std::string cid = container_;
    drop_lease();
    call(cancel ? id : 0, "DELETE", path("/containers/" + cid + "?force=1&v=1"), {},
         [this, id, cancel](Result<Reply>, Instant t) {
           if (cancel) cancelled(id, t);
         });
    container_.clear();
  } else if (cancel) {
    cancelled(id, now);
  }
  return true;
}

void DockerMachine::create_container(OpId id, bool pulled, Instant now) {
  const auto wall = wall_at(now);
  const std::int64_t created =
      wall ? std::chrono::duration_cast<std::chrono::seconds>(wall->time_since_epoch()).count() : 0;
  exec_user_ = agent_user(config_);
  call(id, "POST", path("/containers/create"), create_body(config_, *options_, created),
       [this, id, pulled](Result<Reply> r, Instant t) {
         if (r && r.value().status == 201) {
           auto doc = json::parse(r.value().body);
           if (doc) container_ = std::string(doc.value().string_at("Id").value_or(""));
         }
         if (create_abandoned(id, t)) return;
         if (!r) return void(fail(id, r.problem(), t));
         const Reply& reply = r.value();
         // Docker says "No such image: ...", Podman "no such image: ...".
         if (reply.status == 404 && !pulled && config_.pull_missing &&
             (reply.message().find("No such image") != std::string::npos ||
              reply.message().find("no such image") != std::string::npos)) {
           return pull_image(id, t);
         }
         if (reply.status == 404) {
           return void(fail(id,
                            Problem{errc::ImageNotFound,
                                    "image \"" + config_.image + "\" is not on this engine" +
                                        (config_.pull_missing ? " and could not be pulled" : ""),
                                    {}},
                            t));
         }
         if (reply.status != 201 || container_.empty()) {
           return void(fail(id,
                            Problem{errc::CreateFailed,
                                    "the Docker engine refused the container: " + reply.message(),
                                    {}},
                            t));
         }
         name_sandbox(container_, id);
         // With the agent, the attach stream is the owner's session (one that may end without
         // the sandbox, with outlive_owner); without it, the lease, when there is one.
         if (config_.agent) return upload_agent(id, t);
         if (options_->outlive_owner) return start_container(id, t);
         attach_lease(id, t);
       });
}

void DockerMachine::pull_image(OpId id, Instant) {
  std::string image = config_.image, tag;
  const std::size_t at = image.find('@');
  const std::size_t slash = image.find_last_of('/');
  const std::size_t colon = image.find_last_of(':');
  if (at == std::string::npos && colon != std::string::npos &&
      (slash == std::string::npos || colon > slash)) {
    tag = image.substr(colon + 1);
    image.resize(colon);
  }
  if (tag.empty() && at == std::string::npos) tag = "latest";
  std::string target = path("/images/create?fromImage=" + percent_encode(image));
  if (!tag.empty()) target += "&tag=" + percent_encode(tag);
  auto errors = std::make_shared<std::string>();
  auto lines = std::make_shared<http::LineSplitter>();
  pulling_ = id;
  const ConnId conn =
      call(id, "POST", std::move(target), {}, [this, id, errors](Result<Reply> r, Instant t) {
        pulling_ = 0;
        if (create_abandoned(id, t)) return;
        if (!r) return void(fail(id, r.problem(), t));
        if (r.value().status != 200 || !errors->empty()) {
          const std::string why = errors->empty() ? r.value().message() : *errors;
          return void(fail(
              id,
              Problem{errc::ImageNotFound, "pulling \"" + config_.image + "\" failed: " + why, {}},
              t));
        }
        create_container(id, /*pulled=*/true, t);
      });
  http_.find(conn)->on_body = [errors, lines](std::string_view piece,
                                              Instant) -> std::optional<Problem> {
    lines->feed(piece);
    while (auto line = lines->next_line()) {
      auto doc = json::parse(*line);
      if (!doc) continue;
      if (auto e = doc.value().string_at("error")) *errors = std::string(*e);
    }
    if (lines->error()) return *lines->error();
    return std::nullopt;
  };
}

// Containers created but never started by owners that are gone (a process killed between
// create and start): removed in the background, on this engine, once per machine. The
// machine cannot look at processes: it asks the driver which owners are gone
// (request::ProbeOwners) and removes those in handle_owners_gone().
void DockerMachine::sweep_unstarted() {
  if (swept_) return;
  swept_ = true;
  const std::string filters = R"({"label":["io.sandboxio.managed=true"],"status":["created"]})";
  call(0, "GET", path("/containers/json?all=1&filters=" + percent_encode(filters)), {},
       [this](Result<Reply> r, Instant) {
         if (!r || r.value().status != 200) return;
         auto doc = json::parse(r.value().body);
         if (!doc || !doc.value().is_array()) return;
         request::ProbeOwners probe;
         for (const auto& c : doc.value().items()) {
           const json::Value* labels = c.find("Labels");
           const auto owner = labels ? labels->string_at(labels::kOwner) : std::nullopt;
           const auto id = c.string_at("Id");
           if (!owner || !id || id->find_first_of("/?#") != std::string_view::npos) continue;
           if (sweep_candidates_.size() >= 1024) break;
           sweep_candidates_.emplace(std::string(*id), std::string(*owner));
           probe.owners.emplace_back(*owner);
         }
         if (!probe.owners.empty()) out_.push(std::move(probe));
       });
}

void DockerMachine::handle_owners_gone(std::vector<std::string> gone, Instant) {
  auto candidates = std::move(sweep_candidates_);
  sweep_candidates_.clear();
  for (const auto& [id, owner] : candidates) {
    if (std::find(gone.begin(), gone.end(), owner) == gone.end()) continue;
    call(0, "DELETE", path("/containers/" + id + "?force=1&v=1"), {},
         [](Result<Reply>, Instant) {});
  }
}

// The owner lease: the container's stdin, attached before start and held open for the
// machine's life. When this process dies, the stream closes and the container ends.
void DockerMachine::attach_lease(OpId id, Instant) {
  // With the agent, the same stream carries its protocol both ways.
  const std::string target = path(
      "/containers/" + container_ +
      (config_.agent ? "/attach?stream=1&stdin=1&stdout=1&stderr=1" : "/attach?stream=1&stdin=1"));
  lease_ = upgrade(id, target, {}, [this, id](Result<Reply> r, Instant t) {
    if (create_abandoned(id, t)) return;
    if (!r || r.value().status != 101) {
      const std::string why = r ? r.value().message() : r.problem().detail;
      remove_after_failed_start(id, "attaching the owner lease failed: " + why, t);
      return;
    }
    start_container(id, t);
  });
}

void DockerMachine::start_container(OpId id, Instant now) {
  // The lifetime's sleep starts after this request: the container cannot end of old age
  // before now + lifetime.
  const Instant expires = now + std::chrono::duration_cast<nanoseconds>(options_->lifetime);
  call(id, "POST", path("/containers/" + container_ + "/start"), {},
       [this, id, expires](Result<Reply> r, Instant t) {
         if (create_abandoned(id, t)) return;
         if (!r) return void(remove_after_failed_start(id, r.problem().detail, t));
         if (r.value().status != 204 && r.value().status != 304) {
           return void(remove_after_failed_start(id, r.value().message(), t));
         }
         expires_at_ = expires;
         lifetime_ = options_->lifetime;
         if (config_.agent && lease_ != 0) return agent_hello(id);
         complete(id, docker_info(SandboxState::Running), t);
       });
}

// Some configuration errors surface only at start: never leave the created container.
void DockerMachine::remove_after_failed_start(OpId id, const std::string& why, Instant) {
  const std::string cid = container_;
  container_.clear();
  drop_lease();
  call(id, "DELETE", path("/containers/" + cid + "?force=1&v=1"), {},
       [this, id, why](Result<Reply>, Instant t) {
         fail(id, Problem{errc::CreateFailed, "the container did not start: " + why, {}}, t);
       });
}

void DockerMachine::remove_container(OpId id, Instant) {
  gone_ = true;
  drop_lease();
  delete_until_gone(id, container_, kRemoveAttempts);
}

// DELETE ?force=1, then make sure. A 409 means a removal is already under way (AutoRemove after
// the lease closed, or the daemon's own clean-up after a restart): wait for it, then ask again,
// because a removal that fails leaves the container "dead" but present, and a dead container
// still counts as a leak. A 500 is asked again at once: Podman answers one when the container
// stops between its own check and its SIGKILL ("container state improper: stopped"), and a
// forced removal is safe to repeat. kill() returns once the daemon says the container is gone.
void DockerMachine::delete_until_gone(OpId id, std::string cid, int attempts) {
  call(id, "DELETE", path("/containers/" + cid + "?force=1&v=1"), {},
       [this, id, cid, attempts](Result<Reply> r, Instant t) {
         if (!alive(id)) return;
         if (!r) return void(fail(id, r.problem(), t));
         const int s = r.value().status;
         if (s == 204 || s == 200 || s == 404) return void(complete(id, std::monostate{}, t));
         if (s == 500 && attempts > 1) return delete_until_gone(id, cid, attempts - 1);
         if (s != 409 || attempts <= 1) return void(fail(id, daemon_error(r.value()), t));
         call(id, "POST", path("/containers/" + cid + "/wait?condition=removed"), {},
              [this, id, cid, attempts](Result<Reply> w, Instant t2) {
                if (!alive(id)) return;
                if (!w) return void(fail(id, w.problem(), t2));
                if (w.value().status == 404) return void(complete(id, std::monostate{}, t2));
                delete_until_gone(id, cid, attempts - 1);
              });
       });
}

}  // namespace sandboxio::docker::detail
