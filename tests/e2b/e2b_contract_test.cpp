// The whole contract suite on e2b:// against the local E2B-compatible server over TLS (test CA),
// through the blocking and the Asio transports. The server really runs the commands, each
// sandbox in its own namespaces; the official SDK scenario (sdk_scenario.mjs) proves that it
// answers as E2B does.
#include <gtest/gtest.h>

#include "e2b_support.hpp"
#include "sandboxio/contract.hpp"
#include "sandboxio/contract_gtest.hpp"

namespace {

using sandboxio::contract::Target;

Target e2b_target(std::shared_ptr<sandboxio::contract::Transport> transport) {
  const auto server = sandboxio::testing::e2b_server();
  Target t;
  t.name = "e2b";
  t.dsn = server.dsn();
  t.transport = std::move(transport);
  t.alive_probe = [](const std::string& marker) {
    return std::vector<std::string>{"pgrep", "-f", "--", marker};
  };
  // Exits 0 when the sandbox has a route out; a UDP connect() sends no packet.
  t.egress_probe = {"python3", "-c",
                    "import socket; socket.socket(socket.AF_INET, "
                    "socket.SOCK_DGRAM).connect(('192.0.2.1', 9))"};
  t.live_sandboxes = [] { return sandboxio::testing::my_e2b_sandboxes(); };
  // E2B's allow lists match names by Host and SNI on ports 80 and 443; the local server
  // enforces them that way (firewall.py), with the canaries behind its test resolver.
  t.fetch_probe = sandboxio::contract::python_fetch;
  t.tls_fetch_probe = sandboxio::contract::python_tls_fetch;
  t.route_canary = sandboxio::testing::route_e2b_canary;
  t.slow_create_dsn = server.dsn("sbx-slow-create");
  return t;
}

class E2bContract : public ::testing::TestWithParam<std::tuple<std::string, std::size_t>> {
 protected:
  void SetUp() override { SBX_REQUIRE_E2B_SERVER(); }
  static const Target& target(const std::string& via) {
    static const Target blocking = e2b_target(sandboxio::contract::blocking_transport());
    static const Target asio = e2b_target(sandboxio::contract::asio_transport());
    return via == "Blocking" ? blocking : asio;
  }
};

TEST_P(E2bContract, Case) {
  const auto& [via, index] = GetParam();
  const auto& c = sandboxio::contract::cases()[index];
  if (auto failure = sandboxio::contract::run_case(c, target(via))) {
    FAIL() << failure->row << ": " << failure->message;
  }
  EXPECT_TRUE(sandboxio::testing::no_e2b_sandbox_left_within())
      << c.row << " left a sandbox behind";
}

INSTANTIATE_TEST_SUITE_P(
    E2b, E2bContract,
    ::testing::Combine(::testing::Values("Blocking", "Asio"),
                       ::testing::Range<std::size_t>(0, sandboxio::contract::cases().size())),
    [](const auto& param_info) {
      return std::get<0>(param_info.param) + "_" +
             sandboxio::contract::test_name_of(std::get<1>(param_info.param));
    });

}  // namespace
