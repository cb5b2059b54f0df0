// This process's identity, for the labels that make sandboxes reapable: one session id per
// process (random, shared by every backend) and the owner "host:pid". Read on the driver side
// (configuration, transports), never by a machine: machines get these as values.
//
//   config.owner = sandboxio::backend::process_owner();
//   auto gone = sandboxio::backend::owners_gone(probe.owners);  // answers request::ProbeOwners
#pragma once

#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/dsn.hpp"
#include "sandboxio/registry.hpp"

namespace sandboxio::backend {

/// 12 random characters [0-9a-z], the same for the life of the process.
[[nodiscard]] const std::string& process_session();
/// "host:pid" of this process.
[[nodiscard]] std::string process_owner();
/// The owners among `owners` ("host:pid") known to be gone: on this host, with no such process.
/// Owners on other hosts are never called gone.
[[nodiscard]] std::vector<std::string> owners_gone(const std::vector<std::string>& owners);
/// The registry entry of a backend whose machine is made from a Config read from the DSN:
/// `config_for(dsn)` gives the Config (or its Problem), `make(config)` the machine.
template <class ConfigFor, class Make, std::size_t N>
[[nodiscard]] BackendEntry entry(std::string scheme, std::string summary,
                                 const OptionSpec (&options)[N], ConfigFor config_for, Make make) {
  BackendEntry e;
  e.scheme = std::move(scheme);
  e.summary = std::move(summary);
  e.factory = [config_for, make](const Dsn& dsn) -> Result<std::unique_ptr<Machine>> {
    auto config = config_for(dsn);
    if (!config) return config.problem();
    return make(std::move(config).value());
  };
  e.options.assign(std::begin(options), std::end(options));
  return e;
}

/// The value of an environment variable, or `fallback` when it is unset or empty.
[[nodiscard]] std::string env_or(const char* name, std::string fallback = {});

}  // namespace sandboxio::backend
