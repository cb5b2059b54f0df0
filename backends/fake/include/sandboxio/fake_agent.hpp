// sandboxio-agent, simulated: the agent protocol (sandboxio/codec/agent.hpp) answered by
// fake://'s interpreters over a file system in memory, in virtual time. It lets a machine that
// speaks to sandboxio-agent (local://, docker://'s agent) run through the simulated link with
// no process and no kernel: `sleep 3600` ends at once, and every run is deterministic.
//
//   sandboxio::fake::AgentPeer agent({.lifetime = std::chrono::seconds(60)});
//   agent.on_bytes(host_bytes, now, reply, close);   // Hello -> Welcome, Start -> Started...
//   if (auto at = agent.wake()) agent.on_wake(*at, reply, close);   // output, Exit, CodeDone
//
// What it is not: commands are those fake:// knows (docs/reference/backends/fake.md), a cell's
// variables change when the cell is received (not when it runs), and output is not paced by
// the host's Credit, and the egress proxy answers EgressListen but no program ever connects to
// it. It does no I/O and reads no clock: time is what the caller says.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/machine.hpp"

namespace sandboxio::fake {

struct AgentPeerOptions {
  /// The sandbox's home and, unless `workdir` says otherwise, its working directory.
  std::string home = "/home/sandbox";
  std::string workdir{};
  /// The sandbox's environment (what the launcher set; a command's own comes on top).
  std::map<std::string, std::string> env{};
  /// The agent ends the session this long after it starts, as `--lifetime` makes it do.
  std::optional<std::chrono::seconds> lifetime{};
  /// How long the agent takes to answer Hello (a launcher that is slow to start).
  std::chrono::nanoseconds welcome_delay{0};
  /// Whether python3 is "found": code contexts and run_code work only then.
  bool python = true;
};

class AgentPeer {
 public:
  explicit AgentPeer(AgentPeerOptions options = {});
  ~AgentPeer();
  AgentPeer(const AgentPeer&) = delete;
  AgentPeer& operator=(const AgentPeer&) = delete;

  /// Bytes from the host at `now`. What the agent says at once is appended to `reply`;
  /// `close` is set when the agent ends the session.
  void on_bytes(std::string_view data, Instant now, std::string& reply, bool& close);
  /// When the agent next speaks by itself (output, an exit, the lifetime's end), if ever.
  [[nodiscard]] std::optional<Instant> wake() const;
  /// Says everything due by `now`.
  void on_wake(Instant now, std::string& reply, bool& close);
  /// Command lines of the processes alive now (those the agent started and their children).
  [[nodiscard]] std::vector<std::string> processes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sandboxio::fake
