// The e2b:// machine: E2B's control plane (REST + JSON), envd (Connect + JSON over HTTP/1.1,
// and /files) and the code interpreter (/execute NDJSON), on the machine core. Every HTTP
// exchange gets its own connection (TLS is the transport's). Sources by operation family:
//   machine.cpp            inputs, deadlines, 429 retries, cancel, info and kill
//   control_plane.cpp      create, connect, listing and removal, pause, resume, lifetime
//   envd_process.cpp       commands: process.Process/Start stream, stdin, signals, kills
//   envd_files.cpp         files: /files and the filesystem RPCs
//   code_interpreter.cpp   run_code and contexts
//   api.cpp                pure request builders and reply parsers
// Protocol facts: ../shared/e2b-protocol/ and docs/reference/backends/e2b.md.
#pragma once

#include <chrono>
#include <functional>
#include <map>

#include "sandboxio/backend/core.hpp"
#include "sandboxio/backend/http_exchanges.hpp"
#include "sandboxio/codec/connect.hpp"
#include "sandboxio/codec/json.hpp"
#include "sandboxio/codec/json_writer.hpp"
#include "sandboxio/e2b.hpp"

namespace sandboxio::e2b::detail {

using backend::Reply;
using backend::Then;
using std::chrono::nanoseconds;
using namespace std::chrono_literals;

inline constexpr std::size_t kReadFileLimit = std::size_t{2} << 30;
inline constexpr std::string_view kEnvdPort = "49983";
inline constexpr std::string_view kCodePort = "49999";
inline constexpr std::string_view kUserAgent = "sandboxio";
// How long a command's stream may stay open after its process tree was killed.
inline constexpr nanoseconds kKillBackstop = 3s;
// envd ends a process when Connect-Timeout-Ms runs out: a backstop past the command's own
// timeout, which the machine enforces itself.
inline constexpr std::chrono::milliseconds kEnvdLifetimeSlack = 30s;
// 429 Too Many Requests: retried this many times, waiting what Retry-After says up to a bound.
inline constexpr int kMaxRetries = 3;
// Bodies up to this size are kept for a retry after 429 (a copy); larger ones are not.
inline constexpr std::size_t kRetryBodyLimit = std::size_t{1} << 20;
inline constexpr std::chrono::seconds kMaxRetryAfter = 30s;
// Keep-alive: idle connections kept per endpoint (control plane, envd, code interpreter), and
// for how long when the server names no Keep-Alive timeout (undici's default, the SDK's).
inline constexpr std::size_t kIdlePerEndpoint = 8;
inline constexpr nanoseconds kIdleLimit = 4s;

// ---- api.cpp: pure helpers ----
/// Go's os.ProcessState signal strings, as envd reports them ("signal: killed") -> 9.
[[nodiscard]] std::optional<int> signal_of(std::string_view status);
/// The Connect error code of an envd unary reply ("not_found"), or empty.
[[nodiscard]] std::string connect_code(const Reply& r);
/// A file entry of an envd filesystem reply.
[[nodiscard]] FileInfo file_info(const json::Value& e);
/// A context from the code interpreter's POST /contexts reply.
[[nodiscard]] Result<CodeContext> context_of(const Reply& r);
/// A sandbox of the control plane's list.
[[nodiscard]] ManagedSandbox managed_of(const json::Value& s);
using backend::missing_file;
[[nodiscard]] bool version_at_least(const std::string& v, int major, int minor);
/// envd's most frequent message, {"event":{"data":{"stdout":"<base64>"}}}, read without a
/// JSON parse: the key and the base64 text, or nothing for any other spelling.
[[nodiscard]] std::optional<std::pair<std::string_view, std::string_view>> compact_data(
    std::string_view m);

/// One e2b:// operation's own state, beside the core's.
struct OpState {
  enum class Kind : std::uint8_t { Control, Create, Command, Code } kind = Kind::Control;
  std::optional<Instant> backstop{};
  std::chrono::milliseconds create_timeout{};
  // commands
  std::string token{};
  std::optional<std::uint32_t> pid{};
  Bytes stdin_data{};
  bool stdin_sent = false;
  std::optional<Termination> forced{};
  bool kill_pending = false;
  std::optional<json::Value> end{};
  std::optional<connect::Error> stream_error{};
  backend::OutputAccount output{};
  Instant exec_started{};
  // code
  std::string context{};
  bool ephemeral_context = false;
  bool stopping = false;
  std::optional<CodeError> code_error{};  // the exception the cell raised
  std::vector<RichOutput> results{};
  // list_managed
  std::vector<ManagedSandbox> listed{};
};

class E2bMachine final : public backend::HttpMachine<OpState>, public Extensions {
 public:
  explicit E2bMachine(Config config);

  CapabilitySet capabilities() const noexcept override { return declared_capabilities(); }

  // ---- machine.cpp: inputs, deadlines, retries, cancel, info, kill ----
  void handle_connect_failed(ConnId id, Problem problem, Instant now) override;
  void handle_timeout(Instant now) override;
  OpId submit_info(Instant now) override;
  OpId submit_kill(Instant now) override;
  void submit_cancel(OpId id, Instant now) override;
  bool busy() const override;
  std::optional<Instant> poll_deadline() const override;
  std::optional<OpId> submit_release(Instant now) override;
  std::optional<Instant> between_calls() const override {
    return renewing_ ? std::optional<Instant>(Instant{}) : renew_at_;
  }

