// The machine core and the rules every machine is held to, whoever wrote it: admission of
// create() from the declared tier and capabilities, the sticky fatal error, per-sandbox limits,
// a deadline on every operation (a stalled file transfer ends with its code, in the sync API).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "sandboxio/backend/core.hpp"
#include "sandboxio/config.hpp"
#include "sandboxio/docker.hpp"
#include "sandboxio/flight.hpp"
#include "sandboxio/sim.hpp"
#include "sandboxio/sinks.hpp"
#include "sandboxio/sync.hpp"

namespace sandboxio {
namespace {

using namespace std::chrono_literals;

// A third-party backend that declares tier UNKNOWN and no capability at all, and does nothing
// about require_isolation or the network policy: its create() just succeeds.
struct NoState {};
class CarelessMachine : public backend::MachineCore<NoState> {
 public:
  CarelessMachine() : MachineCore("careless", IsolationTier::Unknown) {}
  CapabilitySet capabilities() const noexcept override { return {}; }
  void handle_connected(ConnId, Instant) override {}
  void handle_connect_failed(ConnId, Problem, Instant) override {}
  std::size_t handle_bytes(ConnId, std::string_view d, Instant) override { return d.size(); }
  void handle_eof(ConnId, Instant) override {}
  void handle_timeout(Instant now) override {
    for (OpId id : due(now))
      expire(id, now);
  }
  OpId submit_create(const CreateOptions& o, Instant now) override {
    const OpId id = open(Operation::Create, now);
    if (!alive(id)) return id;
    adopt(o);
    name_sandbox("careless-1", id);
    SandboxInfo info;
    info.backend = "careless";
    info.id = "careless-1";
    complete(id, info, now);
    return id;
  }
  OpId submit_connect(std::string, const CreateOptions& o, Instant now) override {
    return submit_create(o, now);
  }
  OpId submit_info(Instant now) override { return nothing(Operation::Info, now); }
  OpId submit_run(Command, Instant now) override { return nothing(Operation::Run, now); }
  OpId submit_stream(Command, Instant now) override { return nothing(Operation::Stream, now); }
  OpId submit_run_code(CodeRequest, Instant now) override {
    return nothing(Operation::RunCode, now);
  }
  OpId submit_create_context(std::string, Instant now) override {
    return nothing(Operation::CreateContext, now);
  }
  OpId submit_write_file(std::string, Bytes, Instant now) override {
    return nothing(Operation::WriteFile, now);
  }
  OpId submit_read_file(std::string, Instant now) override {
    return nothing(Operation::ReadFile, now);
  }
  OpId submit_list_files(std::string, Instant now) override {
    return nothing(Operation::ListFiles, now);
  }
  OpId submit_remove_file(std::string, Instant now) override {
    return nothing(Operation::RemoveFile, now);
  }
  OpId submit_kill(Instant now) override {
    const OpId id = open(Operation::Kill, now);
    complete(id, std::monostate{}, now);
    return id;
  }
  OpId submit_list_managed(std::map<std::string, std::string>, Instant now) override {
    return nothing(Operation::ListManaged, now);
  }
  OpId submit_remove_managed(std::string, Instant now) override {
    return nothing(Operation::RemoveManaged, now);
  }
  void submit_cancel(OpId id, Instant now) override { cancelled(id, now); }
  std::optional<Instant> poll_deadline() const override { return ops_deadline(); }

  // Test hooks.
  OpId pending(Operation operation, Instant now) { return open(operation, now); }
  void break_down(Problem p, Instant now) { fail_machine(std::move(p), now); }

 private:
  Problem gone_problem() const override { return Problem{errc::SandboxGone, "gone", {}}; }
  OpId nothing(Operation operation, Instant now) {
    const OpId id = open(operation, now);
    return fail(id, Problem{errc::CapabilityNotSupported, "careless:// does nothing", {}}, now);
  }
};

const bool registered = [] {
  return registry()
      .add({"careless",
            "a backend that ignores the security rules",
            [](const Dsn&) -> Result<std::unique_ptr<Machine>> {
              return std::unique_ptr<Machine>(std::make_unique<CarelessMachine>());
            },
            {},
            {}})
      .ok();
}();

// A backend with an owner lease that needs no I/O: it "renews" whenever its time comes, and
// counts the renewals. For the sync API's keeper thread, under ThreadSanitizer too.
std::atomic<int> renewals{0};
class LeasingMachine final : public CarelessMachine {
 public:
  static constexpr std::chrono::milliseconds kEvery{20};
  CapabilitySet capabilities() const noexcept override {
    return CapabilitySet{Capability::NetworkPolicy};
  }
  OpId submit_create(const CreateOptions& o, Instant now) override {
    renew_at_ = now + kEvery;
    return CarelessMachine::submit_create(o, now);
  }
  OpId submit_info(Instant now) override {
    const OpId id = open(Operation::Info, now);
    complete(id, SandboxInfo{}, now);
    return id;
  }
  OpId submit_kill(Instant now) override {
    renew_at_.reset();
    return CarelessMachine::submit_kill(now);
  }
  void handle_timeout(Instant now) override {
    if (renew_at_ && now >= *renew_at_) {
      ++renewals;
      renew_at_ = now + kEvery;
    }
    CarelessMachine::handle_timeout(now);
  }
  std::optional<Instant> poll_deadline() const override {
    return earliest(ops_deadline(), renew_at_);
  }
  std::optional<Instant> between_calls() const override { return renew_at_; }

