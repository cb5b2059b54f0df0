// local://: a daemonless sandbox on this machine. sandboxio-agent runs inside bubblewrap
// (Debian's `bubblewrap`, not setuid) in namespaces of its own: user, PID, mount, IPC, UTS,
// cgroup and an empty network namespace; every capability dropped, no_new_privs, a seccomp
// filter, no nested user namespaces. The connection to the agent is bubblewrap's stdin and
// stdout (a socket pair the transport makes: Endpoint::Kind::Process). The sandbox ends with
// the process that made it: it has no daemon to outlive it, and nothing to reap.
//
//   auto sb = sandboxio::sync::Sandbox::create("local://");
//   auto r = sb.run({"python3", "-c", "print(6 * 7)"});
//
// DSN: local://[ROOT][?option=value...]
//   ROOT                   a directory to use as the root filesystem, read-only (an unpacked
//                          image); default: this machine's /usr (and /bin, /lib...) read-only
//   home=/home/sandbox     the private, writable home and default working directory (a tmpfs)
//   bwrap=/usr/bin/bwrap   the bubblewrap binary (default: bwrap in /usr/bin or /bin)
//   runtime=bwrap          bwrap (the default: tier CONTAINER), or runsc: the agent runs under
//                          gVisor (Debian's `runsc`, rootless, network none; tier GVISOR), on
//                          this machine's /usr
// As root, bubblewrap is started as a dedicated unprivileged uid (setpriv), never as root:
// a root bubblewrap would hand the sandbox root's capabilities over its own mounts.
// What it declares and refuses: docs/reference/backends/local.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/dsn.hpp"
#include "sandboxio/machine.hpp"
#include "sandboxio/registry.hpp"

namespace sandboxio::local {

/// Where the agent is bound read-only inside the sandbox. /dev is a tmpfs bubblewrap makes in
/// every sandbox, so this works on a read-only root of any image too.
inline constexpr std::string_view kAgentPath = "/dev/.sandboxio/agent";
/// With a memory limit under bubblewrap: the sandbox cgroup's memory.oom_control (v1) or
/// memory.events (v2), bound read-only; its "oom_kill N" counts the kernel's out-of-memory
/// kills, which tells an OOM kill from another SIGKILL.
inline constexpr std::string_view kOomEventsPath = "/dev/.sandboxio/memory.events";

/// Everything the machine needs from outside, as values (it reads no files and no clock).
struct Config {
  /// bubblewrap (an absolute path).
  std::string bwrap{};
  /// runtime=runsc: gVisor's runsc (an absolute path), which runs the agent instead of
  /// bubblewrap; empty for bubblewrap.
  std::string runsc{};
  /// When this process is root: setpriv, which drops to `uid` before bubblewrap starts.
  std::string setpriv{};
  /// The uid and gid bubblewrap runs as when this process is root (a dedicated one per
  /// sandbox; see docs/reference/backends/local.md); unused otherwise.
  std::uint32_t uid = 0;
  /// sandboxio-agent on this machine (an absolute path), bound read-only into the sandbox.
  std::string agent{};
  /// The root filesystem: empty for this machine's /usr, else a directory.
  std::string root{};
  /// With the default root: the top-level directories that are symlinks into /usr here
  /// (merged /usr: /bin -> usr/bin), as {name, target}, and those that are directories.
  std::vector<std::pair<std::string, std::string>> root_links{};
  std::vector<std::string> root_dirs{};
  /// Files of /etc shared read-only (the dynamic linker's cache, alternatives, certificates),
  /// those that exist here.
  std::vector<std::string> etc{};
  /// The private, writable home and default working directory.
  std::string home = "/home/sandbox";
  /// Resource limits through cgroups, where this process may make them (root, with the memory,
  /// pids and cpu controllers writable): 1 for cgroup v1 (one hierarchy per controller), 2 for
  /// the unified v2 hierarchy; 0 where it may not, and then limits are refused.
  int cgroup_version = 0;
  /// v1: the memory, pids and cpu hierarchies' roots; v2: `cgroup_memory` is the root.
  std::string cgroup_memory{}, cgroup_pids{}, cgroup_cpu{};
  /// "local-<session>-<n>": the sandbox's id.
  std::string id{};
};

/// Reads the DSN, finds bubblewrap, setpriv (as root) and the agent. BackendNotInstalled says
/// what to install when one is missing.
[[nodiscard]] Result<Config> config_for(const Dsn& dsn);
/// The launcher's command line for a sandbox with these options: [setpriv ...] bwrap ...
/// agent ..., or with runsc a shell that writes an OCI bundle and runs `runsc run` on it
/// (pure: the machine builds it at create).
[[nodiscard]] std::vector<std::string> launch_argv(const Config& config,
                                                   const CreateOptions& options);
/// runtime=runsc: the OCI runtime spec (config.json) of the bundle the launcher writes; its
/// root is the bundle's `rootfs`, a skeleton of mount points the launcher makes.
[[nodiscard]] std::string runsc_spec(const Config& config, const CreateOptions& options);
/// The machine for one sandbox.
[[nodiscard]] std::unique_ptr<Machine> make_machine(Config config);
/// The capabilities every local:// sandbox declares; a machine adds resource caps where it may
/// make cgroups, and stateful code and rich output once the agent has found python3.
[[nodiscard]] CapabilitySet declared_capabilities();
/// The registry entry for local://.
[[nodiscard]] BackendEntry backend_entry();

}  // namespace sandboxio::local
