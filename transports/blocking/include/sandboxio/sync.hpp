// The sync API: sandboxes driven on the calling thread by the blocking transport. Errors are
// thrown as sandboxio::Error; N sandboxes cost no extra threads (each one's machine is driven
// by whichever thread calls into it), except one per process for backends with an owner lease
// to renew between calls (e2b://): that keeper thread drives a sandbox only while no call does.
//
//   auto sb = sandboxio::sync::Sandbox::create("docker://python:3.12-slim");
//   sandboxio::ExecResult r = sb.run({"python3", "-c", "print(6 * 7)"});
//   for (auto p = sb.stream({"sh", "-c", "echo a; echo b >&2"}); auto c = p.next();) use(*c);
//
// Use a Sandbox from one thread at a time (calls on one are serialised, not made concurrent).
// Destroying it kills the sandbox (unless CreateOptions::outlive_owner), bounded by
// SBX_TEARDOWN_GRACE.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "sandboxio/create_options.hpp"
#include "sandboxio/link.hpp"
#include "sandboxio/machine.hpp"

namespace sandboxio::sync {

namespace detail {
class Session;
}

/// A running command whose output arrives as it is produced (Sandbox::stream()). Dropping it
/// before the end kills the remote process.
class Process {
 public:
  Process(Process&&) noexcept;
  Process& operator=(Process&&) noexcept;
  ~Process();

  /// The next chunk of output, in order within each stream; nullopt once the process ended.
  [[nodiscard]] std::optional<OutputChunk> next();
  /// Waits for the end, discarding output not yet read, and returns the result
  /// (streamed = true, stdout and stderr empty by construction).
  ExecResult wait();
  /// Kills the remote process now; wait() then reports Termination::Cancelled.
  void kill();

 private:
  friend class Sandbox;
  Process(std::shared_ptr<detail::Session> session, OpId op);
  std::shared_ptr<detail::Session> session_;
  OpId op_ = 0;
  bool finished_ = false;
  std::optional<ExecResult> result_;
};

class Sandbox {
 public:
  /// Creates a sandbox for `dsn`. Throws sandboxio::Error (bad DSN, unknown backend, refused
  /// policy, create timeout, ...).
  [[nodiscard]] static Sandbox create(std::string_view dsn, CreateOptions options = {});
  /// Same, driven over `link` (a simulated link for tests, for example). A null link means
  /// the POSIX link.
  [[nodiscard]] static Sandbox create(std::string_view dsn, CreateOptions options,
                                      std::unique_ptr<Link> link);
  /// Re-attaches to an existing sandbox by id (Reattach capability). The handle does not own
  /// the sandbox: destroying it leaves the sandbox running.
  [[nodiscard]] static Sandbox connect(std::string_view dsn, std::string id,
                                       CreateOptions options = {},
                                       std::unique_ptr<Link> link = nullptr);

  Sandbox(Sandbox&&) noexcept;
  Sandbox& operator=(Sandbox&&) noexcept;
  ~Sandbox();

  [[nodiscard]] const std::string& id() const noexcept;
  [[nodiscard]] std::string_view backend() const noexcept;
  [[nodiscard]] CapabilitySet capabilities() const noexcept;
  [[nodiscard]] IsolationTier tier() const noexcept;
  [[nodiscard]] SandboxInfo info();
  [[nodiscard]] SandboxInfo info(std::error_code& ec);

  /// Runs a command to its end and returns what it did. A non-zero exit, a timeout (the
  /// process tree is killed) or a signal is a result, not an exception.
  ExecResult run(std::vector<std::string> argv);
  ExecResult run(Command command);
  ExecResult run(Command command, std::error_code& ec);
  /// Starts a command whose output is read from the returned Process.
  [[nodiscard]] Process stream(std::vector<std::string> argv);
  [[nodiscard]] Process stream(Command command);
  /// A refusal (capability, bad command) sets `ec` and gives a Process that yields nothing.
  [[nodiscard]] Process stream(Command command, std::error_code& ec);
  /// Runs code in the sandbox's interpreter (python by default).
  ExecResult run_code(std::string code);
  ExecResult run_code(CodeRequest request);
  ExecResult run_code(CodeRequest request, std::error_code& ec);
  /// A stateful context for run_code (StatefulCode capability).
  CodeContext create_context(std::string language = "python");
  CodeContext create_context(std::string language, std::error_code& ec);

  void write_file(std::string path, Bytes data);
  void write_file(std::string path, Bytes data, std::error_code& ec);
  [[nodiscard]] Bytes read_file(std::string path);
  [[nodiscard]] Bytes read_file(std::string path, std::error_code& ec);
  [[nodiscard]] std::vector<FileInfo> list_files(std::string path);
  [[nodiscard]] std::vector<FileInfo> list_files(std::string path, std::error_code& ec);
  void remove_file(std::string path);
  void remove_file(std::string path, std::error_code& ec);

  /// Ends the sandbox now. Later calls fail with SBX_E1204 SandboxGone.
  void kill();
  void kill(std::error_code& ec);
  /// Keeps the sandbox alive after this object is destroyed (until its lifetime ends).
  void detach() noexcept;
  /// Warnings the backend reported (for example the UNKNOWN isolation tier).
  [[nodiscard]] const std::vector<Problem>& warnings() const noexcept;
  /// The machine itself, for backend-specific facts.
  [[nodiscard]] Machine& native();
  /// Runs a backend-specific operation (one a machine offers beyond the portable interface,
  /// such as e2b::extensions(m).submit_pause(now)) and returns the value it completes with.
  ///   sb.native_call([](Machine& m, Instant now) { return e2b::extensions(m).submit_pause(now);
  ///   });
  Completion native_call(const std::function<OpId(Machine&, Instant)>& submit);
  Completion native_call(const std::function<OpId(Machine&, Instant)>& submit, std::error_code& ec);

 private:
  explicit Sandbox(std::shared_ptr<detail::Session> session);
  std::shared_ptr<detail::Session> session_;
};

/// The sandboxes the backend of `dsn` manages (those carrying the sandboxio labels), stopped
/// ones too; every label in `labels` must match. `docker://` needs no image here.
[[nodiscard]] std::vector<ManagedSandbox> list_managed(
    std::string_view dsn, const std::map<std::string, std::string>& labels = {});
/// Removes a managed sandbox by id, whatever its state (reaping). Throws SBX_E1206 when no
/// managed sandbox has this id.
void remove_managed(std::string_view dsn, std::string id);

/// e2b://'s own operations, typed. Each throws SBX_E1401 CapabilityNotSupported on another
/// backend.
namespace e2b {
/// Pauses the sandbox: E2B keeps its memory and files, and its lifetime stops running.
void pause(Sandbox& sandbox);
/// Resumes a paused sandbox, which then ends `lifetime` after now (zero: the lifetime asked
/// at create).
SandboxInfo resume(Sandbox& sandbox, std::chrono::seconds lifetime = std::chrono::seconds(0));
/// Moves the end of the sandbox's life to `lifetime` after now.
void set_lifetime(Sandbox& sandbox, std::chrono::seconds lifetime);
/// Runs a command on a pseudo-terminal of cols x rows; the terminal's bytes are stdout.
ExecResult run_pty(Sandbox& sandbox, Command command, std::uint16_t cols = 80,
                   std::uint16_t rows = 24);
}  // namespace e2b

}  // namespace sandboxio::sync