 private:
  std::optional<Instant> renew_at_;
};

const bool leasing_registered = [] {
  return registry()
      .add({"leasing",
            "a backend with an owner lease",
            [](const Dsn&) -> Result<std::unique_ptr<Machine>> {
              return std::unique_ptr<Machine>(std::make_unique<LeasingMachine>());
            },
            {},
            {}})
      .ok();
}();

TEST(SyncKeeper, AnIdleOwnersLeaseIsKeptAndCallsTakeTurnsWithTheKeeper) {
  ASSERT_TRUE(leasing_registered);
  auto sb = sync::Sandbox::create("leasing://");
  const int before = renewals.load();
  // The owner makes no call for ten renewal periods: the keeper thread renews meanwhile.
  std::this_thread::sleep_for(LeasingMachine::kEvery * 10);  // the idle time under test
  EXPECT_GE(renewals.load() - before, 3) << "nobody renewed the lease between calls";
  // Calls and the keeper take turns on the machine (ThreadSanitizer watches this preset).
  for (int i = 0; i < 2000; ++i)
    (void)sb.info();
  sb.kill();
  const int after_kill = renewals.load();
  std::this_thread::sleep_for(LeasingMachine::kEvery * 5);
  EXPECT_EQ(renewals.load(), after_kill) << "a killed sandbox's lease was renewed";
}

errc create_code(const CreateOptions& o) {
  try {
    (void)sync::Sandbox::create("careless://", o);
  } catch (const Error& e) {
    return e.sbx_code();
  }
  return errc{};
}

// A pooled connection reaches the machine inside every wrapper (the admission guard, the
// flight recorder) as handle_reused, not as a new connection: the HTTP machines repeat a
// safe request only on a reused connection that turns out stale.
TEST(ForwardingMachine, AReusedConnectionIsForwardedAsReused) {
  struct Inputs : CarelessMachine {
    std::vector<std::string> seen;
    void handle_connected(ConnId c, Instant) override {
      seen.push_back("connected " + std::to_string(c));
    }
    void handle_reused(ConnId c, Instant) override {
      seen.push_back("reused " + std::to_string(c));
    }
  };
  auto inner = std::make_unique<Inputs>();
  Inputs& m = *inner;
  auto sink = std::make_shared<flight::StringTraceSink>();
  flight::Recorder recorded(std::make_unique<ForwardingMachine>(std::move(inner)), flight::Header{},
                            sink);
  recorded.handle_reused(1, Instant{});
  recorded.handle_connected(2, Instant{});
  EXPECT_EQ(m.seen, (std::vector<std::string>{"reused 1", "connected 2"}));
}

TEST(Admission, RequireIsolationHoldsForABackendThatIgnoresIt) {
  ASSERT_TRUE(registered);
  CreateOptions o;
  o.require_isolation = IsolationTier::Container;
  EXPECT_EQ(create_code(o), errc::IsolationNotSatisfied);
}

TEST(Admission, NoNetworkPolicyMeansNoSandbox) {
  ASSERT_TRUE(registered);
  EXPECT_EQ(create_code({}), errc::PolicyUnenforceable);
  CreateOptions allow;
  allow.network.allow = {"pypi.org"};
  EXPECT_EQ(create_code(allow), errc::PolicyUnenforceable);
}

TEST(Admission, UndeclaredResourcesAreRefusedWithTheirCode) {
  // fake:// with network policy but without resource caps or a disk limit.
  CreateOptions o;
  o.resources.memory_bytes = 64 << 20;
  try {
    (void)sync::Sandbox::create("fake://?caps=network_policy,filesystem", o);
    FAIL() << "created without resource caps";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::ResourceLimitUnsupported);
  }
}

TEST(Admission, TheRefusalHasItsRecord) {
  ASSERT_TRUE(registered);
  auto queue = std::make_shared<QueueSink>();
  CreateOptions o;
  o.audit.sink = queue;
  EXPECT_EQ(create_code(o), errc::PolicyUnenforceable);
  const auto records = queue->drain();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].operation, Operation::Create);
  EXPECT_EQ(records[0].outcome, Outcome::Failed);
  EXPECT_EQ(records[0].error_code, static_cast<int>(errc::PolicyUnenforceable));
}

std::vector<Event> drain(Machine& m) {
  std::vector<Event> out;
  while (auto e = m.poll_event())
    out.push_back(std::move(*e));
  return out;
}

