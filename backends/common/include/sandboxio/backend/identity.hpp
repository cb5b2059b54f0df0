// This process's identity, for the labels that make sandboxes reapable: one session id per
// process (random, shared by every backend) and the owner "host:pid". Read on the driver side
// (configuration, transports), never by a machine: machines get these as values.
//
//   config.owner = sandboxio::backend::process_owner();
//   auto gone = sandboxio::backend::owners_gone(probe.owners);  // answers request::ProbeOwners
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
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

/// What a backend's configuration takes from the process rather than from its DSN: an
/// environment variable (through env_or), the owner, the session, a per-process counter.
/// Normally it is just read. While an AmbientScope is open on this thread, what is read is
/// also written into it (Capture: the flight recorder keeps it in the trace's header), or is
/// answered from it (Replay: the machine is configured as the recorded one was).
class AmbientScope {
 public:
  enum class Mode : std::uint8_t { Capture, Replay };
  AmbientScope(Mode mode, std::map<std::string, std::string>& values);
  ~AmbientScope();
  AmbientScope(const AmbientScope&) = delete;
  AmbientScope& operator=(const AmbientScope&) = delete;

 private:
  friend std::string ambient(const std::string&, const std::function<std::string()>&);
  friend bool ambient_replaying() noexcept;
  std::string answer(const std::string& key, const std::function<std::string()>& compute);
  Mode mode_;
  std::map<std::string, std::string>* values_;
  AmbientScope* outer_;
};
/// True while a Replay scope is open on this thread: a configuration that uses shared state of
/// the process (fake://'s World) makes a private copy instead.
[[nodiscard]] bool ambient_replaying() noexcept;
/// `compute()`, through the open scope under `key` (see AmbientScope).
[[nodiscard]] std::string ambient(const std::string& key,
                                  const std::function<std::string()>& compute);

}  // namespace sandboxio::backend
