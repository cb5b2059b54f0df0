// The routing file (sandboxio-routing.yaml): isolation classes, and routes from a tool and a
// tenant to a class. An operator writes it once; the CLI and the MCP server take it with
// --routing, and programs ask route_for(tool, tenant) which backend and options to use.
//
//   auto table = sandboxio::RoutingTable::load("sandboxio-routing.yaml");   // throws on error
//   const sandboxio::IsolationClass& c = table.route_for("run_code", "acme");
//   auto sb = sandboxio::sync::Sandbox::create(c.backend, c.create_options());
//
//   default_class: standard            # mandatory: what an unmatched tool/tenant gets
//   classes:
//     standard:
//       backend: docker://python:3.12-slim
//       min_tier: container            # unknown | container | gvisor | microvm
//       network: deny                  # or a list of hosts to allow
//       resources: {cpus: 1, memory: 512MiB, pids: 128}
//       lifetime: 10m
//   routes:                            # first match wins; "*" matches anything
//     - {tool: run_code, tenant: "*", class: standard}
//
// Every error is SBX_E1005 InvalidRoutingFile naming the file, line and column.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/create_options.hpp"
#include "sandboxio/isolation.hpp"
#include "sandboxio/network_policy.hpp"
#include "sandboxio/resources.hpp"

namespace sandboxio {

struct IsolationClass {
  std::string name{};
  std::string backend{};  // a DSN
  std::optional<IsolationTier> min_tier{};
  NetworkPolicy network{};
  Resources resources{};
  std::chrono::seconds lifetime = kDefaultLifetime;

  /// The create options this class asks for (lifetime, network, resources, required tier).
  [[nodiscard]] CreateOptions create_options() const;
  friend bool operator==(const IsolationClass&, const IsolationClass&) = default;
};

struct Route {
  std::string tool = "*";
  std::string tenant = "*";
  std::string class_name{};
  friend bool operator==(const Route&, const Route&) = default;
};

class RoutingTable {
 public:
  /// Parses YAML text; `source` names it in errors ("sandboxio-routing.yaml:12:5: ...").
  [[nodiscard]] static Result<RoutingTable> parse(std::string_view yaml,
                                                  std::string_view source = "<routing>");
  /// Reads and parses a file. Throws sandboxio::Error (SBX_E1005) on any problem.
  [[nodiscard]] static RoutingTable load(const std::string& path);

  /// The class for this tool and tenant: the first route that matches, else default_class.
  [[nodiscard]] const IsolationClass& route_for(std::string_view tool,
                                                std::string_view tenant) const;
  [[nodiscard]] const std::vector<IsolationClass>& classes() const& noexcept { return classes_; }
  [[nodiscard]] const std::vector<Route>& routes() const& noexcept { return routes_; }
  [[nodiscard]] const IsolationClass& default_class() const& { return classes_.at(default_); }

 private:
  std::vector<IsolationClass> classes_{};
  std::vector<Route> routes_{};
  std::size_t default_ = 0;
};

}  // namespace sandboxio
