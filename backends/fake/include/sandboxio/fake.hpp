// fake://: a deterministic sandbox for offline tests of your own agent tools. It runs no code
// on the host: commands go to a small built-in shell over a virtual file system and a virtual
// clock, scripted responses take priority, and every call is recorded.
//
//   auto world = sandboxio::fake::World::create();          // or the SbxFake test fixture
//   world->on({"python3", "agent.py"}, {.stdout_bytes = "done\n"});
//   auto sb = sandboxio::sync::Sandbox::create(world->dsn()); // "fake://<world name>"
//   sb.run({"python3", "agent.py"});                          // -> "done\n", exit 0
//   world->calls();                                           // what the tool asked for
//
// The built-in shell understands `sh -c SCRIPT` (and bash, /bin/sh): sequences with ; && ||,
// quoting, $VAR, $$, $?, redirections >&2 2>&1 > and >>, background `&`, and the utilities
// echo printf cat head ls mkdir rm pwd cd env export sleep exit true false kill test; an
// unknown program exits 127 as a real shell would. Network calls it recognises (curl, wget,
// python's urlopen/requests/socket.create_connection) honour the sandbox's NetworkPolicy.
//
// DSN options: fake://NAME?tier=container&caps=filesystem,streaming&lifetime_ms=...
//   tier  isolation tier to declare (default unknown: fake isolates nothing)
//   caps  comma-separated capabilities to declare (default: all but network_allow_list...)
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sandboxio/capabilities.hpp"
#include "sandboxio/exec_result.hpp"
#include "sandboxio/isolation.hpp"
#include "sandboxio/machine.hpp"
#include "sandboxio/network_policy.hpp"
#include "sandboxio/registry.hpp"

namespace sandboxio::fake {

/// A scripted answer to a command.
struct Response {
  Bytes stdout_bytes{};
  Bytes stderr_bytes{};
  int exit_code = 0;
  std::chrono::milliseconds duration{0};  // virtual time the command takes
};

/// One recorded call into a fake sandbox.
struct Call {
  Operation operation = Operation::Run;
  std::string sandbox_id{};
  std::vector<std::string> argv{};  // run/stream
  std::string code{};               // run_code
  std::string path{};               // file operations
  std::map<std::string, std::string> env{};
  std::string workdir{};
  NetworkPolicy network{};
  std::vector<std::string> network_attempts{};  // hosts the call tried to reach

  friend bool operator==(const Call&, const Call&) = default;
};

/// What a fake sandbox declares.
struct Profile {
  CapabilitySet capabilities = default_capabilities();
  IsolationTier tier = IsolationTier::Unknown;

  [[nodiscard]] static CapabilitySet default_capabilities() {
    return {Capability::NetworkPolicy, Capability::Filesystem, Capability::Streaming,
            Capability::StatefulCode,  Capability::RichOutput, Capability::ResourceCaps,
            Capability::Reattach,      Capability::Stdin};
  }
};

/// The shared state behind fake:// DSNs: scripted responses, recorded calls and the sandboxes
/// themselves (so connect() by id works from another machine). Thread-safe.
class World : public std::enable_shared_from_this<World> {
 public:
  /// Creates a world registered under a unique name; dsn() names it.
  [[nodiscard]] static std::shared_ptr<World> create(Profile profile = {});
  /// The world behind "fake://" with no name (shared by the whole process).
  [[nodiscard]] static std::shared_ptr<World> default_world();
  /// A world registered nowhere, empty, named `name`, whose next sandbox is number `next`:
  /// what the replay of a trace recorded in world `name` runs in (sandboxio/flight.hpp). A
  /// world's scripted answers are not in a trace; a replay gives the built-in ones.
  [[nodiscard]] static std::shared_ptr<World> replica(std::string name, std::uint64_t next);
  /// The world registered under `name`, or null.
  [[nodiscard]] static std::shared_ptr<World> find(const std::string& name);
  ~World();

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::string dsn() const { return "fake://" + name_; }
  [[nodiscard]] Profile profile() const;
  void set_profile(Profile profile);

  /// Answers a command whose argv equals `argv` exactly (checked before the built-in shell).
  void on(std::vector<std::string> argv, Response response);
  /// Answers commands matched by a predicate.
  void on_match(std::function<bool(const std::vector<std::string>&)> match, Response response);
  /// Answers run_code calls whose code contains `needle`.
  void on_code(std::string needle, Response response);

  /// Every call made so far, in order.
  [[nodiscard]] std::vector<Call> calls() const;
  /// Ids of the sandboxes that exist (not killed, lifetime not over at the last observation).
  [[nodiscard]] std::vector<std::string> live_sandboxes() const;
  /// Number of processes still running in all sandboxes (background children included).
  [[nodiscard]] std::size_t running_processes() const;

  // ---- for the machine ----
  struct Impl;
  Impl& impl() noexcept { return *impl_; }

 private:
  World(std::string name, Profile profile);
  std::string name_;
  std::unique_ptr<Impl> impl_;
  bool replica_ = false;
};

/// Makes a fake machine for a fake:// DSN.
[[nodiscard]] Result<std::unique_ptr<Machine>> make_machine(const Dsn& dsn);

/// The registry entry for fake://.
[[nodiscard]] BackendEntry backend_entry();

}  // namespace sandboxio::fake
