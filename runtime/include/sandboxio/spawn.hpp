// Process endpoints (Endpoint::Kind::Process): a program started with one end of a socket pair
// as its stdin, stdout and stderr; the connection is the other end. Transports use this for
// launchers such as local://'s bubblewrap. Closing the connection ends the process.
//
//   auto child = sandboxio::spawn_connected(endpoint);   // endpoint.argv = {"/usr/bin/bwrap", ...}
//   if (child) use(child.value().fd);                     // ... child.value().process.end();
#pragma once

#include <utility>

#include "sandboxio/machine.hpp"

namespace sandboxio {

/// A started process, killed (SIGKILL) and reaped when this handle ends.
class ChildProcess {
 public:
  ChildProcess() = default;
  explicit ChildProcess(int pid) : pid_(pid) {}
  ChildProcess(ChildProcess&& other) noexcept : pid_(std::exchange(other.pid_, 0)) {}
  ChildProcess& operator=(ChildProcess&& other) noexcept {
    if (this != &other) {
      end();
      pid_ = std::exchange(other.pid_, 0);
    }
    return *this;
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { end(); }

  /// Kills the process (SIGKILL) and waits for it; nothing when there is none. Every process
  /// below it, of any generation, is killed first and waited for (up to 2 s): a launcher's PID
  /// namespace, or runsc's gofer and Sentry, are gone when this returns.
  void end() noexcept;
  [[nodiscard]] int pid() const noexcept { return pid_; }

 private:
  int pid_ = 0;
};

struct SpawnedProcess {
  int fd = -1;  // this side of the socket pair (non-blocking, close-on-exec)
  ChildProcess process{};
};

/// Starts `endpoint.argv` (argv[0] an absolute path) in a session of its own with an empty
/// environment but PATH, and no descriptor of this process but the socket (0, 1, 2). It is started
/// from a thread that lives as long as this process, so a launcher that asks for the parent-death
/// signal (bwrap --die-with-parent) ends with the process, never with the thread that happened to
/// open the connection. ConnectionFailed when it cannot be started.
[[nodiscard]] Result<SpawnedProcess> spawn_connected(const Endpoint& endpoint);

}  // namespace sandboxio
