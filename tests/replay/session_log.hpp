// Record a machine's whole session at the Link, then replay it without the daemon.
//
// The sync driver reaches the world only through its Link: every connection event, every byte
// the machine consumed and every clock read goes through it. recording_link() wraps a real
// link and writes all of them down; replay_link() feeds them back to a fresh machine, in order,
// with the bytes re-split into pieces of any size, and fails as soon as the machine asks for
// something the recording does not hold (a divergence). A machine is a pure function of its
// inputs, so the same scenario run on the replay link produces the same transcript, byte for
// byte.
//
//   auto log = std::make_shared<replay::Log>();
//   run_scenario(replay::recording_link(make_posix_link(), log));   // against dockerd
//   log->save("docker_session.rec");
//   run_scenario(replay::replay_link(replay::Log::load("docker_session.rec"), 3));  // offline
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sandboxio/link.hpp"

namespace sandboxio::replay {

struct Entry {
  // Requests the machine made:  O open (data: endpoint)  S send  H half-close  C close
  //                             Q probe owners (data: owners, one a line)
  // Inputs the machine got:     c connected  b bytes (only those it consumed)  e eof
  //                             f failed (data: code, newline, detail)  g owners gone
  // The driver:                 N a clock read  W a wait ended
  char tag = 0;
  ConnId conn = 0;
  std::int64_t t = 0;  // ns of the driver's monotonic time
  std::string data{};
};

struct Log {
  std::int64_t wall_epoch_ns = 0;  // the wall clock at Instant zero
  std::string session{}, owner{};  // the process identity the machine was configured with
  std::string transcript{};        // what the scenario saw, to compare with a replay
  std::vector<Entry> entries{};

  void save(const std::string& path) const;
  [[nodiscard]] static std::shared_ptr<Log> load(const std::string& path);
  /// Bytes of network input in the log (the size of what the session moved).
  [[nodiscard]] std::size_t input_bytes() const;
};

[[nodiscard]] std::unique_ptr<Link> recording_link(std::unique_ptr<Link> inner,
                                                   std::shared_ptr<Log> log);
/// `split` bytes at a time (0: as recorded). Throws sandboxio::Error (ProtocolError) when the
/// machine diverges from the recording.
[[nodiscard]] std::unique_ptr<Link> replay_link(std::shared_ptr<const Log> log,
                                                std::size_t split = 0);

}  // namespace sandboxio::replay
