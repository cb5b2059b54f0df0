// The docker:// machine: the Engine API (v1.41) as a sans-I/O state machine on the machine
// core. Every HTTP exchange gets its own connection (a local socket, or a TLS link the
// transport owns). The machine's sources are split by operation family:
//   machine.cpp  inputs, deadlines, cancel, info and kill
//   create.cpp   create and connect: container, image pull, owner lease, start, removal
//   exec.cpp     commands: exec create, start (upgraded stream), inspect, kill by token
//   agent.cpp    commands and files through sandboxio-agent (?agent=on)
//   contexts.cpp run_code and code contexts through the agent's python3 bootstrap
//   files.cpp    files through the archive API (or an exec under tmpfs, /dev, /proc, /sys)
//   managed.cpp  listing and removing managed containers (reaping)
//   engine_api.cpp  pure request builders and reply parsers
// Facts it relies on: ../shared/design/docker-engine-facts.md and
// docs/reference/backends/docker.md.
#pragma once

#include <chrono>
#include <map>
#include <set>

#include "sandboxio/backend/agent_machine.hpp"
#include "sandboxio/codec/docker_stream.hpp"
#include "sandboxio/codec/json.hpp"
#include "sandboxio/codec/tar.hpp"
#include "sandboxio/docker.hpp"

namespace sandboxio::docker::detail {

using backend::Reply;
using backend::Then;
using std::chrono::nanoseconds;
using namespace std::chrono_literals;

inline constexpr std::string_view kApi = "/v1.41";
inline constexpr std::size_t kInternalOutputLimit = std::size_t{1} << 20;
// How long an exec stream may stay open after its process tree was killed (a process that
// escaped the kill by dropping its environment still holding the stream).
inline constexpr nanoseconds kKillBackstop = 3s;
inline constexpr nanoseconds kReinspectEvery = 20ms;
inline constexpr std::string_view kRuncError = "OCI runtime exec failed";

/// What an internal exec (file operations under tmpfs, removal, the killer) ends with.
struct ExecDone {
  std::optional<int> exit_code{};
  bool runc_error = false;
  Bytes out{}, err{};
};

// ---- engine_api.cpp: pure builders and parsers ----
/// The body of POST /containers/create.
[[nodiscard]] std::string create_body(const Config& config, const CreateOptions& options,
                                      std::int64_t created_unix);
/// The user the agent runs the sandbox's commands as while it stays root itself; empty when
/// the container runs as its User (no agent, no user, or root).
[[nodiscard]] std::string agent_user(const Config& config);
/// The label that keeps agent_user() for execs of later connect()s.
inline constexpr std::string_view kUserLabel = "io.sandboxio.user";
/// The body of POST /containers/{id}/exec.
[[nodiscard]] std::string exec_body(const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env, const std::string& workdir,
                                    bool attach_stdin, const std::string& token,
                                    const std::string& user = {});
/// A timestamp for the Engine API's since/until: seconds with nanoseconds.
[[nodiscard]] std::string api_time(std::chrono::system_clock::time_point t);
/// The X-Docker-Container-Path-Stat header of an archive reply.
[[nodiscard]] std::optional<FileInfo> path_stat(const http::ResponseParser& p);
/// The records "TYPE/SIZE/NAME\0" of kListScript.
[[nodiscard]] std::vector<FileInfo> parse_exec_listing(const std::string& dir, const Bytes& out);
/// A managed container from GET /containers/json.
[[nodiscard]] ManagedSandbox managed_of(const json::Value& c);
/// "running" -> Running, ...
[[nodiscard]] SandboxState state_of(std::string_view status);
/// A file operation through an exec failed: the problem its exit code and stderr describe.
[[nodiscard]] Problem exec_file_problem(const std::string& file, const ExecDone& d);
using backend::missing_file;
[[nodiscard]] Problem daemon_error(const Reply& r);
/// Lists a directory on a tmpfs mount as records "TYPE/SIZE/NAME\0".
extern const std::string_view kListScript;

/// The body of POST /exec/ID/start: the exec's streams on this connection, no TTY.
inline constexpr std::string_view kExecStart = R"({"Detach":false,"Tty":false})";
/// The agent's directory in a container: in the image's root filesystem, or (read_only) an
/// anonymous volume, the only place an archive may land in a container with a read-only root.
inline constexpr std::string_view kAgentDir = "/.sandboxio";
/// Where sandboxio-agent lives in a container.
inline constexpr std::string_view kAgentPath = "/.sandboxio/agent";
/// The root-only directory of the agent's socket for bridge sessions (a tmpfs).
inline constexpr std::string_view kAgentRunDir = "/.sandboxio/run";
/// The label of a container whose init is the agent.
inline constexpr std::string_view kAgentLabel = "io.sandboxio.agent";

using OpState = backend::AgentOpState;

class DockerMachine final : public backend::AgentMachine {
 public:
  explicit DockerMachine(Config config);

