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

// Forwards everything to a real fake machine; subclasses change one behaviour.
class Forwarding : public Machine {
 public:
  explicit Forwarding(std::unique_ptr<Machine> inner) : inner_(std::move(inner)) {}
  std::string_view scheme() const noexcept override { return inner_->scheme(); }
  CapabilitySet capabilities() const noexcept override { return inner_->capabilities(); }
  IsolationTier tier() const noexcept override { return inner_->tier(); }
  void handle_connected(ConnId c, Instant n) override { inner_->handle_connected(c, n); }
  void handle_connect_failed(ConnId c, Problem p, Instant n) override {
    inner_->handle_connect_failed(c, std::move(p), n);
  }
  std::size_t handle_bytes(ConnId c, std::string_view d, Instant n) override {
    return inner_->handle_bytes(c, d, n);
  }
  void handle_eof(ConnId c, Instant n) override { inner_->handle_eof(c, n); }
  void handle_timeout(Instant n) override { inner_->handle_timeout(n); }
  void handle_consumed(OpId op, std::size_t b, Instant n) override {
    inner_->handle_consumed(op, b, n);
  }
  OpId submit_create(const CreateOptions& o, Instant n) override {
    return inner_->submit_create(o, n);
  }
  OpId submit_connect(std::string id, const CreateOptions& o, Instant n) override {
    return inner_->submit_connect(std::move(id), o, n);
  }
  OpId submit_info(Instant n) override { return inner_->submit_info(n); }
  OpId submit_run(Command c, Instant n) override { return inner_->submit_run(std::move(c), n); }
  OpId submit_stream(Command c, Instant n) override {
    return inner_->submit_stream(std::move(c), n);
  }
  OpId submit_run_code(CodeRequest r, Instant n) override {
    return inner_->submit_run_code(std::move(r), n);
  }
  OpId submit_create_context(std::string l, Instant n) override {
    return inner_->submit_create_context(std::move(l), n);
  }
  OpId submit_write_file(std::string p, Bytes d, Instant n) override {
    return inner_->submit_write_file(std::move(p), std::move(d), n);
  }
  OpId submit_read_file(std::string p, Instant n) override {
    return inner_->submit_read_file(std::move(p), n);
  }
  OpId submit_list_files(std::string p, Instant n) override {
    return inner_->submit_list_files(std::move(p), n);
  }
  OpId submit_remove_file(std::string p, Instant n) override {
    return inner_->submit_remove_file(std::move(p), n);
  }
  OpId submit_kill(Instant n) override { return inner_->submit_kill(n); }
  OpId submit_list_managed(std::map<std::string, std::string> l, Instant n) override {
    return inner_->submit_list_managed(std::move(l), n);
  }
  OpId submit_remove_managed(std::string id, Instant n) override {
    return inner_->submit_remove_managed(std::move(id), n);
  }
  void submit_cancel(OpId op, Instant n) override { inner_->submit_cancel(op, n); }
  std::optional<Request> poll_request() override { return inner_->poll_request(); }
  std::optional<Event> poll_event() override { return inner_->poll_event(); }
  std::optional<Instant> poll_deadline() const override { return inner_->poll_deadline(); }

 protected:
  std::unique_ptr<Machine> inner_;
};

// Lie 1: stderr is merged into stdout.
class MergesStderr final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  std::optional<Event> poll_event() override {
    auto e = inner_->poll_event();
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
    while (auto e = inner_->poll_event()) {
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
    return inner_->submit_create(open, n);
  }
  std::optional<Event> poll_event() override {
    auto e = inner_->poll_event();
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
