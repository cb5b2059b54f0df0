// sandboxio mcp: the MCP server. Configuration is fixed here, at start.
#include <iostream>

#include "commands.hpp"
#include "common.hpp"
#include "sandboxio/mcp.hpp"
#include "sandboxio/routing.hpp"

namespace sandboxio::cli {

int mcp(const std::string& backend, const std::string& http, const std::string& routing,
        const std::string& tenant) {
  mcp::ServerOptions o;
  o.backend = backend;
  if (!routing.empty()) {
    const RoutingTable table = RoutingTable::load(routing);
    const IsolationClass& c = table.route_for("mcp", tenant);
    o.create = c.create_options();
    if (o.backend.empty()) o.backend = c.backend;
  }
  if (o.backend.empty()) {
    const auto chosen = choose_backend({});
    o.backend = chosen.first;
    std::cerr << "sandboxio mcp: serving " << o.backend << " (" << chosen.second << ")\n";
  }
  if (http.empty()) return mcp::serve_stdio(o);
  return mcp::serve_http(o, http, [&](unsigned short port) {
    std::cerr << "sandboxio mcp: serving http://127.0.0.1:" << port << "/mcp on " << o.backend
              << std::endl;
  });
}

}  // namespace sandboxio::cli