  /// What docker:// declares, and stateful code with rich output once the agent has found
  /// python3 in the image.
  CapabilitySet capabilities() const noexcept override;

  // ---- machine.cpp: inputs, deadlines, cancel, info, kill ----
  void handle_connect_failed(ConnId id, Problem problem, Instant now) override;
  std::size_t handle_bytes(ConnId id, std::string_view data, Instant now) override;
  void handle_eof(ConnId id, Instant now) override;
  void handle_timeout(Instant now) override;
  OpId submit_info(Instant now) override;
  OpId submit_kill(Instant now) override;
  void submit_cancel(OpId id, Instant now) override;
  bool busy() const override;
  std::optional<Instant> poll_deadline() const override;

  // ---- create.cpp ----
  OpId submit_create(const CreateOptions& options, Instant now) override;
  OpId submit_connect(std::string sandbox_id, const CreateOptions& options, Instant now) override;
  void handle_owners_gone(std::vector<std::string> gone, Instant now) override;

  // ---- exec.cpp ----
  OpId submit_run(Command command, Instant now) override;
  OpId submit_stream(Command command, Instant now) override;
  OpId submit_run_code(CodeRequest request, Instant now) override;
  OpId submit_create_context(std::string language, Instant now) override;

  // ---- files.cpp ----
  OpId submit_write_file(std::string file, Bytes data, Instant now) override;
  OpId submit_read_file(std::string file, Instant now) override;
  OpId submit_list_files(std::string dir, Instant now) override;
  OpId submit_remove_file(std::string file, Instant now) override;

  // ---- managed.cpp ----
  OpId submit_list_managed(std::map<std::string, std::string> wanted, Instant now) override;
  OpId submit_remove_managed(std::string sandbox_id, Instant now) override;

 private:
  struct Exec {
    OpId op = 0;
    bool user = false;     // output goes to the operation (run/stream/run_code)
    bool as_root = false;  // the killer: root, with the container's CAP_KILL when it has one
    std::vector<std::string> argv{};
    std::vector<std::string> env{};
    std::string workdir{};
    Bytes stdin_data{};
    bool attach_stdin = false;
    std::string token{};
    std::string id{};  // the daemon's exec id
    ConnId conn = 0;
    bool started = false;  // the 101 arrived
    bool kill_pending = false;
    docker::StreamDemux demux{};
    bool first_stdout = true;
    bool runc_error = false;
    Bytes out{}, err{};
    std::size_t out_limit = kInternalOutputLimit;
    std::optional<Instant> reinspect_at{};
    std::optional<Instant> backstop_at{};
    std::optional<std::chrono::system_clock::time_point> wall_started{};
    std::function<void(Result<ExecDone>, Instant)> then{};
  };

  Problem gone_problem() const override;

