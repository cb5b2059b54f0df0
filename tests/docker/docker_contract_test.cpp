// The whole contract suite on docker:// against the real engine: with the python test image
// through the blocking and the Asio transports, through sandboxio-agent (the default: its
// direct socket where this process may reach it) and on the daemon's exec path (?agent=off);
// through the agent over the attach stream on a busybox image (no python3, no libc); and under
// gVisor (?runtime=runsc).
#include <gtest/gtest.h>

#include "docker_support.hpp"
#include "sandboxio/contract.hpp"
#include "sandboxio/contract_gtest.hpp"

namespace {

using sandboxio::contract::Target;

Target docker_target(std::shared_ptr<sandboxio::contract::Transport> transport,
                     const std::string& options = "",
                     const std::string& image = sandboxio::testing::kPythonImage) {
  Target t;
  t.name = options.empty() ? "docker" : "docker" + options;
  t.dsn = "docker://" + image + options;
  t.transport = std::move(transport);
  t.alive_probe = [](const std::string& marker) {
    return std::vector<std::string>{"pgrep", "-f", "--", marker};
  };
  // Exits 0 when the sandbox has a route out. A UDP connect() sends no packet, so the probe
  // never sends traffic anywhere even where it succeeds; 192.0.2.1 is TEST-NET-1.
  t.egress_probe = {"python3", "-c",
                    "import socket; socket.socket(socket.AF_INET, "
                    "socket.SOCK_DGRAM).connect(('192.0.2.1', 9))"};
  t.fetch_probe = sandboxio::contract::python_fetch;
  t.tls_fetch_probe = sandboxio::contract::python_tls_fetch;
  t.resolve_probe = sandboxio::contract::python_resolve;
  if (image == sandboxio::testing::kBusyboxImage) {
    // busybox's wget honours http_proxy; its nslookup asks the resolver the image names.
    t.fetch_probe = [](const std::string& url) {
      return std::vector<std::string>{"wget", "-q", "-O", "-", url};
    };
    t.resolve_probe = [](const std::string& name) {
      return std::vector<std::string>{"nslookup", name};
    };
    t.tls_fetch_probe = nullptr;  // busybox's wget has no TLS of its own
    // No python3: busybox's `ip` asks the kernel for a route (it sends nothing).
    t.has_python = false;
    t.egress_probe = {"ip", "route", "get", "192.0.2.1"};
    // No pgrep either: read every process's command line but the probe's own (the glob is
    // expanded before the probe starts any child).
    t.alive_probe = [](const std::string& marker) {
      return std::vector<std::string>{
          "sh", "-c",
          "for p in /proc/[0-9]*; do [ \"${p#/proc/}\" = \"$$\" ] && continue; "
          "tr '\\000' ' ' < $p/cmdline 2>/dev/null | grep -qF -- \"$1\" && exit 0; done; exit 1",
          "alive-probe", marker};
    };
  }
  t.live_sandboxes = [] { return sandboxio::testing::my_containers(); };
  static sandboxio::testing::StallingRegistry registry;
  t.slow_create_dsn = "docker://" + registry.image();
  return t;
}

class DockerContract : public ::testing::TestWithParam<std::tuple<std::string, std::size_t>> {
 protected:
  void SetUp() override { SBX_REQUIRE_ENGINE(); }
  static const Target& target(const std::string& via) {
    // The daemon's exec path (?agent=off).
    static const Target blocking =
        docker_target(sandboxio::contract::blocking_transport(), "?agent=off");
    static const Target asio = docker_target(sandboxio::contract::asio_transport(), "?agent=off");
    // The same suite through sandboxio-agent as the container's init: the default.
    static const Target blocking_agent = docker_target(sandboxio::contract::blocking_transport());
    static const Target asio_agent = docker_target(sandboxio::contract::asio_transport());
    // On busybox the agent is reached over the attach stream (?agent=attach), so the suite
    // holds for that route too; on the python image, over its direct socket where it can.
    static const Target blocking_busybox =
        docker_target(sandboxio::contract::blocking_transport(), "?agent=attach",
                      sandboxio::testing::kBusyboxImage);
    static const Target asio_busybox = docker_target(
        sandboxio::contract::asio_transport(), "?agent=attach", sandboxio::testing::kBusyboxImage);
    // Under gVisor (the engine's runsc runtime), through the agent: the GVISOR tier.
    static const Target blocking_gvisor =
        docker_target(sandboxio::contract::blocking_transport(), "?runtime=runsc");
    static const Target asio_gvisor =
        docker_target(sandboxio::contract::asio_transport(), "?runtime=runsc");
    if (via == "BlockingGvisor") return blocking_gvisor;
    if (via == "AsioGvisor") return asio_gvisor;
    if (via == "BlockingAgentBusybox") return blocking_busybox;
    if (via == "AsioAgentBusybox") return asio_busybox;
    if (via == "BlockingAgent") return blocking_agent;
    if (via == "AsioAgent") return asio_agent;
    return via == "Blocking" ? blocking : asio;
  }
};

TEST_P(DockerContract, Case) {
  const auto& [via, index] = GetParam();
  const auto& c = sandboxio::contract::cases()[index];
  if (auto failure = sandboxio::contract::run_case(c, target(via))) {
    FAIL() << failure->row << ": " << failure->message;
  }
  EXPECT_TRUE(sandboxio::testing::none_left_within()) << c.row << " left a container behind";
}

INSTANTIATE_TEST_SUITE_P(
    Docker, DockerContract,
    ::testing::Combine(::testing::Values("Blocking", "Asio", "BlockingAgent", "AsioAgent",
                                         "BlockingAgentBusybox", "AsioAgentBusybox",
                                         "BlockingGvisor", "AsioGvisor"),
                       ::testing::Range<std::size_t>(0, sandboxio::contract::cases().size())),
    [](const auto& param_info) {
      return std::get<0>(param_info.param) + "_" +
             sandboxio::contract::test_name_of(std::get<1>(param_info.param));
    });

}  // namespace
