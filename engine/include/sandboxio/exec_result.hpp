// ExecResult: what a finished command produced, told honestly.
//
//   sandboxio::ExecResult r = sandbox.run({"python3", "-c", "print(1)"});
//   if (r.termination == sandboxio::Termination::Timeout) { /* killed at the deadline */ }
//   else if (r.ok()) std::cout << r.stdout_bytes;
//
// Exit codes are never invented: when a process did not exit by itself the termination reason
// says why, and exit_code holds what the sandbox reported (for example 137 after SIGKILL) or
// nothing when it reported nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/output.hpp"

namespace sandboxio {

enum class Termination : std::uint8_t {
  Exited,       // the process exited by itself; exit_code is its status
  Signalled,    // a signal ended it (not one sandboxio sent); signal is set
  Timeout,      // sandboxio killed it at its deadline
  OutOfMemory,  // the sandbox's memory limit killed it
  SandboxGone,  // the sandbox ended under it (lifetime, kill, reap)
  Cancelled,    // the caller cancelled the operation and sandboxio killed it
};

[[nodiscard]] constexpr std::string_view to_string(Termination t) noexcept {
  switch (t) {
    case Termination::Exited:
      return "exited";
    case Termination::Signalled:
      return "signalled";
    case Termination::Timeout:
      return "timeout";
    case Termination::OutOfMemory:
      return "out_of_memory";
    case Termination::SandboxGone:
      return "sandbox_gone";
    case Termination::Cancelled:
      return "cancelled";
  }
  return "unknown";
}

/// An exception that code raised in run_code, as the interpreter named and described it.
struct CodeError {
  std::string name{};       // "ValueError"
  std::string value{};      // "boom"
  std::string traceback{};  // as Python prints it, ending with "ValueError: boom"

  friend bool operator==(const CodeError&, const CodeError&) = default;
};

struct ExecResult {
  std::optional<int> exit_code{};
  Bytes stdout_bytes{};  // empty when streamed
  Bytes stderr_bytes{};  // empty when streamed
  std::chrono::nanoseconds duration{0};
  Termination termination = Termination::Exited;
  std::optional<int> signal{};
  /// True when the output went to the caller as OutputChunks (stream()); then stdout_bytes and
  /// stderr_bytes are empty by construction.
  bool streamed = false;
  /// Rich values from run_code, in the order the code produced them.
  std::vector<RichOutput> results{};
  /// run_code: the exception the code raised, when it raised one (exit_code is then 1 and the
  /// traceback is in stderr_bytes too, as a terminal would show it).
  std::optional<CodeError> error{};
  /// run_code in a context: the context was restarted during or before this call (it could
  /// not be interrupted, or its interpreter ended), so the variables of earlier calls are gone.
  bool context_restarted = false;
  /// The meter: bytes the caller sent in (stdin, the code) and the command's output bytes
  /// (stdout and stderr, streamed or kept), and the backend that ran it (its DSN scheme).
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  std::string backend{};

  /// Exited by itself with status 0.
  [[nodiscard]] bool ok() const noexcept {
    return termination == Termination::Exited && exit_code == 0;
  }

  friend bool operator==(const ExecResult&, const ExecResult&) = default;
};

}  // namespace sandboxio