  // machine.cpp
  Problem not_found(const std::string& id) const;
  std::string short_id() const { return container_.substr(0, 12); }
  std::string describe_endpoint() const;
  std::optional<Problem> need_sandbox(Instant now) const;
  std::string path(const std::string& rest) const { return std::string(kApi) + rest; }
  ConnId call(OpId op, std::string method, std::string target, Bytes body, Then then);
  ConnId send(OpId op, http::Request req, Then then);
  /// POST `target` asking to take the connection over (attach, exec start): 101 makes it the
  /// raw stream; `then` sees any other reply.
  ConnId upgrade(OpId op, std::string target, std::string body, Then then);
  ConnId send_wire(OpId op, std::string_view method, std::string_view target,
                   std::vector<Bytes> wire, Then then);
  /// PUT .../archive?path=AT (the root by default) of one file, after the directory entries
  /// in `dirs`; the content goes to the link as it is, never copied. A problem when a header
  /// cannot be written.
  std::optional<Problem> put_archive(OpId op, const std::vector<tar::Entry>& dirs,
                                     const tar::Entry& file, Bytes content, Then then,
                                     std::string_view at = "/");
  void expire_operation(OpId id, Instant now);
  void drop_lease();

  // create.cpp
  bool create_abandoned(OpId id, Instant now);
  void create_container(OpId id, bool pulled, Instant now);
  void pull_image(OpId id, Instant now);
  void sweep_unstarted();
  void attach_lease(OpId id, Instant now);
  void start_container(OpId id, Instant now);
  void remove_after_failed_start(OpId id, const std::string& why, Instant now);
  void remove_container(OpId id, Instant now);
  void delete_until_gone(OpId id, std::string cid, int attempts);
  static constexpr int kRemoveAttempts = 3;

  // files.cpp
  Problem archive_problem(const std::string& file, const Reply& r) const;
  std::optional<Problem> file_checks(const std::string& file, Instant now) const;
  bool on_tmpfs(const std::string& file) const;
  void get_archive(OpId id, const std::string& target, bool directory,
                   std::function<void(const tar::Entry&)> on_entry,
                   std::function<std::optional<Problem>(std::string_view)> on_data,
                   std::function<void(Instant)> done);

  // agent.cpp: the session with sandboxio-agent (Config::agent); its calls are the shared
  // AgentMachine's
  /// Where agent frames go: the direct socket once it has been welcomed, else the lease (the
  /// attach stream, or a bridge exec); 0 when neither is open.
  [[nodiscard]] ConnId agent_conn() const override { return direct_ready_ ? direct_ : lease_; }
  /// The direct socket is the agent's own; the lease is docker exec's stream.
  [[nodiscard]] bool agent_conn_direct() const override { return direct_ready_; }
  void agent_welcomed(Instant now) override;
  [[nodiscard]] Problem agent_start_problem(const std::string& why) const override;
  bool explain_kill(OpId id, ExecResult& result, std::chrono::system_clock::time_point started,
                    Instant now) override;
  /// info() as this sandbox is now: with the agent that serves it, when one does.
  [[nodiscard]] SandboxInfo docker_info(SandboxState state) const {
    SandboxInfo info = sandbox_info(state, lifetime_);
    if (via_agent()) {
      info.agent = welcome_.agent + (direct_ready_ ? " (direct socket)"
                                     : bridge_     ? " (bridge exec)"
                                                   : " (attach stream)");
    }
    return info;
  }
  void upload_agent(OpId id, Instant now);
  void open_bridge(OpId id, Instant now);
  void start_bridge(OpId id, const std::string& exec_id, Instant now);
  /// connect() goes on without the agent (the exec path) when no bridge session came about.
  void bridge_unavailable(OpId id, Instant now);
  /// Whether a direct socket to the agent is worth trying: a local engine, not ?agent=attach.
  [[nodiscard]] bool may_go_direct() const {
    return config_.direct && config_.endpoint.kind == Endpoint::Kind::Unix;
  }
  /// The agent serves this handle: the create or connect `id` completes (when still alive).
  void agent_serves(OpId id, Instant now);
  /// create: the agent welcomed the owner's stream; the container's init pid, then the
  /// direct socket. Either way the create completes.
  void find_direct(OpId id, Instant now);
  /// A session with the agent at `pid` (the container's init, as the engine reports it)
  /// over /proc/PID/root/.sandboxio/run/agent.sock; its Welcome completes `id`.
  void open_direct(OpId id, std::int64_t pid, Instant now);
  std::size_t direct_bytes(std::string_view data, Instant now);
  /// The direct socket ended (or, with `malformed`, carried a frame this library cannot
  /// read): before its Welcome, the create or connect goes on without it (the attach stream,
  /// a bridge exec); after, the agent and so the container have ended.
  void direct_ended(std::optional<Problem> malformed, Instant now);
  std::size_t lease_bytes(std::string_view data, Instant now);
  /// The lease ended or broke: with the agent, its session (and the container) ended.
  void lease_lost(Problem problem, Instant now) {
    if (config_.agent) agent_lost(std::move(problem), now);
  }

