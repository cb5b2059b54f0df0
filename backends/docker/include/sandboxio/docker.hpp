// docker://: sandboxes as Docker Engine containers, spoken to over the Engine API (v1.41) on a
// Unix socket or tcp:// (TLS with client certificates). The machine is sans-I/O like every
// backend; the transports own the socket.
//
//   auto sb = sandboxio::sync::Sandbox::create("docker://python:3.12-slim");
//   auto r = sb.run({"python3", "-c", "print(6 * 7)"});
//
// DSN: docker://IMAGE[?option=value...]
//   host=unix:///var/run/docker.sock | tcp://HOST:PORT   (default: DOCKER_HOST, then the socket)
//   user=UID[:GID]         run as this user (default: the image's)
//   read_only=true         read-only root filesystem (pair it with tmpfs=)
//   tmpfs=/tmp,/work       tmpfs mounts (files there move through an exec, not the archive API)
//   pull=missing|never     pull the image when absent (default missing)
//   runtime=runsc          the engine's gVisor runtime: isolation tier GVISOR
// What each declares and refuses: docs/reference/backends/docker.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sandboxio/dsn.hpp"
#include "sandboxio/machine.hpp"
#include "sandboxio/registry.hpp"

namespace sandboxio::docker {

/// The local engine's socket, /var/run/docker.sock.
[[nodiscard]] inline Endpoint local_socket() {
  Endpoint e;
  e.address = "/var/run/docker.sock";
  return e;
}

/// Everything the machine needs from outside, as values (it reads no environment and no clock:
/// wall time comes through Machine::handle_wall_clock, owner liveness through
/// request::ProbeOwners).
struct Config {
  Endpoint endpoint = local_socket();
  std::string image{};
  std::string user{};
  bool read_only = false;
  std::vector<std::string> tmpfs{};
  bool pull_missing = true;
  /// The engine's OCI runtime ("runsc": gVisor, tier GVISOR; "runc", "crun": CONTAINER);
  /// empty: the engine's default. The engine must have it registered (dockerd --add-runtime).
  std::string runtime{};
  /// "host:pid" of this process, for the owner label.
  std::string owner{};
  /// Random per process: labels containers and makes exec tokens unique.
  std::string session{};
  /// sandboxio-agent is uploaded into the container and runs as its init; commands and files
  /// go over its protocol (docs/reference/agent-protocol.md). The default wherever the agent's
  /// binary is installed; ?agent=off (or no binary, unless ?agent=on asks for it) leaves the
  /// daemon's exec path.
  bool agent = false;
  /// connect() to a sandbox whose init is the agent speaks to that agent through one exec of
  /// `sandboxio-agent --bridge`; false (an explicit ?agent=off) keeps to the exec path.
  bool bridge = true;
  /// With the agent and a local engine (a Unix socket), commands and files go over a Unix
  /// socket straight to the agent, through /proc/PID/root of the container's init, once the
  /// process listening there proves to be that init (SO_PEERCRED). That needs the client to
  /// run as root in the engine's PID namespace; otherwise, and with ?agent=attach, they go
  /// over the attach stream (or the bridge exec of a connect()).
  bool direct = true;
  /// The agent's static binary, read by config_for() (the machine does no I/O).
  std::shared_ptr<const std::string> agent_binary{};
};

/// Where the agent binary is looked for: SBX_AGENT, then the installed one
/// (LIBEXECDIR/sandboxio/sandboxio-agent), then the one in this build tree.
[[nodiscard]] std::vector<std::string> agent_search_path();

/// Reads the endpoint from the DSN's host option, else DOCKER_HOST / DOCKER_TLS_VERIFY /
/// DOCKER_CERT_PATH, else the local socket; fills owner, session and the clock.
[[nodiscard]] Result<Config> config_for(const Dsn& dsn);

/// Parses a Docker host address (unix:///path, tcp://host:port) into an endpoint.
[[nodiscard]] Result<Endpoint> parse_host(std::string_view host, bool tls,
                                          const std::string& cert_dir);

/// The machine for one sandbox.
[[nodiscard]] std::unique_ptr<Machine> make_machine(Config config);

/// The capabilities docker:// declares.
[[nodiscard]] CapabilitySet declared_capabilities();

/// The registry entry for docker://.
[[nodiscard]] BackendEntry backend_entry();

}  // namespace sandboxio::docker
