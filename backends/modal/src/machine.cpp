// modal:// inputs, deadlines and the sandbox's life. create:
//   AuthTokenGet (once) -> AppGetOrCreate -> EnvironmentGetOrCreate (the image builder
//   version) -> ImageGetOrCreate (FROM IMAGE) -> SandboxCreateV2 (lifetime as timeout_secs,
//   env as a secret source, BLOCKED network) -> the router's URL and JWT from its reply
// Every control-plane call carries Modal's client metadata, the token pair and the JWT; every
// router call its own JWT. kill is SandboxTerminateV2; info is SandboxWaitV2 with timeout 0.
#include "machine.hpp"

#include "sandboxio/codec/shell.hpp"

namespace sandboxio::modal::detail {

ModalMachine::ModalMachine(Config config)
    : MachineCore("modal", IsolationTier::Gvisor),
      config_(std::move(config)),
      grpc_(out_, "Modal") {}

void ModalMachine::handle_connected(ConnId id, Instant) {
  grpc_.connected(id);
}

std::size_t ModalMachine::handle_bytes(ConnId id, std::string_view data, Instant now) {
  return grpc_.feed(id, data, now, [this](OpId op) {
    const Op* o = const_cast<ModalMachine*>(this)->find_op(op);
    return o && o->output.held(limits_);
  });
}

void ModalMachine::handle_eof(ConnId id, Instant now) {
  grpc_.eof(id, now);
}

void ModalMachine::handle_connect_failed(ConnId id, Problem problem, Instant now) {
  grpc_.failed(id, problem, now);
}

void ModalMachine::handle_consumed(OpId id, std::size_t bytes, Instant) {
  Op* op = find_op(id);
  if (!op) return;
  const bool was_held = op->output.held(limits_);
  op->output.consumed(bytes);
  if (was_held && !op->output.held(limits_)) grpc_.resume(id);
}

void ModalMachine::handle_timeout(Instant now) {
  for (OpId id : due(now)) {
    Op* op = find_op(id);
    if (!op) continue;
    if (op->kind == OpState::Kind::Command) {
      // Its killer did not end in time: the result is given without it.
      if (op->killing) {
        op->killing = false;
        finish_command(id, now);
        continue;
      }
      // The timeout: the process tree is killed, then the result has the output so far.
      kill_command(id, Termination::Timeout, now);
    } else if (op->kind == OpState::Kind::Create) {
      grpc_.cancel_op(id);  // SandboxCreateV2 is not the operation's: its reply is awaited
      fail(id,
           Problem{errc::CreateTimeout,
                   "the Modal sandbox was not ready within " +
                       std::to_string(op->create_timeout.count()) + " ms",
                   "Give create_timeout more time; a first pull of a large image takes long."},
           now);
    } else {
      grpc_.cancel_op(id);
      expire(id, now);
    }
  }
}

// ---- calls ----

void ModalMachine::with_token(OpId op, std::function<void(Instant)> next, Instant now) {
  if (!token_.empty()) return next(now);
  token_waiters_.emplace_back(op, std::move(next));
  if (token_asked_) return;
  token_asked_ = true;
  // The machine's own call, not `op`'s: cancelling the operation that asked first must not leave
  // the others waiting for a token that never comes.
  backend::GrpcCallSpec spec{0,  config_.server, std::string(kControl) + "AuthTokenGet",
                             {}, kUnaryTimeout,  "AuthTokenGet"};
  spec.metadata = {{"x-modal-client-type", "8"},
                   {"x-modal-client-version", "1.0.0"},
                   {"x-modal-libmodal-version", "sandboxio"},
                   {"x-modal-token-id", config_.token_id},
                   {"x-modal-token-secret", config_.token_secret},
                   {"x-modal-host", config_.host}};
  grpc_.call(
      std::move(spec), std::string(), true, {},
      [this](backend::GrpcReply r, Instant t) {
        token_asked_ = false;
        auto waiters = std::move(token_waiters_);
        token_waiters_.clear();
        if (r.status.ok() && r.messages.size() == 1) token_ = msg::string_field(r.messages[0], 1);
        if (token_.empty()) {
          const Problem p = status_problem(r, "AuthTokenGet");
          for (const auto& [waiting, resume] : waiters)
            fail(waiting, p, t);
          return;
        }
        for (auto& [waiting, resume] : waiters)
          resume(t);
      },
      now);
}

void ModalMachine::control(OpId op, std::string_view method, std::string message, Then then,
                           Instant now,
                           std::function<bool(const backend::GrpcReply&, Instant)> on_error) {
  if (config_.token_id.empty() || config_.token_secret.empty())
    return void(fail(op,
                     Problem{errc::CredentialsMissing,
                             "no Modal credentials: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET are "
                             "unset, and no profile in ~/.modal.toml has them",
                             "Run `modal token new`, or set MODAL_TOKEN_ID and "
                             "MODAL_TOKEN_SECRET (never in a DSN)."},
                     now));
  with_token(
      op,
      [this, op, method = std::string(method), message = std::move(message), then = std::move(then),
       on_error = std::move(on_error)](Instant t) mutable {
        if (op != 0 && !alive(op)) return;  // op 0: the machine's own (a terminate)
        backend::GrpcCallSpec spec{op, config_.server, std::string(kControl) + method,
                                   {}, kUnaryTimeout,  method};
        spec.metadata = {{"x-modal-client-type", "8"},
                         {"x-modal-client-version", "1.0.0"},
                         {"x-modal-libmodal-version", "sandboxio"},
                         {"x-modal-token-id", config_.token_id},
                         {"x-modal-token-secret", config_.token_secret},
                         {"x-modal-host", config_.host},
                         {"x-modal-auth-token", token_}};
        grpc_.call(
            std::move(spec), std::move(message), true, {},
            [this, op, method, then = std::move(then), on_error = std::move(on_error)](
                backend::GrpcReply r, Instant t2) {
              if (op != 0 && !alive(op)) return;
              if (!r.status.ok() || r.messages.size() != 1) {
                if (on_error && on_error(r, t2)) return;
                return void(fail(op, status_problem(r, method), t2));
              }
              then(std::move(r.messages[0]), t2);
            },
            t);
      },
      now);
}

backend::GrpcCallSpec ModalMachine::router_spec(OpId op, std::string_view method,
                                                std::optional<std::chrono::milliseconds> timeout) {
  backend::GrpcCallSpec spec{op, router_, std::string(kRouter) + std::string(method),
                             {}, timeout, std::string(method)};
  spec.metadata = {{"authorization", "Bearer " + router_jwt_}};
  return spec;
}

void ModalMachine::router(OpId op, std::string_view method, std::string message, Then then,
                          Instant now, std::optional<std::chrono::milliseconds> timeout,
                          std::function<bool(const backend::GrpcReply&, Instant)> on_error) {
  grpc_.call(
      router_spec(op, method, timeout), std::move(message), true, {},
      [this, op, method = std::string(method), then = std::move(then),
       on_error = std::move(on_error)](backend::GrpcReply r, Instant t) {
        if (op != 0 && !alive(op)) return;
        if (!r.status.ok() || r.messages.size() != 1) {
          if (on_error && on_error(r, t)) return;
          return void(fail(op, status_problem(r, method), t));
        }
        then(std::move(r.messages[0]), t);
      },
      now);
}

Problem ModalMachine::status_problem(const backend::GrpcReply& r, std::string_view what) const {
  if (r.problem && r.status.synthesized) return *r.problem;
  const std::string said = std::string(what) + ": Modal answered " +
                           grpc::code_name(r.status.code) +
                           (r.status.message.empty() ? "" : " (" + r.status.message + ")");
  switch (r.status.code) {
    case grpc::Code::Ok:
      return Problem{errc::RemoteProtocolViolation,
                     std::string(what) + ": Modal answered OK without exactly one message",
                     {}};
    case grpc::Code::Unauthenticated:
    case grpc::Code::PermissionDenied:
      return Problem{errc::AuthenticationError, said,
                     "Check the credentials from " + config_.credentials_source +
                         " (`modal token new` makes a new pair)."};
    case grpc::Code::NotFound:
      return Problem{errc::SandboxGone, said, {}};
    case grpc::Code::ResourceExhausted:
      return Problem{errc::RateLimited, said, "Modal is limiting this workspace; retry later."};
    case grpc::Code::Unavailable:
      return Problem{errc::ConnectionLost, said, {}};
    default:
      return Problem{errc::SandboxError, said, {}};
  }
}

std::optional<Problem> ModalMachine::need_sandbox() const {
  if (task_.empty())
    return Problem{errc::SandboxError, "no Modal sandbox yet: create or connect first", {}};
  if (gone_) return gone_problem();
  return std::nullopt;
}

Problem ModalMachine::gone_problem() const {
  return Problem{
      errc::SandboxGone,
      "Modal sandbox " + sandbox_id() + " no longer exists (terminated, or its timeout ran out)",
      {}};
}

void ModalMachine::set_router(const std::string& jwt, const std::string& url) {
  router_jwt_ = jwt;
  auto target = parse_server_url(url, config_.ca_file);
  if (!target) return;
  router_ = std::move(target).value();
  if (config_.local_server) {
    // As Modal's SDKs do: a router of a control plane on this machine is dialled in plaintext.
    router_.endpoint.tls = false;
    router_.endpoint.alpn.clear();
    router_.scheme = "http";
  }
}

// ---- create, connect, info, kill ----

OpId ModalMachine::submit_create(const CreateOptions& options, Instant now) {
  const OpId id = open(Operation::Create, now);
  if (!alive(id)) return id;
  adopt(options);
  Op& op = *find_op(id);
  op.kind = OpState::Kind::Create;
  op.create_timeout = options.create_timeout;
  op.deadline = now + std::chrono::duration_cast<Instant::duration>(options.create_timeout);
  lifetime_ = options.lifetime;
  if (config_.image.empty())
    return fail(id,
                Problem{errc::InvalidDsn, "modal:// needs an image: modal://IMAGE",
                        "Name a registry image (modal://python:3.12-slim) or an image id."},
                now);
  control(
      id, "AppGetOrCreate", msg::app_get_or_create(config_.app, config_.environment),
      [this, id](std::string reply, Instant t) {
        app_id_ = msg::string_field(reply, 1);
        control(
            id, "EnvironmentGetOrCreate", msg::environment_get_or_create(config_.environment),
            [this, id](std::string env, Instant t2) {
              std::string builder;
              if (auto meta = msg::message_field(env, 2))
                if (auto settings = msg::message_field(*meta, 2))
                  builder = msg::string_field(*settings, 1);
              auto after_image = [this, id](std::string image_id, Instant t3) {
                // Sent as the machine's own call: a reply that comes after the create timed
                // out still names a sandbox, which is then ended (created()).
                creating_ = true;
                control(
                    0, "SandboxCreateV2", msg::sandbox_create(app_id_, image_id, *options_),
                    [this, id](std::string created_msg, Instant t4) {
                      creating_ = false;
                      auto c = msg::create_reply(created_msg);
                      if (!c || c->task_id.empty() || c->router_url.empty())
                        return void(fail(id,
                                         Problem{errc::RemoteProtocolViolation,
                                                 "SandboxCreateV2: no sandbox id, task id or "
                                                 "command router in Modal's reply",
                                                 {}},
                                         t4));
                      created(id, *c, t4);
                    },
                    t3,
                    [this, id](const backend::GrpcReply& r, Instant t4) {
                      creating_ = false;
                      fail(id, status_problem(r, "SandboxCreateV2"), t4);
                      return true;
                    });
              };
              if (config_.image.starts_with("im-")) return after_image(config_.image, t2);
              control(
                  id, "ImageGetOrCreate", msg::image_get_or_create(app_id_, config_.image, builder),
                  [this, id, after_image](std::string img, Instant t3) {
                    const std::string image_id = msg::string_field(img, 1);
                    std::optional<GenericResult> result;
                    if (auto g = msg::message_field(img, 2)) result = msg::generic_result(*g);
                    if (!result || result->status != kSuccess || image_id.empty())
                      return void(fail(id,
                                       Problem{errc::ImageNotFound,
                                               "Modal could not make the image " + config_.image +
                                                   (result && !result->exception.empty()
                                                        ? ": " + result->exception
                                                        : std::string()),
                                               "Name an image Modal can pull (a public registry "
                                               "name) or an image id (im-...)."},
                                       t3));
                    after_image(image_id, t3);
                  },
                  t2);
            },
            t);
      },
      now);
  return id;
}

void ModalMachine::created(OpId id, const CreateReply& reply, Instant now) {
  if (!alive(id)) {
    // The create timed out meanwhile: what Modal made is ended.
    control(
        0, "SandboxTerminateV2", msg::by_sandbox(reply.sandbox_id), [](std::string, Instant) {},
        now);
    return;
  }
  name_sandbox(reply.sandbox_id, id);
  task_ = reply.task_id;
  set_router(reply.router_jwt, reply.router_url);
  Op* op = find_op(id);
  if (op && op->cancelled) {
    // Cancelled while Modal made it: it is ended before the cancellation is reported, so that
    // nothing the caller gave up on is left running.
    gone_ = true;
    control(
        id, "SandboxTerminateV2", msg::by_sandbox(sandbox_id()),
        [this, id](std::string, Instant t) { cancelled(id, t); }, now,
        [this, id](const backend::GrpcReply&, Instant t) {
          cancelled(id, t, /*possible_orphan=*/true);
          return true;
        });
    return;
  }
  if (router_.endpoint.address.empty())
    return void(fail(
        id,
        Problem{errc::RemoteProtocolViolation,
                "Modal named a command router at \"" + reply.router_url + "\", which is not a URL",
                {}},
        now));
  complete(id, sandbox_info(SandboxState::Running, lifetime_), now);
}

OpId ModalMachine::submit_connect(std::string sandbox_id, const CreateOptions& options,
                                  Instant now) {
  const OpId id = open(Operation::Connect, now);
  if (!alive(id)) return id;
  adopt(options);
  find_op(id)->kind = OpState::Kind::Create;
  find_op(id)->create_timeout = options.create_timeout;
  name_sandbox(sandbox_id, id);
  lifetime_ = options.lifetime;
  control(
      id, "SandboxGetTaskIdV2", msg::by_sandbox(sandbox_id),
      [this, id](std::string reply, Instant t) {
        task_ = msg::string_field(reply, 1);
        if (task_.empty()) return void(fail(id, gone_problem(), t));
        control(
            id, "SandboxGetCommandRouterAccess", msg::router_access(this->sandbox_id(), task_),
            [this, id](std::string access, Instant t2) {
              set_router(msg::string_field(access, 1), msg::string_field(access, 2));
              complete(id, sandbox_info(SandboxState::Running, lifetime_), t2);
            },
            t,
            [this, id](const backend::GrpcReply& r, Instant t2) {
              if (r.status.code != grpc::Code::FailedPrecondition) return false;
              gone_ = true;  // the router is gone with the sandbox
              fail(id, gone_problem(), t2);
              return true;
            });
      },
      now,
      [this, id, sandbox_id](const backend::GrpcReply& r, Instant t) {
        if (r.status.code != grpc::Code::NotFound) return false;
        fail(id, Problem{errc::SandboxNotFound, "Modal has no sandbox \"" + sandbox_id + "\"", {}},
             t);
        return true;
      });
  return id;
}

OpId ModalMachine::submit_info(Instant now) {
  const OpId id = open(Operation::Info, now);
  if (!alive(id)) return id;
  if (auto p = need_sandbox()) return fail(id, std::move(*p), now);
  control(
      id, "SandboxWaitV2", msg::sandbox_wait(sandbox_id(), 0),
      [this, id](std::string reply, Instant t) {
        if (msg::message_field(reply, 1)) {  // a result: it has ended
          gone_ = true;
          return void(fail(id, gone_problem(), t));
        }
        complete(id, sandbox_info(SandboxState::Running, lifetime_), t);
      },
      now);
  return id;
}

OpId ModalMachine::submit_kill(Instant now) {
  const OpId id = open(Operation::Kill, now);
  if (!alive(id)) return id;
  if (sandbox_id().empty())
    return fail(id, Problem{errc::SandboxError, "no sandbox yet: nothing to kill", {}}, now);
  if (gone_) {
    ended(now);
    return complete(id, std::monostate{}, now), id;
  }
  control(
      id, "SandboxTerminateV2", msg::by_sandbox(sandbox_id()),
      [this, id](std::string, Instant t) {
        complete(id, std::monostate{}, t);
        ended(t);
      },
      now,
      [this, id](const backend::GrpcReply& r, Instant t) {
        if (r.status.code != grpc::Code::NotFound) return false;
        complete(id, std::monostate{}, t);  // already gone: what kill wanted
        ended(t);
        return true;
      });
  return id;
}

void ModalMachine::ended(Instant now) {
  gone_ = true;
  // What was still running ended with the sandbox: a command with SandboxGone and its output
  // so far, anything else with the sandbox's problem. Then the connections close.
  std::vector<OpId> open_ops;
  for (const auto& [op_id, op] : ops_)
    open_ops.push_back(op_id);
  for (OpId op_id : open_ops) {
    Op* op = find_op(op_id);
    if (!op) continue;
    if (op->kind == OpState::Kind::Command) {
      op->forced = Termination::SandboxGone;
      op->killing = false;
      finish_command(op_id, now);
    } else {
      grpc_.cancel_op(op_id);
      fail(op_id, gone_problem(), now);
    }
  }
  // Killers in flight end with the connections; nothing waits for them now (every command
  // above has its result).
  kills_in_flight_ = 0;
  after_kills_.clear();
  grpc_.close_all();
}

void ModalMachine::submit_cancel(OpId id, Instant now) {
  Op* op = find_op(id);
  if (!op || op->cancelled) return;
  op->cancelled = true;
  switch (op->kind) {
    case OpState::Kind::Create:
      // A SandboxCreateV2 in flight may still make a sandbox: created() ends it, then reports
      // the cancellation.
      if (creating_) return;
      grpc_.cancel_op(id);
      return cancelled(id, now);
    case OpState::Kind::Command:
      return kill_command(id, Termination::Cancelled, now);
    default:
      grpc_.cancel_op(id);
      return cancelled(id, now);
  }
}

// ---- what modal:// does not do ----

OpId ModalMachine::submit_list_managed(std::map<std::string, std::string>, Instant now) {
  const OpId id = open(Operation::ListManaged, now);
  if (!alive(id)) return id;
  return fail(id,
              Problem{errc::CapabilityNotSupported,
                      "modal:// does not list sandboxes yet: Modal ends an owner's sandboxes at "
                      "their timeout",
                      {}},
              now);
}

OpId ModalMachine::submit_remove_managed(std::string sandbox_id, Instant now) {
  const OpId id = open(Operation::RemoveManaged, now);
  if (!alive(id)) return id;
  control(
      id, "SandboxTerminateV2", msg::by_sandbox(sandbox_id),
      [this, id](std::string, Instant t) { complete(id, std::monostate{}, t); }, now);
  return id;
}

// Stateless: each call is a fresh `python3 -c CODE` (no stateful_code, no rich_output).
OpId ModalMachine::submit_run_code(CodeRequest request, Instant now) {
  if (request.language != "python" || request.context) {
    const OpId id = open(Operation::RunCode, now);
    if (!alive(id)) return id;
    return fail(id,
                Problem{errc::CapabilityNotSupported,
                        request.context ? "modal:// has no stateful code contexts"
                                        : "modal:// runs python code only, not " + request.language,
                        {}},
                now);
  }
  Command c;
  c.argv = {"python3", "-c", std::move(request.code)};
  c.env = std::move(request.env);
  c.timeout = request.timeout;
  return start_command(Operation::RunCode, std::move(c), false, now);
}

OpId ModalMachine::submit_create_context(std::string, Instant now) {
  const OpId id = open(Operation::CreateContext, now);
  if (!alive(id)) return id;
  return fail(
      id, Problem{errc::CapabilityNotSupported, "modal:// has no stateful code contexts", {}}, now);
}

}  // namespace sandboxio::modal::detail

namespace sandboxio::modal {

CapabilitySet declared_capabilities() {
  return CapabilitySet{Capability::NetworkPolicy, Capability::Filesystem, Capability::Streaming,
                       Capability::Reattach, Capability::Stdin};
}

std::unique_ptr<Machine> make_machine(Config config) {
  return std::make_unique<detail::ModalMachine>(std::move(config));
}

}  // namespace sandboxio::modal
