// docker:// through sandboxio-agent (?agent=on). The create uploads the agent's static binary
// into the container before start (the archive API, so remote engines work too), makes it the
// container's entry point and attaches to its stdin, stdout and stderr: that one stream is the
// owner lease and carries the agent protocol both ways (stdout demultiplexed as usual). With
// outlive_owner the agent outlives that stream, and a later connect() reaches it through a
// bridge session: one exec of `sandboxio-agent --bridge`, relayed to the agent's root-only
// socket, carries the same protocol.
// States:
//   create:  created -> PUT .../archive (the agent) -> attach (the lease) -> start
//            -> Hello on the lease -> Welcome -> Done(SandboxInfo)
//   connect: GET .../json (the agent label) -> POST .../exec (--bridge) -> POST /exec/ID/start
//            (101) -> Hello -> Welcome -> Done(SandboxInfo); no bridge session (a plain reply,
//            or the bridge ends before the Welcome) -> Done without the agent (exec path)
//   direct:  (a create, after the Welcome; a connect, from its GET .../json) the init's pid ->
//            connect /proc/PID/root/.sandboxio/run/agent.sock, its listener checked to be that
//            pid -> Hello -> Welcome -> Done; before the Welcome, any failure -> Done over the
//            attach stream (create) or a bridge exec (connect). After it, every frame goes
//            there; its end is the agent's, and so the container's.
// Commands, files and code contexts through the session are the shared AgentMachine's
// (backend/agent_machine.hpp).
// When the stream ends, the container has ended: every call fails as SandboxGone.
#include <csignal>

#include "machine.hpp"
#include "sandboxio/codec/json.hpp"

