// Three deliberately broken backends, each a fake:// with one lie added. The contract suite
// must catch each lie exactly where it is, and nowhere else: this is what proves the suite
// tests behaviour rather than passing anything.
#include <gtest/gtest.h>

#include <set>

#include "sandboxio/config.hpp"
#include "sandboxio/contract.hpp"
#include "sandboxio/fake.hpp"
#include "sandboxio/sim.hpp"

namespace {

using namespace sandboxio;

// Forwards everything to a real fake machine (the engine's ForwardingMachine); subclasses
// change one behaviour.
using Forwarding = ForwardingMachine;

// Lie 1: stderr is merged into stdout.
class MergesStderr final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  std::optional<Event> poll_event() override {
    auto e = Forwarding::poll_event();
    if (!e) return e;
    if (auto* out = std::get_if<event::Output>(&*e)) {
      out->chunk.stream = StreamKind::Stdout;
      out->chunk.offset = merged_[out->op];
      merged_[out->op] += out->chunk.data.size();
    } else if (auto* done = std::get_if<event::Done>(&*e)) {
      if (auto* r = std::get_if<ExecResult>(&done->value)) {
        r->stdout_bytes += r->stderr_bytes;
        r->stderr_bytes.clear();
      }
    }
    return e;
  }

 private:
  std::map<OpId, std::uint64_t> merged_;
};

// Lie 2: a dropped or cancelled stream is reported cancelled, but the process keeps running.
class LeaksOnDrop final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  void submit_cancel(OpId op, Instant) override {
    abandoned_.insert(op);
    pending_.push_back(event::Cancelled{op, false});
  }
  std::optional<Event> poll_event() override {
    if (!pending_.empty()) {
      Event e = pending_.front();
      pending_.erase(pending_.begin());
      return e;
    }
    while (auto e = Forwarding::poll_event()) {
      const OpId op = std::visit(
          [](const auto& ev) -> OpId {
            if constexpr (requires { ev.op; }) {
              return ev.op;
            } else {
              return 0;
            }
          },
          *e);
      if (abandoned_.count(op) == 0) return e;
    }
    return std::nullopt;
  }

 private:
  std::set<OpId> abandoned_;
  std::vector<Event> pending_;
};

// Lie 3: declares network policy enforcement but lets traffic out.
class IgnoresNetworkPolicy final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  OpId submit_create(const CreateOptions& o, Instant n) override {
    CreateOptions open = o;
    open.network = NetworkPolicy::allowing({"example.com", "*.example.com"});
    reported_ = o.network;
    return Forwarding::submit_create(open, n);
  }
  std::optional<Event> poll_event() override {
    auto e = Forwarding::poll_event();
    if (e) {
      if (auto* done = std::get_if<event::Done>(&*e)) {
        if (auto* info = std::get_if<SandboxInfo>(&done->value))
          info->network = reported_;  // hides it
      }
    }
    return e;
  }

 private:
  NetworkPolicy reported_;
};

template <class Broken>
MachineFactory broken_factory(std::string caps) {
  return [caps](const Dsn& dsn) -> Result<std::unique_ptr<Machine>> {
    std::string query = "?tier=container&caps=" + caps;
    for (const auto& o : dsn.options)
      query += "&" + o.name + "=" + o.value;  // e.g. create_delay
    auto fake = parse_dsn("fake://" + dsn.target + query).value();
    auto inner = fake::make_machine(fake);
    if (!inner) return inner.problem();
    return std::unique_ptr<Machine>(std::make_unique<Broken>(std::move(inner).value()));
  };
}

const std::string kCaps =
    "network_policy,filesystem,streaming,stateful_code,rich_output,resource_caps,reattach,stdin";
// The honest fake needs the allow list to carry the lie out; it still reports it does not.
const std::string kNetCaps = kCaps + ",network_allow_list";

contract::Target target_for(const std::string& scheme, std::shared_ptr<fake::World> world) {
  contract::Target t;
  t.name = scheme;
  t.dsn = scheme + "://" + world->name();
  t.transport = contract::blocking_transport([] { return sim::make_link({.seed = 3}); });
  t.alive_probe = [](const std::string& m) { return std::vector<std::string>{"pgrep", "-f", m}; };
  t.egress_probe = {"curl", "-sS", "https://example.com/"};
  t.full_python = false;
  t.slow_create_dsn = t.dsn + "?create_delay=10s";
  return t;
}

std::set<std::string> failing_rows(const contract::Target& t) {
  std::set<std::string> rows;
  for (const auto& f : contract::run_all(t))
    rows.insert(f.row);
  return rows;
}

class BrokenFakes : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(
        registry().add({"broken-merge", "test", broken_factory<MergesStderr>(kCaps), {}, {}}).ok());
    ASSERT_TRUE(
        registry().add({"broken-leak", "test", broken_factory<LeaksOnDrop>(kCaps), {}, {}}).ok());
    ASSERT_TRUE(
        registry()
            .add({"broken-net", "test", broken_factory<IgnoresNetworkPolicy>(kNetCaps), {}, {}})
            .ok());
  }
};

TEST_F(BrokenFakes, MergedStreamsFailExactlyTheirRows) {
  const auto rows = failing_rows(target_for("broken-merge", fake::World::create()));
  EXPECT_EQ(rows, (std::set<std::string>{"run.streams_apart", "run.missing_binary_says_why",
                                         "run_code.stateless", "stream.order_within_streams"}));
}

TEST_F(BrokenFakes, LeakOnDropFailsExactlyItsRows) {
  const auto rows = failing_rows(target_for("broken-leak", fake::World::create()));
  EXPECT_EQ(rows, (std::set<std::string>{"stream.drop_mid_stream_kills",
                                         "stream.consumer_exception_kills",
                                         "stream.cancellation_kills"}));
}

TEST_F(BrokenFakes, IgnoredNetworkPolicyFailsExactlyItsRow) {
  const auto rows = failing_rows(target_for("broken-net", fake::World::create()));
  EXPECT_EQ(rows, (std::set<std::string>{"network.deny_by_default"}));
}

TEST_F(BrokenFakes, TheHonestFakeFailsNothingInTheSameSetting) {
  auto world = fake::World::create();
  contract::Target t = target_for("fake", world);
  t.dsn = world->dsn() + "?tier=container&caps=" + kCaps;
  t.slow_create_dsn = t.dsn + "&create_delay=10s";
  EXPECT_EQ(failing_rows(t), std::set<std::string>{});
}

}  // namespace
