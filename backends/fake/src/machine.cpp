// The fake:// machine. Like every backend it is driven through the Machine interface; it
// simply never asks for a connection: commands run in the built-in shell over virtual time,
// and output is released as the driver's clock reaches it.
#include <algorithm>
#include <deque>
#include <sstream>

#include "sandboxio/backend/core.hpp"
#include "sandboxio/codec/shell.hpp"
#include "sandboxio/duration.hpp"
#include "sandboxio/fake.hpp"
#include "world_impl.hpp"

namespace sandboxio::fake {
namespace {

using std::chrono::nanoseconds;
constexpr std::size_t kChunk = 64 * 1024;

const OptionSpec kOptions[] = {
    {"tier", OptionType::String, "isolation tier to declare: unknown, container, gvisor, microvm"},
    {"caps", OptionType::String, "comma-separated capabilities to declare"},
    {"create_delay", OptionType::Duration,
     "virtual time that create() takes (the sandbox exists halfway)"},
    {"teardown_delay", OptionType::Duration,
     "virtual time that tearing down a half-made sandbox takes"},
};

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

  void handle_consumed(OpId op, std::size_t bytes, Instant now) override {
    auto it = ops_.find(op);
    if (it != ops_.end()) it->second.unconsumed -= std::min(bytes, it->second.unconsumed);
    advance(now);
  }

  OpId submit_create(const CreateOptions& options, Instant now) override {
    const OpId id = open(Operation::Create, now, {});
    if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
    Op& op = ops_.at(id);
    if (auto p = check_create(options); !p.detail.empty()) return fail(id, std::move(p), now);
    options_ = options;
    redactor_.add_secrets(options.env.secret_values());
    limits_ = options.limits;
    op.kind = Op::Kind::Create;
    op.ends_at = now + create_delay_;
    op.timeout_at = now + std::chrono::duration_cast<nanoseconds>(options.create_timeout);
    advance(now);
    return id;
  }

  OpId submit_connect(std::string sandbox_id, const CreateOptions& options, Instant now) override {
    const OpId id = open(Operation::Connect, now, {});
    if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
    if (!profile_.capabilities.contains(Capability::Reattach)) {
      return fail(id, unsupported(Capability::Reattach, "connect()"), now);
    }
    std::shared_ptr<FakeSandbox> sb;
    {
      auto& impl = world_->impl();
      std::lock_guard lock(impl.mu);
      auto it = impl.sandboxes.find(sandbox_id);
      if (it != impl.sandboxes.end()) sb = it->second;
      if (!sb && impl.was_gone(sandbox_id)) {
        return fail(
            id, Problem{errc::SandboxGone, "fake sandbox " + sandbox_id + " no longer exists", {}},
            now);
      }
    }
    if (!sb) {
      return fail(
          id, Problem{errc::SandboxNotFound, "no fake sandbox with id \"" + sandbox_id + "\"", {}},
          now);
    }
    options_ = options;
    limits_ = options.limits;
    sandbox_ = sb;
    redactor_.add_secrets(sb->secrets);
    if (gone(now)) return fail(id, gone_problem(), now);
    ops_.at(id).record.sandbox_id = sb->id;
    complete(id, info_of(), now);
    return id;
  }

  OpId submit_info(Instant now) override {
    const OpId id = open(Operation::Info, now, {});
    if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
    if (auto p = need_sandbox(now); p) return fail(id, std::move(*p), now);
    complete(id, info_of(), now);
    return id;
  }

  OpId submit_run(Command command, Instant now) override {
    return start_exec(Operation::Run, std::move(command), now);
  }

  OpId submit_stream(Command command, Instant now) override {
    if (!profile_.capabilities.contains(Capability::Streaming)) {
      const OpId id = open(Operation::Stream, now, shell_join(command.argv));
      if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
      return fail(id, unsupported(Capability::Streaming, "stream()"), now);
    }
    return start_exec(Operation::Stream, std::move(command), now);
  }