TEST(MachineCore, AFatalErrorFailsEveryOperationAndStaysSticky) {
  CarelessMachine m;
  const Instant t{};
  const OpId a = m.pending(Operation::Run, t);
  const OpId b = m.pending(Operation::ReadFile, t);
  EXPECT_NE(m.describe(t).find("run"), std::string::npos);
  m.break_down(Problem{errc::RemoteProtocolViolation, "the channel is garbage", {}}, t);
  std::set<OpId> failed;
  for (const Event& e : drain(m)) {
    if (const auto* f = std::get_if<event::Failed>(&e)) {
      EXPECT_EQ(f->problem.code, errc::RemoteProtocolViolation);
      failed.insert(f->op);
    }
  }
  EXPECT_EQ(failed, (std::set<OpId>{a, b}));
  // Later work fails at once with the same problem, and does nothing.
  const OpId c = m.submit_info(t + 1s);
  const auto later = drain(m);
  ASSERT_FALSE(later.empty());
  const auto* f = std::get_if<event::Failed>(&later.front());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->op, c);
  EXPECT_EQ(f->problem.code, errc::RemoteProtocolViolation);
  EXPECT_FALSE(m.poll_request());
}

TEST(MachineCore, EveryOperationHasADeadline) {
  CarelessMachine m;
  CreateOptions o;
  o.limits.operation_timeout = 2s;
  (void)m.submit_create(o, Instant{});
  (void)drain(m);
  const OpId op = m.pending(Operation::ReadFile, Instant{});
  ASSERT_EQ(m.poll_deadline(), Instant{} + 2s);
  m.handle_timeout(Instant{} + 2s);
  const auto events = drain(m);
  ASSERT_FALSE(events.empty());
  const auto* f = std::get_if<event::Failed>(&events.front());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->op, op);
  EXPECT_EQ(f->problem.code, errc::OperationTimeout);
}

TEST(MachineCore, LimitsAreSetPerSandbox) {
  CarelessMachine m;
  CreateOptions o;
  o.limits.max_pending_operations = 2;
  (void)m.submit_create(o, Instant{});
  (void)drain(m);
  (void)m.pending(Operation::Run, Instant{});
  (void)m.pending(Operation::Run, Instant{});
  const OpId third = m.pending(Operation::Run, Instant{});
  const auto events = drain(m);
  ASSERT_FALSE(events.empty());
  const auto* f = std::get_if<event::Failed>(&events.front());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->op, third);
  EXPECT_EQ(f->problem.code, errc::QueueFull);
}

TEST(MachineCore, LimitsAreValidated) {
  CreateOptions o;
  o.limits.stream_buffer = 10;
  EXPECT_FALSE(o.validate());
}

// A Docker engine that answers create and start, then never answers an archive request: the
// endpoint of a file transfer stalls.
class StallingDaemon final : public sim::Peer {
 public:
  void on_bytes(std::string_view data, std::string& reply, bool& close) override {
    got_ += data;
    const std::size_t end = got_.find("\r\n\r\n");
    if (end == std::string::npos || answered_) return;
    answered_ = true;
    const std::string line = got_.substr(0, got_.find("\r\n"));
    auto answer = [&](int status, std::string_view reason, std::string_view body) {
      reply =
          "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
          "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\n\r\n" + std::string(body);
      close = true;
    };
    if (line.find("/archive") != std::string::npos) return;  // stalls: no reply, ever
    if (line.starts_with("POST /v1.41/containers/create"))
      return answer(201, "Created", R"({"Id":"c0ffee"})");
    if (line.find("/start") != std::string::npos) return answer(204, "No Content", "");
    if (line.starts_with("GET /v1.41/containers/json")) return answer(200, "OK", "[]");
    answer(204, "No Content", "");  // removal
  }

 private:
  std::string got_;
  bool answered_ = false;
};

TEST(MachineCore, AStalledFileTransferTimesOutWithItsCodeInTheSyncApi) {
  sim::Config c;
  c.peers = [](const Endpoint&) { return std::make_unique<StallingDaemon>(); };
  auto queue = std::make_shared<QueueSink>();
  CreateOptions o;
  o.outlive_owner = true;  // no owner lease (its attach stream is not what is tested)
  o.limits.operation_timeout = 3s;
  o.audit.sink = queue;
  auto sb = sync::Sandbox::create("docker://img?agent=off", o, sim::make_link(c));  // HTTP only
  try {
    (void)sb.read_file("/etc/hostname");
    FAIL() << "a stalled read_file returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::OperationTimeout) << e.what();
  }
  bool seen = false;
  for (const auto& r : queue->drain()) {
    if (r.operation != Operation::ReadFile) continue;
    seen = true;
    EXPECT_EQ(r.error_code, static_cast<int>(errc::OperationTimeout));
    EXPECT_GE(r.duration, 3s);
    EXPECT_LT(r.duration, 3s + 100ms);  // at the deadline, not later
  }
  EXPECT_TRUE(seen);
  sb.detach();
}

}  // namespace
}  // namespace sandboxio