  // ---- control_plane.cpp (pause, resume and the lifetime are the typed extensions) ----
  OpId submit_create(const CreateOptions& options, Instant now) override;
  OpId submit_connect(std::string sandbox_id, const CreateOptions& options, Instant now) override;
  OpId submit_list_managed(std::map<std::string, std::string> wanted, Instant now) override;
  OpId submit_remove_managed(std::string sandbox_id, Instant now) override;
  OpId submit_pause(Instant now) override;
  OpId submit_resume(std::chrono::seconds lifetime, Instant now) override;
  OpId submit_set_lifetime(std::chrono::seconds lifetime, Instant now) override;

  // ---- envd_process.cpp ----
  OpId submit_run(Command command, Instant now) override;
  OpId submit_stream(Command command, Instant now) override;
  OpId submit_run_pty(Command command, std::uint16_t cols, std::uint16_t rows,
                      Instant now) override;

  // ---- envd_files.cpp ----
  OpId submit_write_file(std::string file, Bytes data, Instant now) override;
  OpId submit_read_file(std::string file, Instant now) override;
  OpId submit_list_files(std::string dir, Instant now) override;
  OpId submit_remove_file(std::string file, Instant now) override;

  // ---- code_interpreter.cpp ----
  OpId submit_run_code(CodeRequest request, Instant now) override;
  OpId submit_create_context(std::string language, Instant now) override;

 private:
  struct Retry {
    Instant at{};
    OpId op = 0;
    Origin origin{};
    http::Request request{};
    Then then{};
    int attempt = 0;
  };

  Problem gone_problem() const override;

  // machine.cpp
  static Problem not_found(const std::string& id);
  std::optional<Problem> need_key() const;
  Problem api_problem(const Reply& r, std::string_view what) const;
  std::optional<Problem> need_sandbox(Instant now, bool paused_ok = false) const;
  Origin envd_origin(std::string_view port) const;
  http::Request envd_request(std::string method, std::string target, std::string_view port) const;
  ConnId api_call(OpId op, std::string method, std::string target, Bytes body, Then then);
  ConnId rpc(OpId op, std::string_view method, Bytes body, Then then);
  ConnId code_call(OpId op, std::string method, std::string target, Bytes body, Then then);
  ConnId send(OpId op, Origin origin, http::Request req, Then then, int attempt = 0);
  void close_conns_of(OpId op);

  // control_plane.cpp
  std::optional<Problem> check_create(const CreateOptions& options) const;
  std::string create_body(bool v1, Instant now) const;
  void create_sandbox(OpId id, const std::string& target, Instant now);
  std::optional<Problem> adopt_sandbox(const json::Value& doc, const std::string& expected);
  void kill_created(const std::string& sandbox_id);
  // The owner lease: E2B's timeout kept at Config::lease while the owner holds the sandbox.
  [[nodiscard]] bool leased() const;
  /// The timeout to ask E2B for when the sandbox should live `lifetime` more.
  [[nodiscard]] std::chrono::seconds leased_timeout(std::chrono::seconds lifetime) const;
  void schedule_renewal(Instant now);
  void renew_lease(Instant now);
  void list_page(OpId id, const std::string& first, const std::string& token, int page,
                 Instant now);

  // envd_files.cpp
  Problem files_problem(const std::string& file, const Reply& r) const;
  Problem rpc_file_problem(const std::string& file, const Reply& r) const;
  std::optional<Problem> file_checks(const std::string& file, Instant now) const;

  // envd_process.cpp
  OpId start_command(Operation operation, Command command, bool streaming, Instant now);
  void start_process(OpId id, const std::string& script, const Env& env, const std::string& cwd,
                     bool stdin_open, std::chrono::milliseconds lifetime, bool user,
                     std::optional<std::pair<std::uint16_t, std::uint16_t>> pty = std::nullopt);
  std::optional<Problem> on_process_message(OpId id, const connect::Envelope& e, Instant now);
  std::optional<Problem> take_output(OpId id, StreamKind kind, Bytes bytes, Instant now);
  void send_stdin(OpId id);
  void signal_process(OpId id);
  void kill_step_done(Instant now);
  void kill_tree(OpId id);
  void kill_command(OpId id, Termination why, Instant now);
  void command_stream_ended(OpId id, Result<Reply> r, connect::EnvelopeReader& reader, Instant now);
  void check_gone(OpId id, Instant now);
  void finish_command(OpId id, Instant now);

  // code_interpreter.cpp
  void execute(OpId id, CodeRequest request, Instant now);
  std::optional<Problem> on_code_line(OpId id, const std::string& line);
  static void add_results(Op& op, const json::Value& v);
  void check_code_gone(OpId id, Problem problem, Instant now);
  void stop_code(OpId id, Termination why, Instant now);
  void finish_code(OpId id, Instant now, bool wait_for_context = false);

  Config config_;
  std::string sandbox_{};
  std::string access_token_{};
  std::string domain_{};
  std::chrono::seconds lifetime_{0};
  std::optional<Instant> expires_at_{};
  std::optional<Instant> renew_at_{};  // the next lease renewal
  bool renewing_ = false;              // a renewal is in flight
  bool released_ = false;              // detach(): no lease any more
  bool paused_ = false;
  std::optional<std::pair<std::uint16_t, std::uint16_t>> pty_{};  // for the command being submitted
  std::uint64_t tokens_ = 0;
  int kills_in_flight_ = 0;
  std::vector<std::function<void(Instant)>> after_kills_{};
  std::vector<Retry> retries_{};
};

}  // namespace sandboxio::e2b::detail
