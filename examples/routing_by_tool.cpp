// Routing by tool: an operator's routing file says which isolation class each agent tool gets
// (backend, minimum tier, network, limits, lifetime); the program only names the tool and the
// tenant. One sandbox per class is made on first use and reused by every tool routed to it.
//
//   routing_by_tool [ROUTING_FILE]
//
// Without a file it uses the one below, where everything runs on fake://; the tests also run
// it with examples/routing-docker.yaml, which sends run_command to Docker.
#include <iostream>
#include <map>
#include <string>

#include "sandboxio/routing.hpp"
#include "sandboxio/sync.hpp"

namespace {

constexpr const char* kDefaultRouting = R"(
default_class: standard
classes:
  standard: {backend: "fake://", lifetime: 5m, network: deny}
  untrusted: {backend: "fake://?tier=microvm", min_tier: microvm, lifetime: 2m}
routes:
  - {tool: run_code, class: untrusted}
  - {tool: "*", tenant: ci, class: standard}
)";

struct ToolCall {
  std::string tool, tenant;
  std::vector<std::string> argv;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const sandboxio::RoutingTable table =
        argc > 1 ? sandboxio::RoutingTable::load(argv[1])
                 : sandboxio::RoutingTable::parse(kDefaultRouting, "built-in").value();

    // What an agent framework would send: a tool name, a tenant, and the work.
    const std::vector<ToolCall> calls = {
        {"run_command", "acme", {"sh", "-c", "echo command from acme"}},
        {"run_code", "acme", {"python3", "-c", "print(6 * 7)"}},
        {"run_command", "ci", {"echo", "command from ci"}},
    };

    std::map<std::string, sandboxio::sync::Sandbox> by_class;  // one sandbox per class
    for (const ToolCall& call : calls) {
      const sandboxio::IsolationClass& cls = table.route_for(call.tool, call.tenant);
      auto it = by_class.find(cls.name);
      if (it == by_class.end()) {
        it = by_class
                 .emplace(cls.name,
                          sandboxio::sync::Sandbox::create(cls.backend, cls.create_options()))
                 .first;
      }
      const sandboxio::ExecResult r = it->second.run(call.argv);
      std::cout << call.tool << " for " << call.tenant << " -> class " << cls.name << " ("
                << it->second.info().backend << ", tier " << it->second.info().tier.name()
                << "): exit " << r.exit_code.value_or(-1) << ", " << r.stdout_bytes;
      if (!r.ok()) return 1;
    }
    std::cout << by_class.size() << " sandboxes for " << calls.size() << " calls\n";
  } catch (const sandboxio::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
