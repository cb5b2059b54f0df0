// fake:// through the whole contract suite: three configurations (everything the fake can
// declare; almost nothing declared; the UNKNOWN tier), each through the blocking transport
// (real time), the simulated link (virtual time) and the Asio transport.
#include "sandboxio/contract_gtest.hpp"
#include "sandboxio/fake.hpp"
#include "sandboxio/sim.hpp"

namespace {

using sandboxio::contract::Target;

enum class Via { Blocking, Sim, Asio };

Target fake_target(const std::string& query, Via via) {
  static std::vector<std::shared_ptr<sandboxio::fake::World>> worlds;  // alive for the whole run
  worlds.push_back(sandboxio::fake::World::create());
  auto world = worlds.back();
  const std::string dsn = world->dsn() + query;
  const std::string sep = query.empty() ? "?" : "&";
  Target t;
  t.name = dsn;
  t.dsn = dsn;
  switch (via) {
    case Via::Blocking:
      t.transport = sandboxio::contract::blocking_transport();
      break;
    case Via::Sim:
      t.transport = sandboxio::contract::blocking_transport(
          [] { return sandboxio::sim::make_link({.seed = 42}); });
      break;
    case Via::Asio:
      t.transport = sandboxio::contract::asio_transport();
      break;
  }
  t.alive_probe = [](const std::string& marker) {
    return std::vector<std::string>{"pgrep", "-f", marker};
  };
  t.egress_probe = {"curl", "-sS", "--max-time", "5", "https://example.com/"};
  t.full_python = false;  // fake:// interprets a subset of python: no classes
  t.slow_create_dsn = dsn + sep + "create_delay=2s";
  t.slow_teardown_dsn = dsn + sep + "create_delay=2s&teardown_delay=60s";
  t.live_sandboxes = [world] { return world->live_sandboxes(); };
  return t;
}

const std::string kEverything =
    "?tier=container&caps=network_policy,network_allow_list,filesystem,streaming,stateful_code,"
    "rich_output,resource_caps,reattach,stdin";
const std::string kAlmostNothing = "?tier=container&caps=network_policy";

SANDBOXIO_CONTRACT_TESTS(FakeEverythingBlocking, fake_target(kEverything, Via::Blocking));
SANDBOXIO_CONTRACT_TESTS(FakeEverythingSim, fake_target(kEverything, Via::Sim));
SANDBOXIO_CONTRACT_TESTS(FakeEverythingAsio, fake_target(kEverything, Via::Asio));
SANDBOXIO_CONTRACT_TESTS(FakeAlmostNothingBlocking, fake_target(kAlmostNothing, Via::Blocking));
SANDBOXIO_CONTRACT_TESTS(FakeAlmostNothingSim, fake_target(kAlmostNothing, Via::Sim));
SANDBOXIO_CONTRACT_TESTS(FakeAlmostNothingAsio, fake_target(kAlmostNothing, Via::Asio));
SANDBOXIO_CONTRACT_TESTS(FakeUnknownTierBlocking, fake_target("", Via::Blocking));
SANDBOXIO_CONTRACT_TESTS(FakeUnknownTierSim, fake_target("", Via::Sim));
SANDBOXIO_CONTRACT_TESTS(FakeUnknownTierAsio, fake_target("", Via::Asio));

}  // namespace
