// fake:// through the whole contract suite: three configurations (everything the fake can
// declare; almost nothing declared; the UNKNOWN tier), each over the POSIX link (real time)
// and the simulated link (virtual time).
#include "sandboxio/contract_gtest.hpp"
#include "sandboxio/fake.hpp"
#include "sandboxio/sim.hpp"

namespace {

using sandboxio::contract::Target;

Target fake_target(const std::string& name, const std::string& query, bool simulated) {
  static std::vector<std::shared_ptr<sandboxio::fake::World>> worlds;  // alive for the whole run
  worlds.push_back(sandboxio::fake::World::create());
  const std::string dsn = worlds.back()->dsn() + query;
  Target t;
  t.name = name;
  t.dsn = dsn;
  if (simulated) {
    t.make_link = [] { return sandboxio::sim::make_link({.seed = 42}); };
  }
  t.alive_probe = [](const std::string& marker) {
    return std::vector<std::string>{"pgrep", "-f", marker};
  };
  t.egress_probe = {"curl", "-sS", "--max-time", "5", "https://example.com/"};
  t.slow_create_dsn = dsn + (query.empty() ? "?" : "&") + "create_delay=10s";
  return t;
}

const std::string kEverything =
    "?tier=container&caps=network_policy,network_allow_list,filesystem,streaming,stateful_code,"
    "rich_output,resource_caps,reattach,stdin";
const std::string kAlmostNothing = "?tier=container&caps=network_policy";

SANDBOXIO_CONTRACT_TESTS(FakeEverythingPosix, fake_target("everything", kEverything, false));
SANDBOXIO_CONTRACT_TESTS(FakeEverythingSim, fake_target("everything", kEverything, true));
SANDBOXIO_CONTRACT_TESTS(FakeAlmostNothingPosix,
                         fake_target("almost-nothing", kAlmostNothing, false));
SANDBOXIO_CONTRACT_TESTS(FakeAlmostNothingSim, fake_target("almost-nothing", kAlmostNothing, true));
SANDBOXIO_CONTRACT_TESTS(FakeUnknownTierPosix, fake_target("unknown-tier", "", false));
SANDBOXIO_CONTRACT_TESTS(FakeUnknownTierSim, fake_target("unknown-tier", "", true));

}  // namespace
