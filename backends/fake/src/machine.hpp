// The fake:// machine: driven through the Machine interface like every backend, it never asks
// for a connection; commands run in the built-in shell (shell.cpp, python.cpp) over virtual
// time, and output is released as the driver's clock reaches it. Sources:
//   machine.cpp  create, connect, info, kill, listing, cancel, the records and the world
//   exec.cpp     run, stream, run_code and contexts: the timeline of a command
//   files.cpp    files on the sandbox's in-memory filesystem
#pragma once

#include <algorithm>
#include <deque>

#include "sandboxio/backend/core.hpp"
#include "sandboxio/codec/shell.hpp"
#include "sandboxio/duration.hpp"
#include "sandboxio/fake.hpp"
#include "world_impl.hpp"

namespace sandboxio::fake::impl {

using std::chrono::nanoseconds;
inline constexpr std::size_t kChunk = 64 * 1024;

class FakeMachine final : public Machine {
 public:
  FakeMachine(std::shared_ptr<World> world, Profile profile, nanoseconds create_delay,
              nanoseconds teardown_delay)
      : world_(std::move(world)),
        profile_(profile),
        create_delay_(create_delay),
        teardown_delay_(teardown_delay) {}

  std::string_view scheme() const noexcept override { return "fake"; }
  CapabilitySet capabilities() const noexcept override { return profile_.capabilities; }
  IsolationTier tier() const noexcept override { return profile_.tier; }

  // No connections are ever requested, so these inputs cannot arrive for a real connection.
  void handle_connected(ConnId, Instant) override {}
  void handle_connect_failed(ConnId, Problem, Instant) override {}
  std::size_t handle_bytes(ConnId, std::string_view, Instant) override { return 0; }
  void handle_eof(ConnId, Instant) override {}

  void handle_timeout(Instant now) override { advance(now); }

  void handle_consumed(OpId op, std::size_t bytes, Instant now) override;

  OpId submit_create(const CreateOptions& options, Instant now) override;

  OpId submit_connect(std::string sandbox_id, const CreateOptions& options, Instant now) override;

  OpId submit_info(Instant now) override;

  OpId submit_run(Command command, Instant now) override;

  OpId submit_stream(Command command, Instant now) override;

  OpId submit_run_code(CodeRequest request, Instant now) override;

  OpId submit_create_context(std::string language, Instant now) override;

  OpId submit_write_file(std::string path, Bytes data, Instant now) override;

  OpId submit_read_file(std::string path, Instant now) override;

  OpId submit_list_files(std::string path, Instant now) override;

  OpId submit_remove_file(std::string path, Instant now) override;

  OpId submit_kill(Instant now) override;

  OpId submit_list_managed(std::map<std::string, std::string> labels, Instant now) override;

  OpId submit_remove_managed(std::string sandbox_id, Instant now) override;

  void submit_cancel(OpId id, Instant now) override;

  std::optional<Request> poll_request() override { return std::nullopt; }

  std::optional<Event> poll_event() override;

  std::optional<Instant> poll_deadline() const override;

 private:
  struct Op {
    enum class Kind { Instant, Create, Teardown, Exec } kind = Kind::Instant;
    bool orphan = false;  // teardown: the grace ran out before teardown finished
    OperationRecord record;
    Instant started{};
    Instant ends_at{};
    Instant timeout_at{};
    bool finished = false;
    // exec
    bool streaming = false;
    detail::Outcome outcome;
    std::size_t next_step = 0;
    std::size_t step_offset = 0;  // bytes of the current step already delivered
    std::uint64_t offsets[2] = {0, 0};
    std::size_t unconsumed = 0;
    std::size_t stream_buffer = Limits{}.stream_buffer;  // set from limits_ when it starts
    std::size_t output_limit = 0;
    Bytes out, err;
    std::vector<RichOutput> results;

    bool blocked() const { return streaming && unconsumed >= stream_buffer; }
  };

  // ---- helpers ----
  OpId open(Operation operation, Instant now, std::string command);
  /// The meter: `bytes` went into the sandbox with operation `id` (stdin, code, a file).
  void meter_in(OpId id, std::uint64_t bytes) {
    if (auto it = ops_.find(id); it != ops_.end()) it->second.record.bytes_in = bytes;
  }

  void push(Event e) { events_.push_back(std::move(e)); }

  void close(Op& op, Outcome outcome, Instant now, std::optional<Problem> problem);

  OpId fail(OpId id, Problem problem, Instant now);

  void complete(OpId id, Completion value, Instant now);

  static Problem unsupported(Capability c, const std::string& what);

  Problem check_create(const CreateOptions& options) const;

  std::optional<Problem> need_sandbox(Instant now);

  std::optional<Problem> file_checks(const std::string& path, Instant now);

  // The common start of a file operation: admission, checks, the recorded call. Returns the
  // normalised path, or nullopt when the operation already failed (its events are queued).
  std::optional<std::string> begin_file_op(OpId id, Operation operation, const std::string& path,
                                           Instant now);

  Problem gone_problem() const;

  bool gone(Instant now);

  SandboxInfo info_of() const;

  Call base_call(Operation operation) const;

  void record_call(Call call);

  const Response* code_rule(const std::string& code);

  static detail::Outcome scripted(const Response& r);

  detail::ShellEnv shell_env(const Env& extra, const std::string& workdir);

  OpId start_exec(Operation operation, Command command, Instant now);

  void begin_timeline(OpId id, Op& op, detail::Outcome outcome, Instant now,
                      std::chrono::milliseconds timeout, int pid, std::string cmdline);

  // Ends an exec. A kill (timeout, cancellation, sandbox end) takes its whole process tree,
  // background children included; a normal exit leaves detached children running.
  void stop_exec(OpId id, bool kill_tree);

  // The world forgets a sandbox once it is gone (its id stays known for a while).
  void retire(const FakeSandbox& sb);

  void end_sandbox(Instant now, Termination why);

  void finish_exec(OpId id, Instant now, Termination why);

  // Releases output and completions up to `now`.
  void advance(Instant now);

  // Creation has two phases: the sandbox exists halfway through create_delay (a real backend
  // makes the container, then starts it), and create() completes at the end.
  static Instant exists_at(const Op& op) { return op.started + (op.ends_at - op.started) / 2; }

  void advance_create(OpId id, Op& op, Instant now);

  void make_sandbox(Op& op);

  // Delivers timeline steps up to `limit`. Returns false when the op failed.
  bool deliver(OpId id, Op& op, Instant limit);

  std::shared_ptr<World> world_;
  Profile profile_;
  nanoseconds create_delay_;
  nanoseconds teardown_delay_;
  std::optional<CreateOptions> options_;
  std::shared_ptr<FakeSandbox> sandbox_;
  Limits limits_;
  std::map<OpId, Op> ops_;
  std::deque<Event> events_;  // bounded: see Limits (each op queues its end, its record and at
                              // most stream_buffer bytes of output)
  Redactor redactor_;
  OpId next_op_ = 0;
  std::uint64_t sequence_ = 0;
};

}  // namespace sandboxio::fake::impl