namespace sandboxio::docker::detail {

void DockerMachine::agent_welcomed(Instant now) {
  if (alive(agent_create_) && !bridge_ && may_go_direct() && direct_for_ == 0) {
    return find_direct(agent_create_, now);  // agent_create_ until that is settled
  }
  if (alive(agent_create_)) agent_serves(agent_create_, now);
}

Problem DockerMachine::agent_start_problem(const std::string& why) const {
  // An engine of another architecture cannot run the agent built for this host's.
  const bool foreign = agent_stderr_.find("exec format error") != std::string::npos;
  return Problem{errc::CreateFailed, "the agent did not answer: " + why,
                 foreign ? "This engine cannot run the agent built for this machine's "
                           "architecture: use docker://IMAGE?agent=off, or an agent built for "
                           "the engine's (SBX_AGENT)."
                         : "docker://IMAGE?agent=off runs without it; `sandboxio doctor` checks "
                           "the engine."};
}

bool DockerMachine::explain_kill(OpId id, ExecResult& result,
                                 std::chrono::system_clock::time_point started, Instant now) {
  if (!wall_at(now)) return false;
  // The kernel's out-of-memory killer, or something in the sandbox: the engine's event log
  // says which.
  query_oom(id, started, now, [this, id, r = std::move(result)](bool oom, Instant t) mutable {
    if (oom) r.termination = Termination::OutOfMemory;
    finish_command(id, std::move(r), t);
  });
  return true;
}

void DockerMachine::agent_serves(OpId id, Instant now) {
  direct_for_ = 0;
  agent_create_ = 0;
  if (alive(id)) complete(id, docker_info(SandboxState::Running), now);
}

void DockerMachine::upload_agent(OpId id, Instant now) {
  // On a read-only root the agent's directory is a volume of its own (create_body), and the
  // archive lands in it; elsewhere the archive makes the directory.
  const bool into_volume = config_.read_only;
  std::vector<tar::Entry> dirs;
  if (!into_volume) {
    tar::Entry dir;
    dir.name = std::string(kAgentDir.substr(1)) + "/";
    dir.type = FileType::Directory;
    dir.mode = 0755;
    dirs.push_back(std::move(dir));
  }
  tar::Entry file;
  file.name = std::string(kAgentPath.substr(into_volume ? kAgentDir.size() + 1 : 1));
  file.size = config_.agent_binary->size();
  file.mode = 0755;
  auto problem = put_archive(
      id, dirs, file, *config_.agent_binary,
      [this, id](Result<Reply> r, Instant t) {
        if (create_abandoned(id, t)) return;
        if (!r) {
          return remove_after_failed_start(id, "uploading the agent: " + r.problem().detail, t);
        }
        if (r.value().status != 200) {
          return remove_after_failed_start(id, "uploading the agent: " + r.value().message(), t);
        }
        attach_lease(id, t);
      },
      into_volume ? kAgentDir : std::string_view("/"));
  if (problem) remove_after_failed_start(id, "the agent's archive: " + problem->detail, now);
}

// connect() to a sandbox whose init is the agent: one exec of `sandboxio-agent --bridge` (as
// root: the agent's socket admits nobody else) relays a session to the agent that has served
// the sandbox all along, so commands, files and code contexts go through it as for the owner.
void DockerMachine::open_bridge(OpId id, Instant) {
  call(id, "POST", path("/containers/" + container_ + "/exec"),
       exec_body({std::string(kAgentPath), "--bridge"}, {}, {}, /*attach_stdin=*/true, {}, "0"),
       [this, id](Result<Reply> r, Instant t) {
         if (!alive(id)) return;
         if (!r) return void(fail(id, r.problem(), t));
         if (r.value().status == 404 || r.value().status == 409) {
           return void(fail(id, gone_problem(), t));
         }
         auto doc = json::parse(r.value().body);
         const auto exec_id = doc ? doc.value().string_at("Id") : std::nullopt;
         if (r.value().status != 201 || !exec_id) return bridge_unavailable(id, t);
         start_bridge(id, std::string(*exec_id), t);
       });
}

void DockerMachine::start_bridge(OpId id, const std::string& exec_id, Instant) {
  lease_ =
      upgrade(id, path("/exec/" + exec_id + "/start"), std::string(kExecStart),
              [this, id](Result<Reply> r, Instant t) {
                if (!alive(id)) return;
                if (!r || r.value().status != 101) {  // a plain reply: the engine did not start it
                  lease_ = 0;                         // this exchange is over: nothing to drop
                  return bridge_unavailable(id, t);
                }
                agent_hello(id);
              });
  bridge_ = true;
  config_.agent = true;  // the stream speaks the agent's protocol
}

void DockerMachine::bridge_unavailable(OpId id, Instant now) {
  // An agent that cannot take bridge sessions (it does not run as root, or an older one): the
  // exec path serves this handle, as with ?agent=off, and info() says so (no agent).
  drop_lease();
  bridge_ = false;
  config_.agent = false;
  agent_create_ = 0;
  agent_stderr_.clear();
  if (alive(id)) complete(id, docker_info(SandboxState::Running), now);
}

void DockerMachine::find_direct(OpId id, Instant) {
  direct_for_ = id;
  call(id, "GET", path("/containers/" + container_ + "/json"), {},
       [this, id](Result<Reply> r, Instant t) {
         if (!alive(id)) return;
         std::int64_t pid = 0;
         if (r && r.value().status == 200) {
           auto doc = json::parse(r.value().body);
           const json::Value* state = doc ? doc.value().find("State") : nullptr;
           pid = state ? state->int_at("Pid").value_or(0) : 0;
         }
         if (pid > 0) return open_direct(id, pid, t);
         agent_serves(id, t);
       });
}

void DockerMachine::open_direct(OpId id, std::int64_t pid, Instant) {
  direct_for_ = id;
  Endpoint socket;
  socket.kind = Endpoint::Kind::Unix;
  socket.address = "/proc/" + std::to_string(pid) + "/root" + std::string(agent::kSocketPath);
  socket.peer_pid = pid;
  direct_ = http_.start(id, socket, {agent::frame(agent::Type::Hello, 0, agent::Hello{}.encode())},
                        {}, "the agent's socket " + socket.address);
  http_.find(direct_)->upgraded = true;  // no HTTP on it: the agent's frames both ways
}

std::size_t DockerMachine::direct_bytes(std::string_view data, Instant now) {
  std::vector<agent::Frame> frames;
  direct_reader_.feed(data, [&](agent::Frame f) { frames.push_back(std::move(f)); });
  for (auto& f : frames) {
    if (f.channel != 0 || f.type != agent::Type::Welcome || direct_ready_) {
      agent_frame(std::move(f), now);
      continue;
    }
    if (take_welcome(f.payload)) {
      direct_ended(std::nullopt, now);  // not an agent this library speaks with: the other way
      return data.size();
    }
    direct_ready_ = true;
    config_.agent = true;
    if (egress_wanted()) {
      egress_listen([this, id = direct_for_](Instant t) { agent_serves(id, t); });
      continue;
    }
    agent_serves(direct_for_, now);
  }
  if (direct_ != 0 && direct_reader_.error()) direct_ended(*direct_reader_.error(), now);
  return data.size();
}

void DockerMachine::direct_ended(std::optional<Problem> malformed, Instant now) {
  if (direct_ != 0) http_.drop(direct_);
  direct_ = 0;
  direct_reader_ = agent::FrameReader{};
  if (direct_ready_) {
    direct_ready_ = false;
    if (malformed) {  // as on the attach stream: the agent and this library disagree
      agent_lost(*malformed, now);
      return fail_machine(std::move(*malformed), now);
    }
    // The agent closes a session only on a malformed frame (it says so first, and the
    // machine has failed then): otherwise its socket ends because the agent, the container's
    // init, has ended, and the container with it. The attach stream says the same a moment
    // later, through the engine.
    gone_ = true;
    return agent_lost(gone_problem(), now);
  }
  const OpId id = direct_for_;
  if (agent_ready_ || !alive(id)) return agent_serves(id, now);  // create: the attach stream
  direct_for_ = 0;
  agent_create_ = 0;
  open_bridge(id, now);  // connect: the exec's way in
}

std::size_t DockerMachine::lease_bytes(std::string_view data, Instant now) {
  if (!config_.agent) return data.size();  // the plain lease: nothing it says matters
  // The agent sends no more than the credit it was given, so the stream is always read whole:
  // a slow consumer of one command never holds up the others.
  std::vector<agent::Frame> frames;
  lease_demux_.feed(data, [&](docker::FrameType type, std::string_view piece) {
    if (type == docker::FrameType::Stdout) {
      agent_reader_.feed(piece, [&](agent::Frame f) { frames.push_back(std::move(f)); });
    } else if (agent_stderr_.size() < 4096) {
      agent_stderr_.append(piece.substr(0, 4096 - agent_stderr_.size()));
    }
  });
  for (auto& f : frames)
    agent_frame(std::move(f), now);
  if (const auto& e = lease_demux_.error() ? lease_demux_.error() : agent_reader_.error()) {
    Problem p = *e;
    drop_lease();  // the container ends with its lease
    gone_ = true;
    agent_lost(p, now);
    fail_machine(std::move(p), now);
  }
  return data.size();
}

}  // namespace sandboxio::docker::detail
