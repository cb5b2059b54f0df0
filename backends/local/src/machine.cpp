// The local:// machine: one connection, a process the transport starts (bubblewrap running
// sandboxio-agent), speaking the agent protocol from its first byte. Commands, files and code
// contexts are the shared AgentMachine's; this file is the sandbox's life (the launcher's
// command line is launcher.cpp's).
// States:
//   create:  Open(Process: [setpriv] bwrap ... agent) -> Hello -> Welcome -> Done(SandboxInfo)
//            bytes that are not a frame before the Welcome are the launcher's own words
//            (bwrap: ...), kept for the message of the create that fails
//   kill:    Close (the transport kills bubblewrap, and its PID namespace goes with it) -> Done
//   end:     the connection ends (the lifetime ran out, the agent died): every call ends as
//            SandboxGone
#include <algorithm>
#include <csignal>
#include <cstdlib>

#include "sandboxio/backend/agent_machine.hpp"
#include "sandboxio/codec/shell.hpp"
#include "sandboxio/local.hpp"

namespace sandboxio::local {
namespace {

using backend::AgentOpState;
using namespace std::chrono_literals;

Problem unsupported(const std::string& what, const std::string& hint) {
  return Problem{errc::CapabilityNotSupported, what, hint};
}

/// The printable start of what the launcher said (bwrap's errors are one line of text).
std::string printable(std::string_view text) {
  std::string out;
  for (char ch : text.substr(0, 400)) {
    if (ch == '\n') {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else if (static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f) {
      out += ch;
    }
  }
  while (!out.empty() && out.back() == ' ')
    out.pop_back();
  return out;
}

class LocalMachine final : public backend::AgentMachine {
 public:
  explicit LocalMachine(Config config)
      : AgentMachine("local",
                     config.runsc.empty() ? IsolationTier::Container : IsolationTier::Gvisor,
                     "sandboxio-agent"),
        config_(std::move(config)) {}

  CapabilitySet capabilities() const noexcept override {
    CapabilitySet caps = declared_capabilities();
    // Under gVisor a cgroup limit would end the whole sandbox (the Sentry holds every
    // process's memory), not the command past it: refused, like any limit not enforced.
    if (config_.cgroup_version != 0 && config_.runsc.empty()) caps.insert(Capability::ResourceCaps);
    if (agent_python()) {
      caps.insert(Capability::StatefulCode);
      caps.insert(Capability::RichOutput);
    }
    return caps;
  }

  // ---- inputs ----
  void handle_connected(ConnId id, Instant now) override {
    if (egress_conn(id)) egress_connected(id, now);
  }

  void handle_connect_failed(ConnId id, Problem problem, Instant now) override {
    if (egress_conn(id)) return egress_connect_failed(id, problem, now);
    if (id != conn_) return;
    conn_ = 0;
    if (alive(agent_create_)) {
      problem.code = errc::BackendUnavailable;
      problem.detail = std::string(config_.runsc.empty() ? "cannot start bubblewrap: "
                                                         : "cannot start runsc: ") +
                       problem.detail;
      problem.hint = "`sandboxio doctor` checks what local:// needs.";
      fail(agent_create_, problem, now);
      agent_create_ = 0;
      return;
    }
    ended(std::move(problem), now);
  }

  std::size_t handle_bytes(ConnId id, std::string_view data, Instant now) override {
    if (egress_conn(id)) return egress_bytes(id, data, now);
    if (id != conn_) return data.size();
    if (!agent_ready_ && agent_stderr_.size() < 4096)
      agent_stderr_.append(data.substr(0, 4096 - agent_stderr_.size()));
    std::vector<agent::Frame> frames;
    reader_.feed(data, [&](agent::Frame f) { frames.push_back(std::move(f)); });
    for (auto& f : frames)
      agent_frame(std::move(f), now);
    if (reader_.error()) {
      Problem p = *reader_.error();
      if (!agent_ready_) p.detail = "the launcher said: " + launcher_words();
      close_session();
      gone_ = true;
      agent_lost(p, now);
      fail_machine(std::move(p), now);
    }
    return data.size();
  }

  void handle_eof(ConnId id, Instant now) override {
    if (egress_conn(id)) return egress_eof(id, now);
    if (id != conn_) return;
    close_session();
    gone_ = true;
    ended(agent_ready_ || agent_stderr_.empty()
              ? gone_problem()
              : Problem{errc::CreateFailed, "the launcher said: " + launcher_words(), {}},
          now);
  }

  void handle_timeout(Instant now) override {
    egress_timeout(now);
    for (OpId id : due(now)) {
      Op* op = find_op(id);
      if (!op) continue;
      if (op->kind == AgentOpState::Kind::Create) {
        close_session();
        fail(
            id,
            Problem{errc::CreateTimeout, "the sandbox did not start within the create timeout", {}},
            now);
      } else if (!agent_stop(id, Termination::Timeout, now)) {
        if (op->channel != 0) calls_.erase(op->channel);
        expire(id, now);
      }
    }
  }

  std::optional<Instant> poll_deadline() const override {
    return earliest(ops_deadline(), egress_deadline());
  }

  // ---- create, connect, info, kill ----
  OpId submit_create(const CreateOptions& options, Instant now) override {
    const OpId id = open(Operation::Create, now);
    if (Op* o = find_op(id)) trace_record(o->record, options.trace);
    if (!alive(id)) return id;
    if (started_)
      return fail(id,
                  Problem{errc::ApiMisuse, "this machine already holds a sandbox",
                          "Make one machine per sandbox."},
                  now);
    if (auto r = options.validate(); !r) return fail(id, r.problem(), now);
    if (options.outlive_owner) {
      return fail(id,
                  unsupported("local:// sandboxes end with the process that made them: there is "
                              "no daemon to keep one alive (outlive_owner)",
                              "Use docker:// or e2b:// for a sandbox that outlives its owner."),
                  now);
    }
    const CreateOptions effective = egress_setup(options);
    adopt(effective);
    started_ = true;
    oom_probe_ = config_.cgroup_version != 0 && config_.runsc.empty() &&
                 options.resources.memory_bytes.has_value();
    name_sandbox(config_.id, id);
    Op& op = *find_op(id);
    op.kind = AgentOpState::Kind::Create;
    op.deadline =
        now + std::chrono::duration_cast<std::chrono::nanoseconds>(options.create_timeout);
    lifetime_ = options.lifetime;
    expires_at_ = now + std::chrono::duration_cast<std::chrono::nanoseconds>(options.lifetime);
    Endpoint launcher;
    launcher.kind = Endpoint::Kind::Process;
    launcher.address = config_.runsc.empty() ? "bubblewrap" : "runsc";
    launcher.argv = launch_argv(config_, effective);
    conn_ = next_conn_++;
    out_.push(request::Open{conn_, std::move(launcher)});
    agent_hello(id);
    return id;
  }

  OpId submit_connect(std::string, const CreateOptions&, Instant now) override {
    const OpId id = open(Operation::Connect, now);
    if (!alive(id)) return id;
    return fail(id,
                unsupported("local:// sandboxes cannot be re-attached: each lives only as long as "
                            "the process that made it",
                            "Keep the handle, or use docker:// (connect() re-attaches there)."),
                now);
  }

  OpId submit_info(Instant now) override {
    const OpId id = open(Operation::Info, now);
    if (!alive(id)) return id;
    if (!started_) return fail(id, not_created(), now);
    complete(id, local_info(gone_ ? SandboxState::Stopped : SandboxState::Running), now);
    return id;
  }

  OpId submit_kill(Instant now) override {
    const OpId id = open(Operation::Kill, now);
    if (!alive(id)) return id;
    if (conn_ != 0) {
      // The transport kills bubblewrap (SIGKILL) and reaps it; with it goes the PID
      // namespace, and every process in it.
      close_session();
      gone_ = true;
      agent_lost(gone_problem(), now);
    }
    complete(id, std::monostate{}, now);
    return id;
  }

  // ---- commands ----
  OpId submit_run(Command command, Instant now) override {
    return start_command(Operation::Run, std::move(command), false, now);
  }
  OpId submit_stream(Command command, Instant now) override {
    return start_command(Operation::Stream, std::move(command), true, now);
  }

  OpId submit_run_code(CodeRequest request, Instant now) override {
    const OpId id = open(Operation::RunCode, now, request.code);
    meter_in(id, request.code.size());
    if (!alive(id)) return id;
    traced(id, request.env);
    if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
    if (request.language != "python") {
      return fail(id,
                  unsupported("local:// runs python code, not " + request.language,
                              "run() runs any program the root filesystem has."),
                  now);
    }
    if (!agent_python()) return fail(id, no_python("run_code()"), now);
    request.env = with_sandbox_env(std::move(request.env));
    code_start(id, std::move(request), now);
    return id;
  }

  OpId submit_create_context(std::string language, Instant now) override {
    const OpId id = open(Operation::CreateContext, now);
    if (!alive(id)) return id;
    if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
    if (!language.empty() && language != "python")
      return fail(id, unsupported("local:// contexts run python, not " + language, {}), now);
    if (!agent_python()) return fail(id, no_python("create_context()"), now);
    context_start(id, now);
    return id;
  }

  // ---- files ----
  OpId submit_write_file(std::string path, Bytes data, Instant now) override {
    const OpId id = file_op(Operation::WriteFile, path, now);
    meter_in(id, data.size());
    if (!alive(id)) return id;
    if (path == "/") return fail(id, Problem{errc::IsADirectory, "\"/\" is a directory", {}}, now);
    agent_write(id, std::move(path), std::move(data), now);
    return id;
  }
  OpId submit_read_file(std::string path, Instant now) override {
    return path_call(Operation::ReadFile, AgentCall::Kind::Read, agent::Type::ReadFile,
                     std::move(path), now);
  }
  OpId submit_list_files(std::string path, Instant now) override {
    return path_call(Operation::ListFiles, AgentCall::Kind::List, agent::Type::ListDir,
                     std::move(path), now);
  }
  OpId submit_remove_file(std::string path, Instant now) override {
    return path_call(Operation::RemoveFile, AgentCall::Kind::Remove, agent::Type::Remove,
                     std::move(path), now);
  }

  // ---- managed sandboxes: none outlives its owner, so there is nothing to list or reap ----
  OpId submit_list_managed(std::map<std::string, std::string>, Instant now) override {
    const OpId id = open(Operation::ListManaged, now);
    if (alive(id)) complete(id, std::vector<ManagedSandbox>{}, now);
    return id;
  }
  OpId submit_remove_managed(std::string sandbox_id, Instant now) override {
    const OpId id = open(Operation::RemoveManaged, now);
    if (!alive(id)) return id;
    return fail(
        id,
        Problem{errc::SandboxNotFound, "no local:// sandbox \"" + sandbox_id + "\" to remove",
                "local:// sandboxes end with the process that made them: there is "
                "nothing to reap."},
        now);
  }

  void submit_cancel(OpId id, Instant now) override {
    Op* op = find_op(id);
    if (!op || op->cancelled) return;
    op->cancelled = true;
    // Through the agent, the Exit or CodeDone that follows ends it as cancelled.
    if (agent_stop(id, Termination::Cancelled, now)) return;
    if (op->channel != 0) {
      agent_cancel_call(id, now);
    } else if (op->kind == AgentOpState::Kind::Create) {
      close_session();  // bubblewrap is killed: nothing is left behind
      gone_ = true;
      agent_create_ = 0;
      cancelled(id, now);
    } else {
      cancelled(id, now);
    }
  }

 protected:
  ConnId agent_conn() const override { return conn_; }
  /// Its socket pair reaches the agent; but gVisor's kernel takes in no descriptor of the
  /// host's, so under runsc the tunnels stay relayed here.
  bool agent_conn_direct() const override { return config_.runsc.empty(); }

  void agent_welcomed(Instant now) override {
    const OpId id = agent_create_;
    agent_create_ = 0;
    agent_stderr_.clear();
    if (alive(id)) complete(id, local_info(SandboxState::Running), now);
  }

  Problem agent_start_problem(const std::string& why) const override {
    std::string hint = "`sandboxio doctor` checks bubblewrap and user namespaces on this machine.";
    if (why.find("Can't mount proc") != std::string::npos) {
      // Seen inside Docker's default container: its /proc has masked paths, and the kernel
      // refuses a new proc mount in a user namespace while any of them is covered.
      hint =
          "Inside a container whose /proc is masked (Docker's default), bubblewrap cannot "
          "mount a /proc of its own: run that container with --security-opt "
          "systempaths=unconfined --security-opt seccomp=unconfined, or use docker:// from "
          "the host.";
    } else if (why.find("No permissions to creat") != std::string::npos ||
               why.find("setting up uid map") != std::string::npos) {
      hint =
          "Unprivileged user namespaces are off here: sysctl kernel.unprivileged_userns_clone=1 "
          "(Debian), or an AppArmor profile that allows bwrap (Ubuntu 24.04); `sandboxio "
          "doctor` checks.";
    }
    return Problem{errc::CreateFailed, "the local:// sandbox did not start: " + why,
                   std::move(hint)};
  }

  Problem gone_problem() const override {
    return Problem{
        errc::SandboxGone,
        "the local:// sandbox " + sandbox_id() + " has ended (killed, or its lifetime ran out)",
        "Create a new sandbox."};
  }

  std::string waiting_for(OpId id) const override {
    return id == agent_create_ ? "the agent's Welcome" : std::string();
  }

 private:
  SandboxInfo local_info(SandboxState state) const {
    SandboxInfo info = sandbox_info(state, lifetime_);
    if (via_agent())
      info.agent = welcome_.agent + (config_.runsc.empty() ? " (bubblewrap)" : " (gVisor, runsc)");
    return info;
  }

  /// What the launcher wrote before the agent's Welcome, as printable text; taken once (the
  /// raw bytes must not reach a message as they are).
  std::string launcher_words() {
    std::string words = printable(agent_stderr_);
    agent_stderr_.clear();
    return words.empty() ? "nothing (it ended)" : words;
  }

  static Problem not_created() {
    return Problem{errc::ApiMisuse, "no sandbox yet: create() first", {}};
  }
  std::optional<Problem> need_sandbox(Instant now) const {
    if (!started_) return not_created();
    // Past its lifetime the sandbox is gone, even in the moment before its agent has ended it.
    if (gone_ || !via_agent() || (expires_at_ && now >= *expires_at_)) return gone_problem();
    return std::nullopt;
  }
  static Problem no_python(const std::string& what) {
    return unsupported(what + " needs python3 in the sandbox's root filesystem",
                       "Install python3 on this machine, or give local:// a root that has it.");
  }

  /// The sandbox's own variables (create()'s env) under the command's: the agent's environment
  /// is bubblewrap's, which carries none of them (they never appear on a command line).
  Env with_sandbox_env(Env env) const {
    if (!options_) return env;
    Env merged = options_->env;
    for (const auto& v : env.vars()) {
      if (v.secret) {
        merged.set_secret(v.name, v.value);
      } else {
        merged.set(v.name, v.value);
      }
    }
    return merged;
  }

  OpId start_command(Operation operation, Command command, bool streaming, Instant now) {
    const OpId id = open(operation, now, shell_join(command.argv));
    meter_in(id, command.stdin_data.size());
    if (!alive(id)) return id;
    traced(id, command.env);
    if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
    if (command.argv.empty())
      return fail(id, Problem{errc::ExecutionFailed, "the command is empty", {}}, now);
    if (auto r = command.env.validate(); !r) return fail(id, r.problem(), now);
    if (!command.workdir.empty() && command.workdir[0] != '/') {
      return fail(id, Problem{errc::InvalidPath, "the working directory must be absolute", {}},
                  now);
    }
    redactor_.add_secrets(command.env.secret_values());
    command.env = with_sandbox_env(std::move(command.env));
    Op& op = *find_op(id);
    op.kind = AgentOpState::Kind::Exec;
    op.output.streaming = streaming;
    op.output.limit = command.output_limit;
    op.exec_started = now;
    op.deadline = now + std::chrono::duration_cast<std::chrono::nanoseconds>(command.timeout);
    agent_start(id, std::move(command), streaming, now);
    return id;
  }

  OpId file_op(Operation operation, const std::string& path, Instant now) {
    const OpId id = open(operation, now, path);
    if (!alive(id)) return id;
    if (auto p = backend::check_path(path)) return fail(id, std::move(*p), now);
    if (auto p = need_sandbox(now)) return fail(id, std::move(*p), now);
    return id;
  }

  OpId path_call(Operation operation, AgentCall::Kind kind, agent::Type type, std::string path,
                 Instant now) {
    const OpId id = file_op(operation, path, now);
    if (!alive(id)) return id;
    agent::PathRequest request;
    request.path = std::move(path);
    if (kind == AgentCall::Kind::Remove) request.flags = agent::PathRequest::kRecursive;
    agent_file(id, kind, type, std::move(request), now);
    return id;
  }

  void close_session() {
    if (conn_ != 0) out_.push(request::Close{conn_});
    conn_ = 0;
  }

  /// The session ended: the sandbox is gone, and with it every call.
  void ended(Problem problem, Instant now) {
    gone_ = true;
    agent_lost(std::move(problem), now);
  }

  Config config_;
  bool started_ = false;
  ConnId conn_ = 0;
  ConnId next_conn_ = 1;
  agent::FrameReader reader_{};
  std::chrono::seconds lifetime_{0};
  // With a memory limit: the cgroup's OOM-kill count, bound into the sandbox read-only
  // (kOomEventsPath), and how many of its kills are already told.
  bool oom_probe_ = false;
  std::uint64_t oom_kills_ = 0;

  // A command killed (SIGKILL) by nobody here: the kernel's OOM killer when the sandbox's
  // cgroup counted one more kill meanwhile, else something in the sandbox.
  bool explain_kill(OpId id, ExecResult& result, std::chrono::system_clock::time_point,
                    Instant) override {
    if (!oom_probe_) return false;
    agent_probe(id, std::string(kOomEventsPath),
                [this, id, r = std::move(result)](std::optional<Bytes> text, Instant t) mutable {
                  if (text) {
                    const auto at = text->find("oom_kill ");
                    if (at != std::string::npos) {
                      const std::uint64_t kills =
                          std::strtoull(text->c_str() + at + 9, nullptr, 10);
                      if (kills > oom_kills_) r.termination = Termination::OutOfMemory;
                      oom_kills_ = std::max(oom_kills_, kills);
                    }
                  }
                  finish_command(id, std::move(r), t);
                });
    return true;
  }
};

}  // namespace

CapabilitySet declared_capabilities() {
  return CapabilitySet{Capability::NetworkPolicy, Capability::NetworkAllowList,
                       Capability::Filesystem, Capability::Streaming, Capability::Stdin};
}

std::unique_ptr<Machine> make_machine(Config config) {
  return std::make_unique<LocalMachine>(std::move(config));
}

}  // namespace sandboxio::local
