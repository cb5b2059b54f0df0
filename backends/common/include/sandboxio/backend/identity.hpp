// This process's identity, for the labels that make sandboxes reapable: one session id per
// process (random, shared by every backend) and the owner "host:pid". Read on the driver side
// (configuration, transports), never by a machine: machines get these as values.
//
//   config.owner = sandboxio::backend::process_owner();
//   auto gone = sandboxio::backend::owners_gone(probe.owners);  // answers request::ProbeOwners
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sandboxio::backend {

/// 12 random characters [0-9a-z], the same for the life of the process.
[[nodiscard]] const std::string& process_session();
/// "host:pid" of this process.
[[nodiscard]] std::string process_owner();
/// The owners among `owners` ("host:pid") known to be gone: on this host, with no such process.
/// Owners on other hosts are never called gone.
[[nodiscard]] std::vector<std::string> owners_gone(const std::vector<std::string>& owners);
/// The value of an environment variable, or `fallback` when it is unset or empty.
[[nodiscard]] std::string env_or(const char* name, std::string fallback = {});

}  // namespace sandboxio::backend
