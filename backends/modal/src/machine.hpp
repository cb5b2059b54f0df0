// The modal:// machine: Modal's control plane and each sandbox's task command router, both
// gRPC over HTTP/2 (backend::GrpcCalls), on the machine core. Sources:
//   machine.cpp    inputs, deadlines, create, connect, info, kill, cancel
//   commands.cpp   run and stream on the router (TaskExecStart, StdioRead, StdinWrite, Wait)
//   files.cpp      files through modal-sandbox-fs-tools, and its error kinds
//   messages.cpp   the protobuf messages, written and read by hand (the subset Modal's SDKs use)
// Protocol facts: ../shared/modal-protocol/ and docs/reference/backends/modal.md.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "sandboxio/backend/core.hpp"
#include "sandboxio/backend/grpc_calls.hpp"
#include "sandboxio/modal.hpp"

namespace sandboxio::modal::detail {

using namespace std::chrono_literals;

inline constexpr std::string_view kControl = "/modal.client.ModalClient/";
inline constexpr std::string_view kRouter = "/modal.task_command_router.TaskCommandRouter/";
inline constexpr std::string_view kFsTools = "/__modal/.bin/modal-sandbox-fs-tools";
// What the SDKs allow a unary call before they retry it, and TaskExecWait's own deadline.
inline constexpr std::chrono::milliseconds kUnaryTimeout = 60s;
inline constexpr std::chrono::milliseconds kWaitTimeout = 55s;
// A file's bytes go to fs-tools' stdin in pieces of this size (the SDK's).
inline constexpr std::size_t kStdinPiece = std::size_t{256} << 10;
inline constexpr std::size_t kReadFileLimit = std::size_t{2} << 30;
// How often an output read whose stream broke is begun again from its offset (the SDKs resume).
inline constexpr int kReadResumes = 3;
// How long a killed command's result may wait for its killer.
inline constexpr std::chrono::milliseconds kKillBackstop = 3s;
// GenericResult.status
inline constexpr int kSuccess = 1, kFailure = 2, kTerminated = 3, kTimeout = 4;

// ---- messages.cpp ----
struct GenericResult {
  int status = 0;
  std::string exception{};
  int exitcode = 0;
};
struct ExecExit {
  std::optional<int> code{};
  std::optional<int> signal{};
};
struct CreateReply {
  std::string sandbox_id{}, task_id{}, router_jwt{}, router_url{};
};
namespace msg {
std::string app_get_or_create(const std::string& app, const std::string& environment);
std::string environment_get_or_create(const std::string& environment);
std::string image_get_or_create(const std::string& app_id, const std::string& image,
                                const std::string& builder_version);
std::string sandbox_create(const std::string& app_id, const std::string& image_id,
                           const CreateOptions& options);
std::string by_sandbox(const std::string& sandbox_id);
std::string sandbox_wait(const std::string& sandbox_id, float timeout);
std::string router_access(const std::string& sandbox_id, const std::string& task_id);
std::string exec_start(const std::string& task_id, const std::string& exec_id,
                       const std::vector<std::string>& argv, const Env& env,
                       const std::string& workdir, std::optional<std::uint32_t> timeout_secs);
std::string exec_ref(const std::string& task_id, const std::string& exec_id);
std::string stdio_read(const std::string& task_id, const std::string& exec_id, std::uint64_t offset,
                       int fd);
std::string stdin_write(const std::string& task_id, const std::string& exec_id,
                        std::uint64_t offset, std::string_view data, bool eof);
std::string stdin_stream_start(const std::string& task_id, const std::string& exec_id);
std::string stdin_stream_data(std::string_view data);
std::string stdin_stream_end();

/// The first string field `field` of a message ("" when absent or malformed).
std::string string_field(std::string_view message, std::uint32_t field);
/// The first nested message in field `field`, or nothing.
std::optional<std::string_view> message_field(std::string_view message, std::uint32_t field);
std::optional<GenericResult> generic_result(std::string_view message);
std::optional<CreateReply> create_reply(std::string_view message);
std::optional<ExecExit> exec_exit(std::string_view message);
/// TaskExecStdioRead's data (field 1).
std::optional<std::string_view> stdio_data(std::string_view message);
}  // namespace msg

/// One modal:// operation's own state, beside the core's.
struct OpState {
  enum class Kind : std::uint8_t { Control, Create, Command, File } kind = Kind::Control;
  std::chrono::milliseconds create_timeout{};
  // commands (and the fs-tools exec of a file operation)
  std::string exec_id{};
  backend::OutputAccount output{};
  Instant exec_started{};
  int reads_open = 0;     // stdout and stderr reads in flight
  int reads_resumed = 0;  // reads begun again after their stream broke (at most kReadResumes)
  std::optional<ExecExit> exit{};
  Bytes stdin_data{};
  std::optional<Termination> forced{};
  std::string token{};                 // SBX_EXEC_TOKEN of its processes
  bool killing = false;                // the killer runs: the result waits for it
  bool gone_checked = false;           // a signal-like exit was checked against the sandbox's end
  std::optional<Problem> fail_with{};  // once killed, fail with this (output past its limit)
  // files
  std::string path{};
  std::string fs_op{};
  Bytes fs_out{}, fs_err{};
};

class ModalMachine final : public backend::MachineCore<OpState> {
 public:
  explicit ModalMachine(Config config);