  OpId submit_run_code(CodeRequest request, Instant now) override {
    const OpId id = open(Operation::RunCode, now, request.code);
    if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
    if (auto p = need_sandbox(now); p) return fail(id, std::move(*p), now);
    if (request.language != "python") {
      return fail(id,
                  Problem{errc::CapabilityNotSupported,
                          "fake:// runs only python code, not " + request.language,
                          {}},
                  now);
    }
    std::map<std::string, std::string>* vars = nullptr;
    if (request.context) {
      if (!profile_.capabilities.contains(Capability::StatefulCode)) {
        return fail(id, unsupported(Capability::StatefulCode, "run_code() with a context"), now);
      }
      auto it = sandbox_->contexts.find(*request.context);
      if (it == sandbox_->contexts.end()) {
        return fail(
            id,
            Problem{errc::CodeContextNotFound, "no code context \"" + *request.context + "\"", {}},
            now);
      }
      vars = &it->second;
    }
    Call call = base_call(Operation::RunCode);
    call.code = request.code;
    for (const auto& v : request.env.vars())
      call.env[v.name] = v.value;
    redactor_.add_secrets(request.env.secret_values());

    detail::ShellEnv env = shell_env(request.env, {});
    env.python_vars = vars;
    std::optional<std::string> value;
    detail::Outcome outcome;
    if (const Response* r = code_rule(request.code)) {
      outcome = scripted(*r);
    } else {
      outcome = detail::run_python(env, request.code, &value);
    }
    call.network_attempts = outcome.network_attempts;
    record_call(std::move(call));
    Op& op = ops_.at(id);
    op.kind = Op::Kind::Exec;
    op.streaming = false;
    op.output_limit = std::size_t{64} << 20;
    if (value && profile_.capabilities.contains(Capability::RichOutput)) {
      op.results.push_back(RichOutput{"text/plain", *value});
    }
    begin_timeline(id, op, std::move(outcome), now, request.timeout, env.pid,
                   "python3 -c " + request.code);
    advance(now);
    return id;
  }

  OpId submit_create_context(std::string language, Instant now) override {
    const OpId id = open(Operation::CreateContext, now, {});
    if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
    if (auto p = need_sandbox(now); p) return fail(id, std::move(*p), now);
    if (!profile_.capabilities.contains(Capability::StatefulCode)) {
      return fail(id, unsupported(Capability::StatefulCode, "create_context()"), now);
    }
    if (language != "python") {
      return fail(id, Problem{errc::CapabilityNotSupported, "fake:// contexts run only python", {}},
                  now);
    }
    const std::string ctx = "ctx-" + std::to_string(sandbox_->next_context++);
    sandbox_->contexts[ctx] = {};
    complete(id, CodeContext{ctx, language}, now);
    return id;
  }

  OpId submit_write_file(std::string path, Bytes data, Instant now) override {
    const OpId id = open(Operation::WriteFile, now, path);
    const auto found = begin_file_op(id, Operation::WriteFile, path, now);
    if (!found) return id;
    const std::string& norm = *found;
    const detail::Node* n = sandbox_->fs.get(norm);
    if (n != nullptr && n->dir)
      return fail(id, Problem{errc::IsADirectory, path + " is a directory", {}}, now);
    // Like the archive APIs: missing parent directories are created.
    const std::size_t slash = norm.rfind('/');
    if (slash > 0) {
      const std::string parent = norm.substr(0, slash);
      const detail::Node* pn = sandbox_->fs.get(parent);
      if (pn != nullptr && !pn->dir)
        return fail(id, Problem{errc::NotADirectory, parent + " is not a directory", {}}, now);
      sandbox_->fs.make_dirs(parent);
    }
    sandbox_->fs.put_file(norm, std::move(data));
    complete(id, std::monostate{}, now);
    return id;
  }

  OpId submit_read_file(std::string path, Instant now) override {
    const OpId id = open(Operation::ReadFile, now, path);
    const auto found = begin_file_op(id, Operation::ReadFile, path, now);
    if (!found) return id;
    const std::string& norm = *found;
    const detail::Node* n = sandbox_->fs.get(norm);
    if (n == nullptr)
      return fail(id, Problem{errc::FileNotFound, path + " does not exist", {}}, now);
    if (n->dir) return fail(id, Problem{errc::IsADirectory, path + " is a directory", {}}, now);
    complete(id, Bytes(n->data), now);
    return id;
  }