  // exec.cpp
  static Problem unsupported(Capability c, const std::string& what);
  OpId start_user_exec(Operation operation, Command command, bool streaming, Instant now);
  void run_internal(OpId op, std::vector<std::string> argv, Bytes stdin_data,
                    std::function<void(Result<ExecDone>, Instant)> then,
                    std::size_t out_limit = kInternalOutputLimit);
  std::uint64_t launch(Exec e);
  void create_exec(std::uint64_t key, OpId op, std::string body);
  void erase_exec(std::uint64_t key);
  void start_exec(std::uint64_t key);
  void exec_upgraded(ConnId conn, Instant now);
  std::size_t exec_bytes(ConnId conn, std::string_view data, Instant now);
  void exec_stream_broke(std::uint64_t key, Problem problem, Instant now);
  void exec_failed(std::uint64_t key, Problem problem, Instant now);
  void exec_stream_ended(std::uint64_t key, Instant now);
  void exec_timers(Instant now);
  void inspect_exec(std::uint64_t key, Instant now);
  void check_oom(Exec done, int code, Instant now);
  /// Whether the engine logged an out-of-memory kill in this container since the last time
  /// this was asked (for a SIGKILL that started at `started`): its OOM events are counted
  /// from the first command's start on, so an earlier kill never explains a later one.
  void query_oom(OpId op, std::chrono::system_clock::time_point started, Instant now,
                 std::function<void(bool, Instant)> then);
  void finish_user_exec(Exec& e, std::optional<int> code, Instant now,
                        std::optional<Termination> why = std::nullopt);
  void kill_tree(OpId id, Termination why, Instant now);
  void start_killer(OpId id);
  void kill_by_token(const std::string& token, std::function<void(Result<ExecDone>, Instant)> then);

  Config config_;
  std::optional<std::chrono::system_clock::time_point> oom_since_{};
  std::size_t oom_seen_ = 0;  // the OOM events since oom_since_ already told
  std::string container_{};
  std::string exec_user_{};  // agent_user(): what every exec but the killer runs as
  OpId pulling_ = 0;         // the create whose image is being pulled (nothing made yet)
  std::chrono::seconds lifetime_{0};
  bool swept_ = false;
  std::map<std::string, std::string> sweep_candidates_{};  // container id -> owner
  ConnId lease_ = 0;     // the agent's session (the attach stream or a bridge), or the lease
  bool bridge_ = false;  // lease_ is a bridge exec's stream (connect() to an agent's sandbox)
  std::map<std::uint64_t, Exec> execs_{};
  std::set<std::uint64_t> killing_{};  // execs whose process tree is being killed
  std::vector<std::pair<std::uint64_t, std::string>> deferred_{};  // exec creations waiting
  std::uint64_t next_exec_ = 0;
  // agent.cpp
  docker::StreamDemux lease_demux_{};  // the attach stream: the agent's stdout and stderr
  agent::FrameReader agent_reader_{};
  ConnId direct_ = 0;          // the direct socket to the agent, once opened
  bool direct_ready_ = false;  // its Welcome arrived: agent traffic goes there
  OpId direct_for_ = 0;        // the create or connect waiting for that Welcome
  agent::FrameReader direct_reader_{};
};

}  // namespace sandboxio::docker::detail
