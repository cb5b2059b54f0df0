// The local:// machine: one connection, a process the transport starts (bubblewrap running
// sandboxio-agent), speaking the agent protocol from its first byte. Commands, files and code
// contexts are the shared AgentMachine's; this file is the launcher and the sandbox's life.
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
#include "sandboxio/codec/json_writer.hpp"
#include "sandboxio/codec/shell.hpp"
#include "sandboxio/local.hpp"

namespace sandboxio::local {
namespace {

using backend::AgentOpState;
using namespace std::chrono_literals;

/// With a memory limit: the sandbox cgroup's memory.oom_control (v1) or memory.events (v2),
/// bound read-only; its "oom_kill N" counts the kernel's out-of-memory kills.
constexpr std::string_view kOomEvents = "/dev/.sandboxio/memory.events";

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
  void handle_connected(ConnId, Instant) override {}

  void handle_connect_failed(ConnId id, Problem problem, Instant now) override {
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
    if (id != conn_) return;
    close_session();
    gone_ = true;
    ended(agent_ready_ || agent_stderr_.empty()
              ? gone_problem()
              : Problem{errc::CreateFailed, "the launcher said: " + launcher_words(), {}},
          now);
  }

  void handle_timeout(Instant now) override {
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

  std::optional<Instant> poll_deadline() const override { return ops_deadline(); }

  // ---- create, connect, info, kill ----
  OpId submit_create(const CreateOptions& options, Instant now) override {
    const OpId id = open(Operation::Create, now);
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
    adopt(options);
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
    launcher.argv = launch_argv(config_, options);
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
    if (!alive(id)) return id;
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
    if (!alive(id)) return id;
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
  // (kOomEvents), and how many of its kills are already told.
  bool oom_probe_ = false;
  std::uint64_t oom_kills_ = 0;

  // A command killed (SIGKILL) by nobody here: the kernel's OOM killer when the sandbox's
  // cgroup counted one more kill meanwhile, else something in the sandbox.
  bool explain_kill(OpId id, ExecResult& result, std::chrono::system_clock::time_point,
                    Instant) override {
    if (!oom_probe_) return false;
    agent_probe(id, std::string(kOomEvents),
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

namespace {

constexpr const char* kPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The uid and gid of the sandbox's processes under runsc, as gVisor's kernel sees them: nobody.
constexpr int kSandboxUid = 65534;

std::vector<std::string> agent_argv(const CreateOptions& options) {
  return {std::string(kAgentPath), "--lifetime", std::to_string(options.lifetime.count()),
          "--seccomp", "--quiet"};
}

/// As root: the same unprivileged path a normal user takes (an unprivileged user namespace,
/// no capabilities over anything outside it), as a uid nothing else has.
std::vector<std::string> drop_privileges(const Config& config) {
  if (config.setpriv.empty()) return {};
  const std::string id = std::to_string(config.uid);
  return {config.setpriv,
          "--reuid=" + id,
          "--regid=" + id,
          "--clear-groups",
          "--inh-caps=-all",
          "--no-new-privs",
          "--"};
}

/// A launcher that needs a shell around it (cgroups, gVisor's bundle) gets one shell script:
/// `setup` runs first (set -e: a failure ends it, and what failed reaches the host), then
/// `command` starts with the socket as its stdio, the shell lets go of the socket, `started`
/// runs, and the shell waits for the command and runs `ended`. One shell, whatever it does:
/// the transport's close kills the shell's children and grandchildren, then gives the shell
/// time to finish, so the shell always cleans up.
struct Script {
  std::string setup, started, ended;
  /// The launcher, as shell words; "$@" is the argv after the script's own arguments.
  std::string command = "\"$@\"";
  /// runsc's stderr is a file, `$d/said`, passed on to the host when runsc fails (gVisor
  /// shuts a stdio socket down when the agent closes its copy of stderr); bubblewrap takes
  /// the socket as stdin, stdout and stderr.
  bool stderr_to_said = false;
};

std::vector<std::string> scripted(const Script& script, std::vector<std::string> args) {
  std::string s = "set -e\n" + script.setup + "set +e\ntrap '' PIPE\n";
  // The socket through fd 3: a shell gives an asynchronous command /dev/null as its stdin
  // before any redirection of its own.
  if (script.stderr_to_said) {
    // The shell keeps the socket only to pass on what runsc said.
    s += "exec 3<&0 </dev/null\n" + script.command +
         " <&3 >&3 2>\"$d/said\" &\nchild=$!\nexec >/dev/null 2>&1\n";
  } else {
    // The shell lets go of the socket: the launcher has its own copies, and nothing the shell
    // might say (a job's end) may reach the host.
    s += "exec 3<&0\n" + script.command +
         " <&3 3<&- &\nchild=$!\nexec 3<&- </dev/null >/dev/null 2>&1\n";
  }
  s += script.started + "wait $child\n" + script.ended;
  if (script.stderr_to_said) s += "[ -s \"$d/said\" ] && cat \"$d/said\" >&3\nexec 3>&-\n";
  std::vector<std::string> argv = {"/bin/sh", "-c", std::move(s), "sandboxio-launcher"};
  argv.insert(argv.end(), std::make_move_iterator(args.begin()),
              std::make_move_iterator(args.end()));
  return argv;
}

/// The sandbox's cgroups: made and limited before the launcher starts (it starts in them); the
/// shell leaves them once it has, and removes them once the sandbox has ended.
void add_cgroups(Script& script, const Config& config, const Resources& r) {
  const std::string group = "sandboxio/" + config.id;
  std::string& s = script.setup;
  std::vector<std::string> roots;
  // Where the shell goes once the launcher has started: v1's sandboxio group; on v2 a group
  // with controllers enabled may hold no process, so the root.
  std::string leave = "sandboxio/";
  if (config.cgroup_version == 2) {
    leave.clear();
    roots = {config.cgroup_memory};
    const std::string g = config.cgroup_memory + "/" + group;
    s += "mkdir -p '" + config.cgroup_memory + "/sandboxio'\n";
    s += "echo +memory +pids +cpu > '" + config.cgroup_memory +
         "/sandboxio/cgroup.subtree_control'\n";
    s += "mkdir '" + g + "'\n";
    if (r.memory_bytes) {
      s += "echo " + std::to_string(*r.memory_bytes) + " > '" + g + "/memory.max'\n";
      s += "echo 0 > '" + g + "/memory.swap.max' 2>/dev/null || true\n";
    }
    if (r.pids) s += "echo " + std::to_string(*r.pids) + " > '" + g + "/pids.max'\n";
    if (r.cpus) {
      s += "echo " + std::to_string(static_cast<long long>(*r.cpus * 100000)) + " 100000 > '" + g +
           "/cpu.max'\n";
    }
  } else {
    roots = {config.cgroup_memory, config.cgroup_pids, config.cgroup_cpu};
    for (const auto& root : roots)
      s += "mkdir -p '" + root + "/" + group + "'\n";
    const std::string m = config.cgroup_memory + "/" + group;
    if (r.memory_bytes) {
      const std::string bytes = std::to_string(*r.memory_bytes);
      s += "echo " + bytes + " > '" + m + "/memory.limit_in_bytes'\n";
      s += "if [ -e '" + m + "/memory.memsw.limit_in_bytes' ]; then echo " + bytes + " > '" + m +
           "/memory.memsw.limit_in_bytes'; fi\n";
    }
    if (r.pids) {
      s += "echo " + std::to_string(*r.pids) + " > '" + config.cgroup_pids + "/" + group +
           "/pids.max'\n";
    }
    if (r.cpus) {
      const std::string c = config.cgroup_cpu + "/" + group;
      s += "echo 100000 > '" + c + "/cpu.cfs_period_us'\n";
      s += "echo " + std::to_string(static_cast<long long>(*r.cpus * 100000)) + " > '" + c +
           "/cpu.cfs_quota_us'\n";
    }
  }
  for (const auto& root : roots)
    s += "echo $$ > '" + root + "/" + group + "/cgroup.procs'\n";
  for (const auto& root : roots)
    script.started += "echo $$ > '" + root + "/" + leave + "cgroup.procs'\n";
  for (const auto& root : roots) {
    script.ended += "n=0; until rmdir '" + root + "/" + group +
                    "' 2>/dev/null || [ $n -ge 100 ]; do n=$((n+1)); sleep 0.02; done\n";
  }
}

/// runtime=runsc: a bundle directory of the sandbox's own (0700 under /tmp, owned by the uid
/// runsc runs as) holding the spec ($1) and a skeleton root of mount points, removed however
/// the shell ends; runsc runs rootless on it, so its sandbox and gofer processes have the
/// unprivileged uid too.
void add_runsc(Script& script, const Config& config) {
  std::string& s = script.setup;
  s += "d=$(mktemp -d /tmp/sandboxio-gvisor.XXXXXXXX)\n"
       "trap 'rm -rf \"$d\"' EXIT\n"
       "r=$d/rootfs\n"
       "mkdir -p \"$d/state\" \"$r/usr\" \"$r/proc\" \"$r/tmp\" \"$r/etc\" \"$r/dev/.sandboxio\" "
       "\"$r\"" +
       shell_quote(config.home) + "\n: > \"$r/dev/.sandboxio/agent\"\n";
  for (const auto& [name, target] : config.root_links)
    s += "ln -s " + shell_quote(target) + " \"$r/\"" + shell_quote(name) + "\n";
  for (const auto& dir : config.root_dirs)
    s += "mkdir -p \"$r/\"" + shell_quote(dir) + "\n";
  for (const auto& file : config.etc) {
    const std::string q = shell_quote(file);
    s += "if [ -d " + q + " ]; then mkdir -p \"$r\"" + q + "; else : > \"$r\"" + q + "; fi\n";
  }
  s += "printf '%s' \"$1\" > \"$d/config.json\"\n";
  if (!config.setpriv.empty()) {
    const std::string id = std::to_string(config.uid);
    s += "chown -R " + id + ":" + id + " \"$d\"\n";
  }
  std::string command;
  std::vector<std::string> words = drop_privileges(config);
  words.push_back(config.runsc);
  for (const char* flag : {"--rootless", "--network=none", "--ignore-cgroups"})
    words.emplace_back(flag);
  for (const auto& word : words)
    command += shell_quote(word) + " ";
  script.command = command + "--root \"$d/state\" run --bundle \"$d\" " + shell_quote(config.id);
  script.stderr_to_said = true;
}

}  // namespace

std::string runsc_spec(const Config& config, const CreateOptions& options) {
  JsonWriter w;
  const std::string workdir = options.workdir.empty() ? config.home : options.workdir;
  w.begin_object().key("ociVersion").value("1.0.2");
  w.key("process").begin_object().key("terminal").value(false);
  w.key("user").begin_object().key("uid").value(kSandboxUid).key("gid").value(kSandboxUid);
  w.end_object();
  w.key("args").begin_array();
  for (const auto& word : agent_argv(options))
    w.value(word);
  w.end_array();
  w.key("env").begin_array();
  w.value(std::string("PATH=") + kPath).value("HOME=" + config.home);
  w.value("LANG=C.UTF-8").value("TMPDIR=/tmp").end_array();
  w.key("cwd").value(workdir);
  // No capabilities in any set, and no way to gain one.
  w.key("capabilities").begin_object().end_object();
  w.key("noNewPrivileges").value(true).end_object();
  w.key("root").begin_object().key("path").value("rootfs").key("readonly").value(true);
  w.end_object();
  w.key("hostname").value(config.id);
  w.key("mounts").begin_array();
  auto mount = [&](std::string_view destination, std::string_view type, std::string_view source,
                   bool read_only) {
    w.begin_object().key("destination").value(destination).key("type").value(type);
    w.key("source").value(source).key("options").begin_array();
    if (type == "bind") w.value("rbind");
    w.value(read_only ? "ro" : "rw").value("nosuid").value("nodev").end_array().end_object();
  };
  mount("/proc", "proc", "proc", false);
  mount("/usr", "bind", "/usr", true);
  for (const auto& dir : config.root_dirs)
    mount("/" + dir, "bind", "/" + dir, true);
  for (const auto& file : config.etc)
    mount(file, "bind", file, true);
  mount("/tmp", "tmpfs", "tmpfs", false);
  mount(config.home, "tmpfs", "tmpfs", false);
  mount(kAgentPath, "bind", config.agent, true);
  w.end_array();
  w.key("linux").begin_object().key("namespaces").begin_array();
  for (const char* ns : {"pid", "network", "ipc", "uts", "mount"})
    w.begin_object().key("type").value(ns).end_object();
  w.end_array().end_object();
  w.end_object();
  return std::move(w).str();
}

std::vector<std::string> launch_argv(const Config& config, const CreateOptions& options) {
  const Resources& r = options.resources;
  Script script;
  if (config.cgroup_version != 0 && (r.memory_bytes || r.pids || r.cpus))
    add_cgroups(script, config, r);
  if (!config.runsc.empty()) {
    add_runsc(script, config);
    return scripted(script, {runsc_spec(config, options)});
  }
  std::vector<std::string> argv = drop_privileges(config);
  auto add = [&](std::initializer_list<std::string> items) {
    argv.insert(argv.end(), items.begin(), items.end());
  };
  add({config.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
       "--new-session", "--cap-drop", "ALL", "--clearenv", "--hostname", config.id});
  if (!config.root.empty()) {
    add({"--ro-bind", config.root, "/"});
  } else {
    add({"--ro-bind", "/usr", "/usr"});
    for (const auto& [name, target] : config.root_links)
      add({"--symlink", target, "/" + name});
    for (const auto& dir : config.root_dirs)
      add({"--ro-bind", "/" + dir, "/" + dir});
    for (const auto& file : config.etc)
      add({"--ro-bind", file, file});
  }
  add({"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", config.home});
  add({"--ro-bind", config.agent, std::string(kAgentPath)});
  if (!script.setup.empty() && r.memory_bytes) {
    // The cgroup's count of OOM kills, which the machine reads through the agent to tell an
    // out-of-memory kill from another SIGKILL.
    const std::string group = config.cgroup_memory + "/sandboxio/" + config.id;
    add({"--ro-bind",
         group + (config.cgroup_version == 2 ? "/memory.events" : "/memory.oom_control"),
         std::string(kOomEvents)});
  }
  const std::string workdir = options.workdir.empty() ? config.home : options.workdir;
  add({"--chdir", workdir, "--setenv", "PATH", kPath, "--setenv", "HOME", config.home, "--setenv",
       "LANG", "C.UTF-8", "--setenv", "TMPDIR", "/tmp"});
  const auto agent = agent_argv(options);
  argv.insert(argv.end(), agent.begin(), agent.end());
  if (script.setup.empty()) return argv;
  return scripted(script, std::move(argv));
}

CapabilitySet declared_capabilities() {
  return CapabilitySet{Capability::NetworkPolicy, Capability::Filesystem, Capability::Streaming,
                       Capability::Stdin};
}

std::unique_ptr<Machine> make_machine(Config config) {
  return std::make_unique<LocalMachine>(std::move(config));
}

}  // namespace sandboxio::local