  OpId submit_list_files(std::string path, Instant now) override {
    const OpId id = open(Operation::ListFiles, now, path);
    const auto found = begin_file_op(id, Operation::ListFiles, path, now);
    if (!found) return id;
    const std::string& norm = *found;
    const detail::Node* n = sandbox_->fs.get(norm);
    if (n == nullptr)
      return fail(id, Problem{errc::FileNotFound, path + " does not exist", {}}, now);
    if (!n->dir)
      return fail(id, Problem{errc::NotADirectory, path + " is not a directory", {}}, now);
    std::vector<FileInfo> out;
    for (const std::string& child : sandbox_->fs.children(norm)) {
      const detail::Node* c = sandbox_->fs.get(child);
      out.push_back(FileInfo{child,
                             child.substr(child.rfind('/') + 1),
                             c->dir ? FileType::Directory : FileType::File,
                             c->data.size(),
                             c->mode,
                             {},
                             {}});
    }
    complete(id, std::move(out), now);
    return id;
  }

  OpId submit_remove_file(std::string path, Instant now) override {
    const OpId id = open(Operation::RemoveFile, now, path);
    const auto found = begin_file_op(id, Operation::RemoveFile, path, now);
    if (!found) return id;
    const std::string& norm = *found;
    if (!sandbox_->fs.remove(norm, true)) {
      return fail(id, Problem{errc::FileNotFound, path + " does not exist", {}}, now);
    }
    complete(id, std::monostate{}, now);
    return id;
  }

  OpId submit_kill(Instant now) override {
    const OpId id = open(Operation::Kill, now, {});
    if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
    if (!sandbox_)
      return fail(id, Problem{errc::SandboxError, "kill() before create() or connect()", {}}, now);
    end_sandbox(now, Termination::SandboxGone);
    record_call(base_call(Operation::Kill));
    complete(id, std::monostate{}, now);
    return id;
  }

  OpId submit_list_managed(std::map<std::string, std::string> labels, Instant now) override {
    const OpId id = open(Operation::ListManaged, now, {});
    if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
    std::vector<ManagedSandbox> out;
    {
      auto& impl = world_->impl();
      std::lock_guard lock(impl.mu);
      for (const auto& [sid, sb] : impl.sandboxes) {
        if (sb->gone || (sb->observed > Instant{} && sb->observed >= sb->expires_at)) continue;
        bool match = true;
        for (const auto& [k, v] : labels) {
          auto l = sb->labels.find(k);
          match = match && l != sb->labels.end() && l->second == v;
        }
        if (!match) continue;
        ManagedSandbox m;
        m.backend = "fake";
        m.id = sid;
        m.lifetime = sb->lifetime;
        m.state = SandboxState::Running;
        m.labels = sb->labels;
        out.push_back(std::move(m));
      }
    }
    complete(id, std::move(out), now);
    return id;
  }

  OpId submit_remove_managed(std::string sandbox_id, Instant now) override {
    const OpId id = open(Operation::RemoveManaged, now, {});
    if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
    std::shared_ptr<FakeSandbox> sb;
    {
      auto& impl = world_->impl();
      std::lock_guard lock(impl.mu);
      auto it = impl.sandboxes.find(sandbox_id);
      if (it != impl.sandboxes.end() && !it->second->gone) sb = it->second;
    }
    if (!sb) {
      return fail(
          id, Problem{errc::SandboxNotFound, "no fake sandbox with id \"" + sandbox_id + "\"", {}},
          now);
    }
    if (sb == sandbox_) {
      end_sandbox(now, Termination::SandboxGone);
    } else {
      sb->gone = true;  // its own machine sees it gone at its next step
      retire(*sb);
    }
    complete(id, std::monostate{}, now);
    return id;
  }

