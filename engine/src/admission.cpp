// The admission guard: the security rules of create() applied from what a backend declares,
// around any machine, so that no backend (ours or a third party's) has to remember them.
#include <deque>

#include "sandboxio/machine.hpp"

namespace sandboxio {

std::optional<Problem> admit_create(std::string_view scheme, IsolationTier tier,
                                    const CapabilitySet& capabilities,
                                    const CreateOptions& options) {
  const std::string name = std::string(scheme) + "://";
  if (options.require_isolation && !tier.satisfies(*options.require_isolation)) {
    return Problem{errc::IsolationNotSatisfied,
                   name + " gives " + std::string(tier.name()) +
                       " isolation, which does not satisfy " +
                       std::string(options.require_isolation->name()),
                   "Use a backend whose tier is at least the one required (see "
                   "docs/reference/capabilities.md), or lower require_isolation."};
  }
  if (!capabilities.contains(Capability::NetworkPolicy)) {
    return Problem{errc::PolicyUnenforceable,
                   name + " cannot enforce any network policy, not even deny-all",
                   "Sandboxes are created only where egress can be denied: use a backend that "
                   "declares network_policy."};
  }
  if (options.network.needs_proxy() && !capabilities.contains(Capability::NetworkAllowList)) {
    return Problem{errc::PolicyUnenforceable,
                   name + " cannot enforce an allow list (" + options.network.describe() +
                       "): it can only deny all egress",
                   "Drop the allow list, or use a backend that declares network_allow_list."};
  }
  const Resources& r = options.resources;
  if (r.disk_bytes && !capabilities.contains(Capability::DiskLimit)) {
    return Problem{errc::ResourceLimitUnsupported, name + " cannot enforce a disk limit",
                   "Drop resources.disk_bytes, or use a backend that declares disk_limit."};
  }
  if ((r.memory_bytes || r.cpus || r.pids) && !capabilities.contains(Capability::ResourceCaps)) {
    return Problem{errc::ResourceLimitUnsupported,
                   name + " cannot enforce memory, CPU or process limits",
                   "Drop resources, or use a backend that declares resource_caps."};
  }
  return std::nullopt;
}

namespace {

// Operations the guard refuses itself get ids from the top half, so they never meet the
// backend's own (numbered from 1).
constexpr OpId kGuardIds = OpId{1} << 63;

class AdmissionGuard final : public ForwardingMachine {
 public:
  explicit AdmissionGuard(std::unique_ptr<Machine> inner) : ForwardingMachine(std::move(inner)) {}

  void handle_consumed(OpId op, std::size_t n, Instant now) override {
    if (op < kGuardIds) ForwardingMachine::handle_consumed(op, n, now);
  }
  OpId submit_create(const CreateOptions& options, Instant now) override {
    if (auto p = admit_create(scheme(), tier(), capabilities(), options)) {
      return refuse(Operation::Create, options, std::move(*p), now);
    }
    return ForwardingMachine::submit_create(options, now);
  }
  void submit_cancel(OpId op, Instant now) override {
    if (op < kGuardIds) ForwardingMachine::submit_cancel(op, now);
  }
  std::optional<Event> poll_event() override {
    if (!refusals_.empty()) {
      Event e = std::move(refusals_.front());
      refusals_.pop_front();
      return e;
    }
    return ForwardingMachine::poll_event();
  }

 private:
  OpId refuse(Operation operation, const CreateOptions& options, Problem problem, Instant now) {
    const OpId id = kGuardIds + ++refused_;
    OperationRecord record;
    record.sequence = 1;  // the backend never saw it: no sandbox, no other record
    record.backend = std::string(scheme());
    record.operation = operation;
    record.tier = tier();
    record.network_policy = options.network.describe();
    record.error_code = static_cast<int>(problem.code);
    record.error_detail = problem.detail;
    Redactor redactor;
    redactor.add_secrets(options.env.secret_values());
    close_record(record, Outcome::Failed, {}, redactor);
    refusals_.push_back(event::Failed{id, std::move(problem)});
    refusals_.push_back(event::Record{std::move(record), now});
    return id;
  }

  std::deque<Event> refusals_{};
  OpId refused_ = 0;
};

}  // namespace

std::unique_ptr<Machine> guard_admission(std::unique_ptr<Machine> inner) {
  return std::make_unique<AdmissionGuard>(std::move(inner));
}

}  // namespace sandboxio
