// e2b:// control plane (REST + JSON, X-API-KEY). States of a create:
//   POST /v2/sandboxes (404: an older control plane -> POST /sandboxes, v1) -> the sandbox,
//   its envd version and access token (adopt_sandbox) -> Done(SandboxInfo)
// A reply that comes after a timeout or cancel is killed (kill_created). connect: GET
// /sandboxes/{id} (paused: POST /v2/sandboxes/{id}/connect resumes it). list_managed pages
// through GET /v2/sandboxes?metadata=... by X-Next-Token. pause, resume and set_lifetime
// are the typed extensions (e2b.hpp).
#include <algorithm>

#include "machine.hpp"
#include "sandboxio/codec/json_writer.hpp"

namespace sandboxio::e2b::detail {

OpId E2bMachine::submit_create(const CreateOptions& options, Instant now) {
  const OpId id = open(Operation::Create, now);
  if (Op* o = find_op(id)) trace_record(o->record, options.trace);
  if (!alive(id)) return id;
  if (auto p = check_create(options)) return fail(id, std::move(*p), now);
  adopt(options);
  Op& op = *find_op(id);
  op.kind = OpState::Kind::Create;
  op.create_timeout = options.create_timeout;
  op.deadline = now + std::chrono::duration_cast<nanoseconds>(options.create_timeout);
  create_sandbox(id, "/v2/sandboxes", now);
  return id;
}

OpId E2bMachine::submit_connect(std::string sandbox_id, const CreateOptions& options, Instant now) {
  const OpId id = open(Operation::Connect, now);
  if (Op* o = find_op(id)) trace_record(o->record, options.trace);
  if (!alive(id)) return id;
  if (!sandbox_.empty())
    return fail(id, Problem{errc::ApiMisuse, "this machine already holds a sandbox", {}}, now);
  if (auto p = need_key()) return fail(id, std::move(*p), now);
  if (sandbox_id.empty() || sandbox_id.find_first_of("/?#% ") != std::string::npos)
    return fail(id, not_found(sandbox_id), now);
  adopt(options);
  api_call(id, "GET", "/sandboxes/" + sandbox_id, {},
           [this, id, sandbox_id](Result<Reply> r, Instant t) {
             if (!alive(id)) return;
             if (!r) return void(fail(id, r.problem(), t));
             const Reply& reply = r.value();
             if (reply.status == 404) return void(fail(id, not_found(sandbox_id), t));
             if (reply.status != 200) return void(fail(id, api_problem(reply, "connect"), t));
             auto doc = json::parse(reply.body);
             if (!doc) return void(fail(id, doc.problem(), t));
             if (auto p = adopt_sandbox(doc.value(), sandbox_id))
               return void(fail(id, std::move(*p), t));
             if (auto m = doc.value().find("metadata")) {
               if (auto life = m->string_at(labels::kLifetime))
                 lifetime_ =
                     std::chrono::seconds(std::strtoll(std::string(*life).c_str(), nullptr, 10));
             }
             const std::string state(doc.value().string_at("state").value_or("running"));
             if (state != "paused")
               return void(complete(id, sandbox_info(SandboxState::Running, lifetime_), t));
             // A paused sandbox is resumed by connecting to it.
             JsonWriter w;
             w.begin_object()
                 .key("timeout")
                 .value(static_cast<std::int64_t>(std::max<std::int64_t>(lifetime_.count(), 1)))
                 .end_object();
             api_call(id, "POST", "/v2/sandboxes/" + sandbox_id + "/connect", std::move(w).str(),
                      [this, id](Result<Reply> r2, Instant t2) {
                        if (!alive(id)) return;
                        if (!r2) return void(fail(id, r2.problem(), t2));
                        if (r2.value().status != 200 && r2.value().status != 201)
                          return void(fail(id, api_problem(r2.value(), "resume"), t2));
                        complete(id, sandbox_info(SandboxState::Running, lifetime_), t2);
                      });
           });
  return id;
}

std::optional<Problem> E2bMachine::check_create(const CreateOptions& options) const {
  if (!sandbox_.empty())
    return Problem{errc::ApiMisuse, "this machine already holds a sandbox",
                   "Make one machine per sandbox."};
  if (auto r = options.validate(); !r) return r.problem();
  if (auto p = need_key()) return p;
  if (options.network.learn) {
    return Problem{errc::PolicyUnenforceable,
                   "E2B cannot record the connections a sandbox tries (learning mode)",
                   "Learn on docker:// or local:// (sandboxio run --learn), then give e2b:// "
                   "the allow list it printed."};
  }
  if (!options.network.pinned.empty()) {
    return Problem{errc::PolicyUnenforceable,
                   "E2B resolves names itself: pinned names cannot be honoured",
                   "Drop NetworkPolicy::pinned for e2b://."};
  }
  for (const auto& host : options.network.allow) {
    // E2B's allowOut takes names, "*.domain" for the subdomains, addresses and ranges, but no
    // port: a name is matched on ports 80 and 443, whatever the list says.
    if (host.find(':') != std::string::npos) {
      return Problem{errc::PolicyUnenforceable,
                     "E2B's network rules cannot hold a port: \"" + host + "\"",
                     "List the host without its port; E2B matches names on ports 80 and 443."};
    }
  }
  if (config_.template_id.empty())
    return Problem{errc::InvalidDsn, "e2b:// needs a template: e2b://TEMPLATE", {}};
  return std::nullopt;
}

std::string E2bMachine::create_body(bool v1, Instant now) const {
  const CreateOptions& o = *options_;
  JsonWriter w;
  w.begin_object();
  w.key("templateID").value(config_.template_id);
  w.key("timeout").value(static_cast<std::int64_t>(leased_timeout(o.lifetime).count()));
  w.key("metadata").begin_object();
  w.key(labels::kManaged).value("true");
  w.key(labels::kOwner).value(config_.owner);
  w.key(labels::kSession).value(config_.session);
  w.key(labels::kLifetime).value(std::to_string(o.lifetime.count()));
  if (const auto wall = wall_at(now)) {
    w.key(labels::kCreated)
        .value(std::to_string(
            std::chrono::duration_cast<std::chrono::seconds>(wall->time_since_epoch()).count()));
  }
  for (const auto& [k, v] : o.labels)
    w.key(k).value(v);
  w.end_object();
  w.key("envVars").begin_object();
  for (const auto& var : o.env.vars())
    w.key(var.name).value(var.value);
  w.end_object();
  // Deny by default: no internet access. An allow list opens exactly those destinations.
  w.key("allow_internet_access").value(false);
  if (!o.network.denies_all()) {
    w.key("network").begin_object();
    w.key("allowOut").begin_array();
    for (const auto& host : o.network.allow)
      w.value(host);
    w.end_array();
    w.key("denyOut").begin_array().value("0.0.0.0/0").end_array();
    w.end_object();
  }
  if (v1) w.key("secure").value(true);
  w.end_object();
  return std::move(w).str();
}

void E2bMachine::create_sandbox(OpId id, const std::string& target, Instant now) {
  const bool v1 = target == "/sandboxes";
  api_call(id, "POST", target, create_body(v1, now), [this, id, v1](Result<Reply> r, Instant t) {
    if (!r) return void(fail(id, r.problem(), t));
    const Reply& reply = r.value();
    if (reply.status == 201 || reply.status == 200) {
      auto doc = json::parse(reply.body);
      if (!doc) return void(fail(id, doc.problem(), t));
      const std::string made(doc.value().string_at("sandboxID").value_or(""));
      if (!alive(id) || find_op(id)->cancelled) {  // timed out or cancelled meanwhile
        if (!made.empty()) kill_created(made);
        return;
      }
      if (auto p = adopt_sandbox(doc.value(), {})) {
        if (!made.empty()) kill_created(made);
        sandbox_.clear();
        return void(fail(id, std::move(*p), t));
      }
      lifetime_ = options_->lifetime;
      expires_at_ = t + std::chrono::duration_cast<nanoseconds>(lifetime_);
      schedule_renewal(t);
      name_sandbox(sandbox_, id);
      return void(complete(id, sandbox_info(SandboxState::Running, lifetime_), t));
    }
    if (!alive(id)) return;
    // A control plane without the v2 endpoint: the v1 one (SDKs up to 2.50 use it).
    const std::string msg = reply.message();
    if (!v1 && (reply.status == 404 || reply.status == 405) &&
        msg.find("emplate") == std::string::npos)
      return create_sandbox(id, "/sandboxes", t);
    if (reply.status == 404)
      return void(fail(id,
                       Problem{errc::ImageNotFound,
                               "E2B has no template \"" + config_.template_id + "\": " + msg,
                               "List your templates with `e2b template list`."},
                       t));
    fail(id, api_problem(reply, "create"), t);
  });
  (void)now;
}

// Takes the sandbox a create or connect reply describes. A problem when it is unusable.
std::optional<Problem> E2bMachine::adopt_sandbox(const json::Value& doc,
                                                 const std::string& expected) {
  const std::string made(doc.string_at("sandboxID").value_or(expected));
  if (made.empty() || made.find_first_of("/?#% .") != std::string::npos)
    return Problem{errc::RemoteProtocolViolation, "E2B answered without a usable sandboxID", {}};
  const std::string version(doc.string_at("envdVersion").value_or("0.0.0"));
  if (!version_at_least(version, 0, 1))
    return Problem{errc::CreateFailed, "the template's envd " + version + " is older than 0.1.0",
                   "Rebuild the template with a current E2B base image."};
  sandbox_ = made;
  access_token_ = std::string(doc.string_at("envdAccessToken").value_or(""));
  redactor_.add_secret(access_token_);
  name_sandbox(sandbox_);
  const std::string domain(doc.string_at("domain").value_or(""));
  domain_ = domain.empty() ? config_.domain : domain;
  return std::nullopt;
}

// Kills a sandbox nobody will own (created after its create was cancelled or timed out).
void E2bMachine::kill_created(const std::string& sandbox_id) {
  api_call(0, "DELETE", "/sandboxes/" + sandbox_id, {}, [](Result<Reply>, Instant) {});
}

OpId E2bMachine::submit_list_managed(std::map<std::string, std::string> wanted, Instant now) {
  const OpId id = open(Operation::ListManaged, now);
  if (!alive(id)) return id;
  if (auto p = need_key()) return fail(id, std::move(*p), now);
  wanted[std::string(labels::kManaged)] = "true";
  std::string query;
  for (const auto& [k, v] : wanted)
    query += (query.empty() ? "" : "&") + percent_encode(k) + "=" + percent_encode(v);
  list_page(id,
            "/v2/sandboxes?metadata=" + percent_encode(query) + "&state=running%2Cpaused&limit=100",
            {}, 0, now);
  return id;
}

OpId E2bMachine::submit_remove_managed(std::string sandbox_id, Instant now) {
  const OpId id = open(Operation::RemoveManaged, now);
  if (!alive(id)) return id;
  if (auto p = need_key()) return fail(id, std::move(*p), now);
  if (sandbox_id.empty() || sandbox_id.find_first_of("/?#% ") != std::string::npos)
    return fail(id, not_found(sandbox_id), now);
  api_call(id, "DELETE", "/sandboxes/" + sandbox_id, {},
           [this, id, sandbox_id](Result<Reply> r, Instant t) {
             if (!alive(id)) return;
             if (!r) return void(fail(id, r.problem(), t));
             const int s = r.value().status;
             if (s == 404) return void(fail(id, not_found(sandbox_id), t));
             if (s != 204 && s != 200) return void(fail(id, api_problem(r.value(), "kill"), t));
             complete(id, std::monostate{}, t);
           });
  return id;
}

void E2bMachine::list_page(OpId id, const std::string& first, const std::string& token, int page,
                           Instant now) {
  const std::string target = first + (token.empty() ? "" : "&nextToken=" + percent_encode(token));
  api_call(id, "GET", target, {}, [this, id, first, page](Result<Reply> r, Instant t) {
    if (!alive(id)) return;
    if (!r) return void(fail(id, r.problem(), t));
    if (r.value().status != 200) return void(fail(id, api_problem(r.value(), "list"), t));
    auto doc = json::parse(r.value().body);
    if (!doc) return void(fail(id, doc.problem(), t));
    Op& op = *find_op(id);
    for (const json::Value& s : doc.value().items()) {
      if (op.listed.size() >= 100000) break;
      op.listed.push_back(managed_of(s));
    }
    const std::string next(r.value().header("X-Next-Token").value_or(""));
    if (!next.empty() && page < 100) return list_page(id, first, next, page + 1, t);
    complete(id, std::move(op.listed), t);
  });
  (void)now;
}

OpId E2bMachine::submit_pause(Instant now) {
  const OpId id = open(Operation::Pause, now);
  if (!alive(id)) return id;
  if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
  api_call(id, "POST", "/sandboxes/" + sandbox_ + "/pause", "{}",
           [this, id](Result<Reply> r, Instant t) {
             const Reply* reply = reply_for(id, r, t);
             if (!reply) return;
             if (reply->status != 204 && reply->status != 200)
               return void(fail(id, api_problem(*reply, "pause"), t));
             paused_ = true;
             expires_at_.reset();  // a paused sandbox's lifetime does not run
             complete(id, std::monostate{}, t);
           });
  return id;
}

OpId E2bMachine::submit_resume(std::chrono::seconds lifetime, Instant now) {
  const OpId id = open(Operation::Resume, now);
  if (!alive(id)) return id;
  if (sandbox_.empty() || gone_) return fail(id, gone_problem(), now);
  if (lifetime.count() <= 0) lifetime = lifetime_;
  JsonWriter w;
  w.begin_object()
      .key("timeout")
      .value(static_cast<std::int64_t>(leased_timeout(lifetime).count()))
      .end_object();
  api_call(id, "POST", "/v2/sandboxes/" + sandbox_ + "/connect", std::move(w).str(),
           [this, id, lifetime](Result<Reply> r, Instant t) {
             const Reply* reply = reply_for(id, r, t);
             if (!reply) return;
             if (reply->status != 200 && reply->status != 201)
               return void(fail(id, api_problem(*reply, "resume"), t));
             paused_ = false;
             lifetime_ = lifetime;
             expires_at_ = t + std::chrono::duration_cast<nanoseconds>(lifetime);
             schedule_renewal(t);
             complete(id, sandbox_info(SandboxState::Running, lifetime_), t);
           });
  return id;
}

OpId E2bMachine::submit_set_lifetime(std::chrono::seconds lifetime, Instant now) {
  const OpId id = open(Operation::SetLifetime, now);
  if (!alive(id)) return id;
  if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
  if (lifetime.count() <= 0)
    return fail(id, Problem{errc::InvalidCreateOptions, "a lifetime must be positive", {}}, now);
  JsonWriter w;
  w.begin_object()
      .key("timeout")
      .value(static_cast<std::int64_t>(leased_timeout(lifetime).count()))
      .end_object();
  api_call(id, "POST", "/sandboxes/" + sandbox_ + "/timeout", std::move(w).str(),
           [this, id, lifetime](Result<Reply> r, Instant t) {
             const Reply* reply = reply_for(id, r, t);
             if (!reply) return;
             if (reply->status != 204 && reply->status != 200)
               return void(fail(id, api_problem(*reply, "set-timeout"), t));
             lifetime_ = lifetime;
             expires_at_ = t + std::chrono::duration_cast<nanoseconds>(lifetime);
             schedule_renewal(t);
             complete(id, std::monostate{}, t);
           });
  return id;
}

// ---- the owner lease ----
// While the owner holds the sandbox, E2B's timeout is the lease (30 s), renewed every third of
// it (POST /sandboxes/{id}/timeout, as the SDK's setTimeout): an owner that dies (SIGKILL, a
// lost machine) stops renewing, and E2B ends the sandbox within the lease instead of at the
// end of its lifetime. The lifetime still bounds it: a renewal never asks past its end.
// outlive_owner and re-attached sandboxes have no lease; detach() gives it up
// (submit_release: the timeout becomes what is left of the lifetime).

bool E2bMachine::leased() const {
  return options_ && !options_->outlive_owner && !released_ && config_.lease.count() > 0;
}

std::chrono::seconds E2bMachine::leased_timeout(std::chrono::seconds lifetime) const {
  return leased() ? std::min(lifetime, config_.lease) : lifetime;
}

void E2bMachine::schedule_renewal(Instant now) {
  if (!leased() || config_.lease >= lifetime_) return void(renew_at_.reset());
  renew_at_ = now + std::chrono::duration_cast<nanoseconds>(config_.lease) / 3;
}

void E2bMachine::renew_lease(Instant now) {
  renew_at_.reset();
  if (!leased() || gone_ || paused_ || sandbox_.empty() || !expires_at_) return;
  const auto left = std::chrono::ceil<std::chrono::seconds>(*expires_at_ - now);
  if (left.count() <= 0) return;  // the lifetime is over: E2B ends it
  renewing_ = true;
  JsonWriter w;
  w.begin_object()
      .key("timeout")
      .value(static_cast<std::int64_t>(std::min(left, config_.lease).count()))
      .end_object();
  api_call(0, "POST", "/sandboxes/" + sandbox_ + "/timeout", std::move(w).str(),
           [this](Result<Reply> r, Instant t) {
             renewing_ = false;
             if (r && r.value().status == 404) {
               gone_ = true;  // ended: the next call says so
               return;
             }
             if (!leased() || gone_) return;
             if (r && (r.value().status == 204 || r.value().status == 200)) {
               if (expires_at_ &&
                   *expires_at_ - t > std::chrono::duration_cast<nanoseconds>(config_.lease))
                 schedule_renewal(t);
               return;
             }
             // Unreachable or refused: try again soon; the lease holds two more tries.
             renew_at_ = t + std::chrono::duration_cast<nanoseconds>(config_.lease) / 6;
           });
}

std::optional<OpId> E2bMachine::submit_release(Instant now) {
  if (!leased() || sandbox_.empty() || gone_) {
    released_ = true;
    renew_at_.reset();
    return std::nullopt;
  }
  released_ = true;
  renew_at_.reset();
  const OpId id = open(Operation::SetLifetime, now);
  if (!alive(id)) return id;
  const auto left =
      expires_at_ ? std::chrono::ceil<std::chrono::seconds>(*expires_at_ - now) : lifetime_;
  if (left.count() <= 0) return complete(id, std::monostate{}, now), id;
  JsonWriter w;
  w.begin_object().key("timeout").value(static_cast<std::int64_t>(left.count())).end_object();
  api_call(id, "POST", "/sandboxes/" + sandbox_ + "/timeout", std::move(w).str(),
           [this, id](Result<Reply> r, Instant t) {
             const Reply* reply = reply_for(id, r, t);
             if (!reply) return;
             if (reply->status != 204 && reply->status != 200)
               return void(fail(id, api_problem(*reply, "set-timeout"), t));
             complete(id, std::monostate{}, t);
           });
  return id;
}

}  // namespace sandboxio::e2b::detail
