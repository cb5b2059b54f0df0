// fake:// machine: create, connect, info, kill, listing, cancel, the records and the world
// (see machine.hpp), and the backend's registry entry.
#include "machine.hpp"

namespace sandboxio::fake {
namespace impl {

void FakeMachine::handle_consumed(OpId op, std::size_t bytes, Instant now) {
  auto it = ops_.find(op);
  if (it != ops_.end()) it->second.unconsumed -= std::min(bytes, it->second.unconsumed);
  advance(now);
}

OpId FakeMachine::submit_create(const CreateOptions& options, Instant now) {
  const OpId id = open(Operation::Create, now, {});
  if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
  Op& op = ops_.at(id);
  trace_record(op.record, options.trace);
  if (auto p = check_create(options); !p.detail.empty()) return fail(id, std::move(p), now);
  options_ = options;
  redactor_.add_secrets(options.env.secret_values());
  limits_ = options.limits;
  op.kind = Op::Kind::Create;
  op.ends_at = now + create_delay_;
  op.timeout_at = now + std::chrono::duration_cast<nanoseconds>(options.create_timeout);
  advance(now);
  return id;
}

OpId FakeMachine::submit_connect(std::string sandbox_id, const CreateOptions& options,
                                 Instant now) {
  const OpId id = open(Operation::Connect, now, {});
  if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
  trace_record(ops_.at(id).record, options.trace);
  if (!profile_.capabilities.contains(Capability::Reattach)) {
    return fail(id, unsupported(Capability::Reattach, "connect()"), now);
  }
  std::shared_ptr<FakeSandbox> sb;
  bool was_gone = false;
  world_->impl().locked([&](World::Impl& impl) {
    auto it = impl.sandboxes.find(sandbox_id);
    if (it != impl.sandboxes.end()) sb = it->second;
    was_gone = !sb && impl.was_gone(sandbox_id);
  });
  if (was_gone) {
    return fail(id,
                Problem{errc::SandboxGone, "fake sandbox " + sandbox_id + " no longer exists", {}},
                now);
  }
  if (!sb) {
    return fail(
        id, Problem{errc::SandboxNotFound, "no fake sandbox with id \"" + sandbox_id + "\"", {}},
        now);
  }
  options_ = options;
  limits_ = options.limits;
  sandbox_ = sb;
  redactor_.add_secrets(sb->secrets);
  if (gone(now)) return fail(id, gone_problem(), now);
  ops_.at(id).record.sandbox_id = sb->id;
  complete(id, info_of(), now);
  return id;
}

OpId FakeMachine::submit_info(Instant now) {
  const OpId id = open(Operation::Info, now, {});
  if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
  if (auto p = need_sandbox(now); p) return fail(id, std::move(*p), now);
  complete(id, info_of(), now);
  return id;
}

OpId FakeMachine::submit_kill(Instant now) {
  const OpId id = open(Operation::Kill, now, {});
  if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
  if (!sandbox_)
    return fail(id, Problem{errc::SandboxError, "kill() before create() or connect()", {}}, now);
  end_sandbox(now, Termination::SandboxGone);
  record_call(base_call(Operation::Kill));
  complete(id, std::monostate{}, now);
  return id;
}

OpId FakeMachine::submit_list_managed(std::map<std::string, std::string> labels, Instant now) {
  const OpId id = open(Operation::ListManaged, now, {});
  if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
  std::vector<ManagedSandbox> out;
  world_->impl().locked([&](World::Impl& impl) {
    for (const auto& [sid, sb] : impl.sandboxes) {
      if (sb->gone || (sb->observed > Instant{} && sb->observed >= sb->expires_at)) continue;
      bool match = true;
      for (const auto& [k, v] : labels) {
        auto l = sb->labels.find(k);
        match = match && l != sb->labels.end() && l->second == v;
      }
      if (!match) continue;
      ManagedSandbox m;
      m.backend = "fake";
      m.id = sid;
      m.lifetime = sb->lifetime;
      m.state = SandboxState::Running;
      m.labels = sb->labels;
      out.push_back(std::move(m));
    }
  });
  complete(id, std::move(out), now);
  return id;
}

OpId FakeMachine::submit_remove_managed(std::string sandbox_id, Instant now) {
  const OpId id = open(Operation::RemoveManaged, now, {});
  if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
  std::shared_ptr<FakeSandbox> sb;
  world_->impl().locked([&](World::Impl& impl) {
    auto it = impl.sandboxes.find(sandbox_id);
    if (it != impl.sandboxes.end() && !it->second->gone) sb = it->second;
  });
  if (!sb) {
    return fail(
        id, Problem{errc::SandboxNotFound, "no fake sandbox with id \"" + sandbox_id + "\"", {}},
        now);
  }
  if (sb == sandbox_) {
    end_sandbox(now, Termination::SandboxGone);
  } else {
    sb->gone = true;  // its own machine sees it gone at its next step
    retire(*sb);
  }
  complete(id, std::monostate{}, now);
  return id;
}

void FakeMachine::submit_cancel(OpId id, Instant now) {
  auto it = ops_.find(id);
  if (it == ops_.end() || it->second.finished) return;
  Op& op = it->second;
  if (op.kind == Op::Kind::Exec) stop_exec(id, true);
  if (op.kind == Op::Kind::Create && sandbox_) {
    // The sandbox already exists: teardown still runs after a cancellation, bounded by the
    // grace; past it the sandbox may be orphaned (its lifetime is the backstop).
    const nanoseconds grace = std::chrono::duration_cast<nanoseconds>(
        options_->teardown_grace.value_or(std::chrono::milliseconds(5000)));
    op.kind = Op::Kind::Teardown;
    op.orphan = teardown_delay_ > grace;
    op.ends_at = now + (op.orphan ? grace : teardown_delay_);
    advance(now);
    return;
  }
  op.finished = true;
  push(event::Cancelled{id, false});
  close(op, Outcome::Cancelled, now, std::nullopt);
  ops_.erase(it);
}

std::optional<Event> FakeMachine::poll_event() {
  if (events_.empty()) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<Instant> FakeMachine::poll_deadline() const {
  std::optional<Instant> best;
  auto consider = [&](Instant t) {
    if (!best || t < *best) best = t;
  };
  for (const auto& [id, op] : ops_) {
    if (op.finished) continue;
    if (op.kind == Op::Kind::Create) {
      consider(std::min(op.ends_at, op.timeout_at));
      if (!sandbox_) consider(exists_at(op));
      continue;
    }
    if (op.kind == Op::Kind::Teardown) {
      consider(op.ends_at);
      continue;
    }
    if (op.kind != Op::Kind::Exec) continue;
    consider(op.timeout_at);
    if (op.blocked()) continue;  // waits for handle_consumed, not for time
    if (op.next_step < op.outcome.steps.size()) {
      consider(op.started + op.outcome.steps[op.next_step].at);
    } else {
      consider(op.ends_at);
    }
  }
  if (sandbox_ && !sandbox_->gone && !ops_.empty()) consider(sandbox_->expires_at);
  return best;
}

// ---- helpers ----
OpId FakeMachine::open(Operation operation, Instant now, std::string command) {
  const OpId id = ++next_op_;
  Op op;
  op.started = now;
  op.record.sequence = ++sequence_;
  op.record.backend = "fake";
  op.record.sandbox_id = sandbox_ ? sandbox_->id : std::string();
  op.record.operation = operation;
  op.record.tier = profile_.tier;
  op.record.network_policy = (options_ ? options_->network : NetworkPolicy{}).describe();
  if (options_ && options_->audit.capture_commands && !command.empty())
    op.record.command = std::move(command);
  if (options_) trace_record(op.record, options_->trace);
  const bool full = operation != Operation::Kill &&
                    ops_.size() >= limits_.max_pending_operations;  // teardown is never refused
  ops_.emplace(id, std::move(op));
  if (full) fail(id, queue_full(limits_), now);
  return id;
}

void FakeMachine::close(Op& op, Outcome outcome, Instant now, std::optional<Problem> problem) {
  if (problem) {
    op.record.error_code = static_cast<int>(problem->code);
    op.record.error_detail = problem->detail;
  }
  close_record(op.record, outcome, now - op.started, redactor_);
  push(event::Record{op.record, op.started});
}

OpId FakeMachine::fail(OpId id, Problem problem, Instant now) {
  Op& op = ops_.at(id);
  op.finished = true;
  push(event::Failed{id, problem});
  close(op, Outcome::Failed, now, problem);
  ops_.erase(id);
  return id;
}

void FakeMachine::complete(OpId id, Completion value, Instant now) {
  Op& op = ops_.at(id);
  op.finished = true;
  const RecordEnding ending = record_completion(op.record, value, gone_problem());
  push(event::Done{id, std::move(value)});
  close(op, ending.outcome, now, ending.problem);
  ops_.erase(id);
}

Problem FakeMachine::unsupported(Capability c, const std::string& what) {
  return Problem{errc::CapabilityNotSupported,
                 what + " needs the " + std::string(to_string(c)) +
                     " capability, which this fake:// sandbox does not declare",
                 {}};
}

Problem FakeMachine::check_create(const CreateOptions& options) const {
  if (sandbox_)
    return Problem{errc::SandboxError, "this machine already holds a sandbox",
                   "Make one machine per sandbox."};
  if (auto r = options.validate(); !r) return r.problem();
  // The same rules the admission guard applies to every machine (for a fake:// machine
  // made directly, without BackendEntry::make).
  if (auto p = admit_create("fake", profile_.tier, profile_.capabilities, options)) return *p;
  return Problem{errc::ConfigurationError, {}, {}};  // empty detail: no problem
}

std::optional<Problem> FakeMachine::need_sandbox(Instant now) {
  if (!sandbox_)
    return Problem{errc::ApiMisuse, "no sandbox yet: call create() or connect() first", {}};
  if (gone(now)) return gone_problem();
  return std::nullopt;
}

Problem FakeMachine::gone_problem() const {
  return Problem{
      errc::SandboxGone,
      "fake sandbox " + (sandbox_ ? sandbox_->id : std::string("?")) + " no longer exists",
      {}};
}

bool FakeMachine::gone(Instant now) {
  if (!sandbox_) return false;
  if (!sandbox_->gone && now >= sandbox_->expires_at) {
    sandbox_->gone = true;
    retire(*sandbox_);
  }
  sandbox_->observed = std::max(sandbox_->observed, now);
  return sandbox_->gone;
}

SandboxInfo FakeMachine::info_of() const {
  return SandboxInfo{"fake",
                     sandbox_->id,
                     profile_.tier,
                     profile_.capabilities,
                     sandbox_->network,
                     sandbox_->gone ? SandboxState::Stopped : SandboxState::Running,
                     sandbox_->lifetime};
}

void FakeMachine::end_sandbox(Instant now, Termination why) {
  if (!sandbox_) return;
  sandbox_->gone = true;
  retire(*sandbox_);
  sandbox_->expires_at = std::min(sandbox_->expires_at, now);
  std::vector<OpId> running;
  for (auto& [id, op] : ops_) {
    if (op.kind == Op::Kind::Exec && !op.finished) running.push_back(id);
  }
  for (OpId id : running)
    finish_exec(id, now, why);
}

void FakeMachine::advance_create(OpId id, Op& op, Instant now) {
  if (now >= op.timeout_at && op.timeout_at < op.ends_at) {
    if (sandbox_) end_sandbox(now, Termination::SandboxGone);  // nothing half-made survives
    fail(id,
         Problem{errc::CreateTimeout,
                 "fake create took longer than " + format_duration(op.timeout_at - op.started),
                 {}},
         now);
    return;
  }
  if (!sandbox_ && now >= exists_at(op)) make_sandbox(op);
  if (now < op.ends_at) return;
  if (profile_.tier == IsolationTier::Unknown) {
    push(event::Warning{
        Problem{errc::IsolationNotSatisfied,
                "fake:// declares the UNKNOWN isolation tier: it runs nothing and isolates nothing",
                "Use docker:// or e2b:// for untrusted code; fake:// is for tests."}});
  }
  complete(id, info_of(), now);
}

void FakeMachine::make_sandbox(Op& op) {
  auto sb = std::make_shared<FakeSandbox>();
  const std::string world = world_->name().empty() ? std::string("default") : world_->name();
  world_->impl().locked([&](World::Impl& impl) {
    sb->id = "fake-" + world + "-" + std::to_string(impl.next_sandbox++);
    impl.sandboxes[sb->id] = sb;
  });
  for (const auto& v : options_->env.vars())
    sb->env[v.name] = v.value;
  sb->env.emplace("HOME", "/home/user");
  sb->env.emplace("PATH", "/usr/local/bin:/usr/bin:/bin");
  if (!options_->workdir.empty()) {
    sb->workdir = options_->workdir;
    sb->fs.make_dirs(options_->workdir);
  }
  sb->network = options_->network;
  sb->lifetime = options_->lifetime;
  sb->expires_at = exists_at(op) + std::chrono::duration_cast<nanoseconds>(options_->lifetime);
  sb->secrets = options_->env.secret_values();
  sb->labels = options_->labels;
  sandbox_ = sb;
  op.record.sandbox_id = sb->id;
  Call call = base_call(Operation::Create);
  record_call(std::move(call));
}

}  // namespace impl
}  // namespace sandboxio::fake