  CapabilitySet capabilities() const noexcept override { return declared_capabilities(); }

  // ---- machine.cpp ----
  void handle_connected(ConnId id, Instant now) override;
  std::size_t handle_bytes(ConnId id, std::string_view data, Instant now) override;
  void handle_eof(ConnId id, Instant now) override;
  void handle_connect_failed(ConnId id, Problem problem, Instant now) override;
  void handle_timeout(Instant now) override;
  void handle_consumed(OpId id, std::size_t bytes, Instant now) override;
  std::optional<Instant> poll_deadline() const override { return ops_deadline(); }
  bool busy() const override { return grpc_.calls() != 0; }
  OpId submit_create(const CreateOptions& options, Instant now) override;
  OpId submit_connect(std::string sandbox_id, const CreateOptions& options, Instant now) override;
  OpId submit_info(Instant now) override;
  OpId submit_kill(Instant now) override;
  void submit_cancel(OpId id, Instant now) override;
  OpId submit_list_managed(std::map<std::string, std::string> labels, Instant now) override;
  OpId submit_remove_managed(std::string sandbox_id, Instant now) override;
  OpId submit_run_code(CodeRequest request, Instant now) override;
  OpId submit_create_context(std::string language, Instant now) override;

  // ---- commands.cpp ----
  OpId submit_run(Command command, Instant now) override;
  OpId submit_stream(Command command, Instant now) override;

  // ---- files.cpp ----
  OpId submit_write_file(std::string path, Bytes data, Instant now) override;
  OpId submit_read_file(std::string path, Instant now) override;
  OpId submit_list_files(std::string path, Instant now) override;
  OpId submit_remove_file(std::string path, Instant now) override;

 private:
  Problem gone_problem() const override;
  std::string waiting_for(OpId id) const override { return grpc_.waiting_for(id); }

  // machine.cpp
  using Then = std::function<void(std::string, Instant)>;  // the reply message, status OK
  /// A unary call to the control plane with Modal's metadata and auth token. A status other
  /// than OK fails `op` with its problem (`what` names the step) unless `on_error` takes it.
  void control(OpId op, std::string_view method, std::string message, Then then, Instant now,
               std::function<bool(const backend::GrpcReply&, Instant)> on_error = {});
  /// A unary call to the router, with its JWT.
  void router(OpId op, std::string_view method, std::string message, Then then, Instant now,
              std::optional<std::chrono::milliseconds> timeout = kUnaryTimeout,
              std::function<bool(const backend::GrpcReply&, Instant)> on_error = {});
  [[nodiscard]] backend::GrpcCallSpec router_spec(OpId op, std::string_view method,
                                                  std::optional<std::chrono::milliseconds> timeout);
  void with_token(OpId op, std::function<void(Instant)> next, Instant now);
  [[nodiscard]] Problem status_problem(const backend::GrpcReply& r, std::string_view what) const;
  [[nodiscard]] std::optional<Problem> need_sandbox() const;
  void created(OpId id, const CreateReply& reply, Instant now);
  void set_router(const std::string& jwt, const std::string& url);
  /// The sandbox has ended (kill): what still runs ends with it, and the connections close.
  void ended(Instant now);

  // commands.cpp
  OpId start_command(Operation operation, Command command, bool streaming, Instant now);
  [[nodiscard]] std::string next_exec_id() {
    return config_.session + "-" + std::to_string(++execs_);
  }
  /// Starts an exec of `argv` for operation `id`, then its output reads, its stdin and its wait;
  /// `done` runs once it has exited and its output has ended.
  void start_exec(OpId id, const std::vector<std::string>& argv, const Env& env,
                  const std::string& workdir, std::optional<std::uint32_t> timeout_secs,
                  Instant now);
  void read_stdio(OpId id, int fd, Instant now);
  void wait_exec(OpId id, Instant now);
  void exec_progress(OpId id, Instant now);
  void finish_command(OpId id, Instant now);
  /// Kills the command's process tree (every process with its token) by an exec of its own;
  /// the result (with `why`) is given once that exec has ended, or after kKillBackstop.
  void kill_command(OpId id, Termination why, Instant now);
  /// A killer has ended: when none is left, the commands that waited for the kills start.
  void kill_done(Instant now);
  std::optional<Problem> take_output(OpId id, StreamKind kind, std::string_view bytes);

  // files.cpp
  OpId file_op(Operation operation, std::string path, std::string fs_op, std::string json_arg,
               Instant now, Bytes data = {});
  void file_done(OpId id, Instant now);
  [[nodiscard]] Problem fs_problem(const Op& op) const;

  Config config_;
  backend::GrpcCalls grpc_;
  std::string token_{};  // AuthTokenGet's JWT
  std::vector<std::pair<OpId, std::function<void(Instant)>>> token_waiters_{};
  bool token_asked_ = false;
  std::string app_id_{};
  bool creating_ = false;  // SandboxCreateV2 is in flight
  std::string sandbox_{}, task_{};
  backend::GrpcTarget router_{};
  std::string router_jwt_{};
  std::chrono::seconds lifetime_{};
  std::uint64_t execs_ = 0;
  int kills_in_flight_ = 0;
  std::vector<std::function<void(Instant)>> after_kills_{};  // commands waiting for the kills
};

}  // namespace sandboxio::modal::detail