  void submit_cancel(OpId id, Instant now) override {
    auto it = ops_.find(id);
    if (it == ops_.end() || it->second.finished) return;
    Op& op = it->second;
    if (op.kind == Op::Kind::Exec) stop_exec(id, true);
    if (op.kind == Op::Kind::Create && sandbox_) {
      // The sandbox already exists: teardown still runs after a cancellation, bounded by the
      // grace; past it the sandbox may be orphaned (its lifetime is the backstop).
      const nanoseconds grace = std::chrono::duration_cast<nanoseconds>(
          options_->teardown_grace.value_or(std::chrono::milliseconds(5000)));
      op.kind = Op::Kind::Teardown;
      op.orphan = teardown_delay_ > grace;
      op.ends_at = now + (op.orphan ? grace : teardown_delay_);
      advance(now);
      return;
    }
    op.finished = true;
    push(event::Cancelled{id, false});
    close(op, Outcome::Cancelled, now, std::nullopt);
    ops_.erase(it);
  }

  std::optional<Request> poll_request() override { return std::nullopt; }

  std::optional<Event> poll_event() override {
    if (events_.empty()) return std::nullopt;
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

  std::optional<Instant> poll_deadline() const override {
    std::optional<Instant> best;
    auto consider = [&](Instant t) {
      if (!best || t < *best) best = t;
    };
    for (const auto& [id, op] : ops_) {
      if (op.finished) continue;
      if (op.kind == Op::Kind::Create) {
        consider(std::min(op.ends_at, op.timeout_at));
        if (!sandbox_) consider(exists_at(op));
        continue;
      }
      if (op.kind == Op::Kind::Teardown) {
        consider(op.ends_at);
        continue;
      }
      if (op.kind != Op::Kind::Exec) continue;
      consider(op.timeout_at);
      if (op.blocked()) continue;  // waits for handle_consumed, not for time
      if (op.next_step < op.outcome.steps.size()) {
        consider(op.started + op.outcome.steps[op.next_step].at);
      } else {
        consider(op.ends_at);
      }
    }
    if (sandbox_ && !sandbox_->gone && !ops_.empty()) consider(sandbox_->expires_at);
    return best;
  }

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
  OpId open(Operation operation, Instant now, std::string command) {
    const OpId id = ++next_op_;
    Op op;
    op.started = now;
    op.record.sequence = ++sequence_;
    op.record.backend = "fake";
    op.record.sandbox_id = sandbox_ ? sandbox_->id : std::string();
    op.record.operation = operation;
    op.record.tier = profile_.tier;
    op.record.network_policy = (options_ ? options_->network : NetworkPolicy{}).describe();
    if (options_ && options_->audit.capture_commands && !command.empty())
      op.record.command = std::move(command);
    const bool full = operation != Operation::Kill &&
                      ops_.size() >= limits_.max_pending_operations;  // teardown is never refused
    ops_.emplace(id, std::move(op));
    if (full) fail(id, queue_full(limits_), now);
    return id;
  }

  void push(Event e) { events_.push_back(std::move(e)); }

  void close(Op& op, Outcome outcome, Instant now, std::optional<Problem> problem) {
    if (problem) {
      op.record.error_code = static_cast<int>(problem->code);
      op.record.error_detail = problem->detail;
    }
    close_record(op.record, outcome, now - op.started, redactor_);
    push(event::Record{op.record, op.started});
  }

  OpId fail(OpId id, Problem problem, Instant now) {
    Op& op = ops_.at(id);
    op.finished = true;
    push(event::Failed{id, problem});
    close(op, Outcome::Failed, now, problem);
    ops_.erase(id);
    return id;
  }

  void complete(OpId id, Completion value, Instant now) {
    Op& op = ops_.at(id);
    op.finished = true;
    const RecordEnding ending = record_completion(op.record, value, gone_problem());
    push(event::Done{id, std::move(value)});
    close(op, ending.outcome, now, ending.problem);
    ops_.erase(id);
  }

  static Problem unsupported(Capability c, const std::string& what) {
    return Problem{errc::CapabilityNotSupported,
                   what + " needs the " + std::string(to_string(c)) +
                       " capability, which this fake:// sandbox does not declare",
                   {}};
  }

  Problem check_create(const CreateOptions& options) const {
    if (sandbox_)
      return Problem{errc::SandboxError, "this machine already holds a sandbox",
                     "Make one machine per sandbox."};
    if (auto r = options.validate(); !r) return r.problem();
    // The same rules the admission guard applies to every machine (for a fake:// machine
    // made directly, without BackendEntry::make).
    if (auto p = admit_create("fake", profile_.tier, profile_.capabilities, options)) return *p;
    return Problem{errc::ConfigurationError, {}, {}};  // empty detail: no problem
  }

  std::optional<Problem> need_sandbox(Instant now) {
    if (!sandbox_)
      return Problem{errc::ApiMisuse, "no sandbox yet: call create() or connect() first", {}};
    if (gone(now)) return gone_problem();
    return std::nullopt;
  }

  std::optional<Problem> file_checks(const std::string& path, Instant now) {
    if (auto p = need_sandbox(now)) return p;
    if (!profile_.capabilities.contains(Capability::Filesystem))
      return unsupported(Capability::Filesystem, "file operations");
    return backend::check_path(path);
  }

  // The common start of a file operation: admission, checks, the recorded call. Returns the
  // normalised path, or nullopt when the operation already failed (its events are queued).
  std::optional<std::string> begin_file_op(OpId id, Operation operation, const std::string& path,
                                           Instant now) {
    if (ops_.count(id) == 0) return std::nullopt;  // refused: too many operations in flight
    if (auto p = file_checks(path, now); p) {
      fail(id, std::move(*p), now);
      return std::nullopt;
    }
    std::string norm = detail::Vfs::normalise("/", path);
    Call call = base_call(operation);
    call.path = norm;
    record_call(std::move(call));
    return norm;
  }

  Problem gone_problem() const {
    return Problem{
        errc::SandboxGone,
        "fake sandbox " + (sandbox_ ? sandbox_->id : std::string("?")) + " no longer exists",
        {}};
  }

  bool gone(Instant now) {
    if (!sandbox_) return false;
    if (!sandbox_->gone && now >= sandbox_->expires_at) {
      sandbox_->gone = true;
      retire(*sandbox_);
    }
    sandbox_->observed = std::max(sandbox_->observed, now);
    return sandbox_->gone;
  }

  SandboxInfo info_of() const {
    return SandboxInfo{"fake",
                       sandbox_->id,
                       profile_.tier,
                       profile_.capabilities,
                       sandbox_->network,
                       sandbox_->gone ? SandboxState::Stopped : SandboxState::Running,
                       sandbox_->lifetime};
  }

  Call base_call(Operation operation) const {
    Call c;
    c.operation = operation;
    c.sandbox_id = sandbox_ ? sandbox_->id : std::string();
    c.network = sandbox_ ? sandbox_->network : NetworkPolicy{};
    c.workdir = sandbox_ ? sandbox_->workdir : std::string();
    if (sandbox_) c.env = sandbox_->env;
    return c;
  }

  void record_call(Call call) {
    auto& impl = world_->impl();
    std::lock_guard lock(impl.mu);
    impl.record(std::move(call));
  }

  const Response* code_rule(const std::string& code) {
    auto& impl = world_->impl();
    std::lock_guard lock(impl.mu);
    for (const auto& [needle, response] : impl.code_rules) {
      if (code.find(needle) != std::string::npos) return &response;
    }
    return nullptr;
  }

  static detail::Outcome scripted(const Response& r) {
    detail::Outcome o;
    if (!r.stdout_bytes.empty())
      o.steps.push_back({nanoseconds(0), StreamKind::Stdout, r.stdout_bytes});
    if (!r.stderr_bytes.empty())
      o.steps.push_back({nanoseconds(0), StreamKind::Stderr, r.stderr_bytes});
    o.exit_code = r.exit_code;
    o.duration = r.duration;
    return o;
  }

  detail::ShellEnv shell_env(const Env& extra, const std::string& workdir) {
    detail::ShellEnv env;
    env.fs = &sandbox_->fs;
    env.env = sandbox_->env;
    for (const auto& v : extra.vars())
      env.env[v.name] = v.value;
    env.cwd = workdir.empty() ? sandbox_->workdir : workdir;
    env.policy = &sandbox_->network;
    env.pid = sandbox_->next_pid++;
    env.find_processes = [sb = sandbox_](const std::string& pattern) {
      std::vector<int> pids;
      for (const auto& p : sb->processes) {
        if (p.alive_at(sb->observed) && p.cmdline.find(pattern) != std::string::npos)
          pids.push_back(p.pid);
      }
      return pids;
    };
    return env;
  }

  OpId start_exec(Operation operation, Command command, Instant now) {
    const OpId id = open(operation, now, shell_join(command.argv));
    if (ops_.count(id) == 0) return id;  // refused: too many operations in flight
    if (auto p = need_sandbox(now); p) return fail(id, std::move(*p), now);
    if (command.argv.empty())
      return fail(id, Problem{errc::ExecutionFailed, "the command is an empty argument list", {}},
                  now);
    if (auto r = command.env.validate(); !r) return fail(id, r.problem(), now);
    if (!command.stdin_data.empty() && !profile_.capabilities.contains(Capability::Stdin))
      return fail(id, unsupported(Capability::Stdin, "a command's stdin"), now);
    if (!command.workdir.empty()) {
      const detail::Node* n = sandbox_->fs.get(detail::Vfs::normalise("/", command.workdir));
      if (command.workdir[0] != '/' || n == nullptr || !n->dir) {
        return fail(id,
                    Problem{errc::ExecutionFailed,
                            "working directory " + command.workdir + " does not exist",
                            {}},
                    now);
      }
    }
    redactor_.add_secrets(command.env.secret_values());
    Call call = base_call(operation);
    call.argv = command.argv;
    for (const auto& v : command.env.vars())
      call.env[v.name] = v.value;
    if (!command.workdir.empty()) call.workdir = command.workdir;

    detail::ShellEnv env = shell_env(command.env, command.workdir);
    env.stdin_data = command.stdin_data;
    detail::Outcome outcome;
    const Response* rule = nullptr;
    {
      auto& impl = world_->impl();
      std::lock_guard lock(impl.mu);
      for (const auto& r : impl.rules) {
        if (r.match(command.argv)) {
          rule = &r.response;
          break;
        }
      }
    }
    outcome = rule != nullptr ? scripted(*rule) : detail::run_argv(env, command.argv);
    call.network_attempts = outcome.network_attempts;
    record_call(std::move(call));

    Op& op = ops_.at(id);
    op.kind = Op::Kind::Exec;
    op.streaming = operation == Operation::Stream;
    op.stream_buffer = limits_.stream_buffer;
    op.output_limit = command.output_limit;
    for (const auto& b : outcome.background) {
      sandbox_->processes.push_back({sandbox_->next_pid++, b.what, now + b.ends_at, id, false});
    }
    begin_timeline(id, op, std::move(outcome), now, command.timeout, env.pid,
                   shell_join(command.argv));
    advance(now);
    return id;
  }

  void begin_timeline(OpId id, Op& op, detail::Outcome outcome, Instant now,
                      std::chrono::milliseconds timeout, int pid, std::string cmdline) {
    op.outcome = std::move(outcome);
    op.ends_at = now + op.outcome.duration;
    op.timeout_at = now + std::chrono::duration_cast<nanoseconds>(timeout);
    sandbox_->processes.push_back({pid, std::move(cmdline), std::nullopt, id, false});
  }

  // Ends an exec. A kill (timeout, cancellation, sandbox end) takes its whole process tree,
  // background children included; a normal exit leaves detached children running.
  void stop_exec(OpId id, bool kill_tree) {
    if (!sandbox_) return;
    for (auto& p : sandbox_->processes) {
      if (p.owner == id && (kill_tree || !p.ends_at)) p.ended = true;
    }
    // Forget what has ended, so that the table stays as small as what runs.
    std::erase_if(sandbox_->processes, [&](const FakeSandbox::Process& p) {
      return p.ended || (p.ends_at && *p.ends_at <= sandbox_->observed);
    });
  }

  // The world forgets a sandbox once it is gone (its id stays known for a while).
  void retire(const FakeSandbox& sb) {
    auto& impl = world_->impl();
    std::lock_guard lock(impl.mu);
    impl.retire(sb.id);
  }

  void end_sandbox(Instant now, Termination why) {
    if (!sandbox_) return;
    sandbox_->gone = true;
    retire(*sandbox_);
    sandbox_->expires_at = std::min(sandbox_->expires_at, now);
    std::vector<OpId> running;
    for (auto& [id, op] : ops_) {
      if (op.kind == Op::Kind::Exec && !op.finished) running.push_back(id);
    }
    for (OpId id : running)
      finish_exec(id, now, why);
  }

  void finish_exec(OpId id, Instant now, Termination why) {
    Op& op = ops_.at(id);
    stop_exec(id, why != Termination::Exited);
    ExecResult r;
    r.duration = now - op.started;
    r.termination = why;
    r.streamed = op.streaming;
    if (why == Termination::Exited) {
      if (op.outcome.signal) {
        r.termination = Termination::Signalled;
        r.signal = op.outcome.signal;
      }
      r.exit_code = op.outcome.exit_code;
    } else if (why == Termination::Timeout || why == Termination::Cancelled) {
      r.exit_code = 137;  // what the sandbox reports for the SIGKILL sandboxio sent
      r.signal = 9;
    }
    if (!op.streaming) {
      r.stdout_bytes = std::move(op.out);
      r.stderr_bytes = std::move(op.err);
    }
    r.results = std::move(op.results);
    complete(id, std::move(r), now);
  }

  // Releases output and completions up to `now`.
  void advance(Instant now) {
    if (sandbox_) sandbox_->observed = std::max(sandbox_->observed, now);
    if (sandbox_ && !sandbox_->gone && now >= sandbox_->expires_at) {
      end_sandbox(now, Termination::SandboxGone);
    }
    std::vector<OpId> ids;
    for (const auto& [id, op] : ops_)
      ids.push_back(id);
    for (OpId id : ids) {
      auto it = ops_.find(id);
      if (it == ops_.end() || it->second.finished) continue;
      Op& op = it->second;
      if (op.kind == Op::Kind::Create) {
        advance_create(id, op, now);
        continue;
      }
      if (op.kind == Op::Kind::Teardown) {
        if (now < op.ends_at) continue;
        if (!op.orphan) end_sandbox(now, Termination::Cancelled);
        op.finished = true;
        op.record.possible_orphan = op.orphan;
        push(event::Cancelled{id, op.orphan});
        close(op, Outcome::Cancelled, now, std::nullopt);
        ops_.erase(id);
        continue;
      }
      if (op.kind != Op::Kind::Exec) continue;
      const Instant limit = std::min(now, op.timeout_at);
      if (!deliver(id, op, limit)) continue;  // failed (output limit)
      if (now >= op.timeout_at &&
          (op.next_step < op.outcome.steps.size() || op.ends_at > op.timeout_at)) {
        finish_exec(id, op.timeout_at, Termination::Timeout);
        continue;
      }
      if (op.next_step >= op.outcome.steps.size() && now >= op.ends_at)
        finish_exec(id, std::max(op.ends_at, op.started), Termination::Exited);
    }
  }

  // Creation has two phases: the sandbox exists halfway through create_delay (a real backend
  // makes the container, then starts it), and create() completes at the end.
  static Instant exists_at(const Op& op) { return op.started + (op.ends_at - op.started) / 2; }

  void advance_create(OpId id, Op& op, Instant now) {
    if (now >= op.timeout_at && op.timeout_at < op.ends_at) {
      if (sandbox_) end_sandbox(now, Termination::SandboxGone);  // nothing half-made survives
      fail(id,
           Problem{errc::CreateTimeout,
                   "fake create took longer than " + format_duration(op.timeout_at - op.started),
                   {}},
           now);
      return;
    }
    if (!sandbox_ && now >= exists_at(op)) make_sandbox(op);
    if (now < op.ends_at) return;
    if (profile_.tier == IsolationTier::Unknown) {
      push(event::Warning{Problem{
          errc::IsolationNotSatisfied,
          "fake:// declares the UNKNOWN isolation tier: it runs nothing and isolates nothing",
          "Use docker:// or e2b:// for untrusted code; fake:// is for tests."}});
    }
    complete(id, info_of(), now);
  }

  void make_sandbox(Op& op) {
    auto sb = std::make_shared<FakeSandbox>();
    {
      auto& impl = world_->impl();
      std::lock_guard lock(impl.mu);
      sb->id = "fake-" + (world_->name().empty() ? std::string("default") : world_->name()) + "-" +
               std::to_string(impl.next_sandbox++);
      impl.sandboxes[sb->id] = sb;
    }
    for (const auto& v : options_->env.vars())
      sb->env[v.name] = v.value;
    sb->env.emplace("HOME", "/home/user");
    sb->env.emplace("PATH", "/usr/local/bin:/usr/bin:/bin");
    if (!options_->workdir.empty()) {
      sb->workdir = options_->workdir;
      sb->fs.make_dirs(options_->workdir);
    }
    sb->network = options_->network;
    sb->lifetime = options_->lifetime;
    sb->expires_at = exists_at(op) + std::chrono::duration_cast<nanoseconds>(options_->lifetime);
    sb->secrets = options_->env.secret_values();
    sb->labels = options_->labels;
    sandbox_ = sb;
    op.record.sandbox_id = sb->id;
    Call call = base_call(Operation::Create);
    record_call(std::move(call));
  }

  // Delivers timeline steps up to `limit`. Returns false when the op failed.
  bool deliver(OpId id, Op& op, Instant limit) {
    while (op.next_step < op.outcome.steps.size()) {
      detail::Step& step = op.outcome.steps[op.next_step];
      if (op.started + step.at > limit) return true;
      const int s = step.stream == StreamKind::Stdout ? 0 : 1;
      if (!op.streaming) {
        Bytes& sink = s == 0 ? op.out : op.err;
        if (op.out.size() + op.err.size() + step.data.size() > op.output_limit) {
          stop_exec(id, true);
          fail(id,
               Problem{errc::OutputLimitExceeded,
                       "the command wrote more than " + std::to_string(op.output_limit) +
                           " bytes; it was killed",
                       {}},
               limit);
          return false;
        }
        sink += step.data;
        op.next_step++;
        continue;
      }
      while (op.step_offset < step.data.size()) {
        if (op.blocked()) return true;
        const std::size_t room = op.stream_buffer - op.unconsumed;
        const std::size_t n = std::min({kChunk, room, step.data.size() - op.step_offset});
        OutputChunk chunk{step.stream, step.data.substr(op.step_offset, n), op.offsets[s]};
        op.offsets[s] += n;
        op.step_offset += n;
        op.unconsumed += n;
        push(event::Output{id, std::move(chunk)});
      }
      op.step_offset = 0;
      op.next_step++;
    }
    return true;
  }

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

}  // namespace

Result<std::unique_ptr<Machine>> make_machine(const Dsn& dsn) {
  auto typed = dsn.typed(kOptions);
  if (!typed) return typed.problem();
  auto world = World::find(dsn.target);
  if (!world) {
    return Problem{
        errc::InvalidDsn, "no fake world named \"" + dsn.target + "\"",
        "Use fake:// for the default world, or World::create()->dsn() for a private one."};
  }
  Profile profile = world->profile();
  const TypedOptions& o = typed.value();
  if (o.has("tier")) {
    auto tier = IsolationTier::parse(o.string("tier"));
    if (!tier)
      return Problem{errc::InvalidOption, "tier \"" + o.string("tier") + "\" is not a tier",
                     "Use unknown, container, gvisor or microvm."};
    profile.tier = *tier;
  }
  if (o.has("caps")) {
    CapabilitySet caps;
    std::stringstream list(o.string("caps"));
    std::string name;
    while (std::getline(list, name, ',')) {
      if (name.empty()) continue;
      auto c = parse_capability(name);
      if (!c)
        return Problem{errc::InvalidOption, "\"" + name + "\" is not a capability",
                       "See docs/reference/capabilities.md."};
      caps.insert(*c);
    }
    profile.capabilities = caps;
  }
  const auto delay =
      std::chrono::duration_cast<std::chrono::nanoseconds>(o.duration("create_delay"));
  const auto teardown =
      std::chrono::duration_cast<std::chrono::nanoseconds>(o.duration("teardown_delay"));
  return std::unique_ptr<Machine>(
      std::make_unique<FakeMachine>(std::move(world), profile, delay, teardown));
}

BackendEntry backend_entry() {
  return BackendEntry{"fake",
                      "deterministic in-process sandbox for offline tests",
                      &make_machine,
                      {},
                      std::vector<OptionSpec>(std::begin(kOptions), std::end(kOptions))};
}

}  // namespace sandboxio::fake
