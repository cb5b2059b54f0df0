// The host side of sandboxio-agent's protocol, shared by every backend whose sandbox runs the
// agent (docker://, local://): commands, files and code contexts as agent calls on channels,
// with credit-based flow control, tree kills and the Exit that ends each command. A backend
// only gets a byte pipe to the agent (an attach stream, a socket, bubblewrap's stdio), feeds
// the frames it reads to agent_frame() and says where frames go (agent_conn()).
//
// States of the calls here:
//   command: Start on a new channel [-> Stdin, StdinClose] -> Output... (credit granted as the
//            consumer takes it) -> Exit -> Done(ExecResult); a timeout or cancel sends
//            Signal(tree, SIGKILL) and the Exit that follows carries the forced termination
//   files:   ReadFile -> Entries, FileData..., FileEnd | WriteFile, FileData..., FileEnd -> Done |
//            ListDir -> Entries... Done | Remove -> Done; any of them -> Failure (errno)
//   create_context: ContextStart -> Started -> Done(CodeContext) | Failure
//   run_code:       [no context: ContextStart, pipelined] -> RunCode -> Output..., CodeEvent...
//                   -> CodeDone -> Done(ExecResult) [-> ContextEnd of its own context]
// A cell's timeout or cancel interrupts it (Signal SIGINT: what it started is killed and
// KeyboardInterrupt raised); a cell that has not stopped kInterruptGrace later gets its
// context restarted (Signal SIGKILL), and the result says so.
//
// Egress (agent_egress.cpp): with an allow list, or in learning mode, the sandbox's env points
// HTTP(S)_PROXY at the agent's loopback proxy (EgressListen after the Welcome; the create
// completes once it listens). Each connection there is a tunnel on an agent channel, run
// through an EgressTunnel: the head is parsed and checked here, the upstream opened by the
// transport (it resolves the name, never the sandbox), bytes relayed under both sides'
// credit, and each tunnel ends in an Operation::Egress record.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <set>

#include "sandboxio/backend/core.hpp"
#include "sandboxio/backend/egress.hpp"
#include "sandboxio/backend/http_exchanges.hpp"
#include "sandboxio/codec/agent.hpp"

namespace sandboxio::backend {

/// One operation's state in a machine that may serve it through the agent.
struct AgentOpState {
  enum class Kind : std::uint8_t { Control, Create, Exec, Code } kind = Kind::Control;
  std::uint32_t channel = 0;  // through the agent: its channel
  std::chrono::milliseconds create_timeout{};
  std::uint64_t exec = 0;  // the backend's own command, when not through the agent
  std::optional<Termination> forced{};
  OutputAccount output{};
  Instant exec_started{};
  // Code: the context's channel, whether it is the call's own (ended after it), what the cell
  // returned, and whether it was interrupted (a second deadline restarts the context).
  std::uint32_t context = 0;
  bool own_context = false;
  std::vector<RichOutput> results{};
  std::optional<CodeError> error{};
  bool interrupted = false;
};

class AgentMachine : public HttpMachine<AgentOpState> {
 public:
  /// Stream output taken by its consumer: the agent gets the credit back.
  void handle_consumed(OpId id, std::size_t bytes, Instant now) override;
  void handle_connected(ConnId id, Instant now) override {
    if (egress_conn(id)) return egress_connected(id, now);
    HttpMachine::handle_connected(id, now);
  }

 protected:
  AgentMachine(std::string scheme, IsolationTier tier, std::string peer)
      : HttpMachine(std::move(scheme), tier, std::move(peer)) {}

  /// How long an interrupted cell (KeyboardInterrupt) may take to stop before its context is
  /// restarted.
  static constexpr std::chrono::nanoseconds kInterruptGrace = std::chrono::seconds(2);
  /// The most read_file() keeps in memory.
  static constexpr std::size_t kReadFileLimit = std::size_t{2} << 30;

  struct AgentCall {
    enum class Kind : std::uint8_t {
      Command,
      Read,
      Write,
      List,
      Remove,
      Context,  // ContextStart: create_context() (or a run_code's own context)
      Code,     // RunCode: a cell
      Ignore,   // what comes on it is of no interest (ContextEnd's Done)
      Probe,    // ReadFile for the machine itself (agent_probe), not for a caller
      Egress,   // EgressListen: the create waits for it
    } kind = Kind::Command;
    OpId op = 0;
    std::string path{};
    Bytes data{};
    std::vector<FileInfo> entries{};
    std::optional<std::chrono::system_clock::time_point> wall_started{};
    /// Probe: called once with the file's first kProbeLimit bytes, or nullopt when it could
    /// not be read (or the session ended).
    std::function<void(std::optional<Bytes>, Instant)> probe{};
    /// Egress: what follows once the proxy listens (or could not).
    std::function<void(Instant)> then{};
  };
  static constexpr std::size_t kProbeLimit = 64 * 1024;

  // ---- what the backend provides ----
  /// Where agent frames go now; 0 while no session is open.
  [[nodiscard]] virtual ConnId agent_conn() const = 0;
  /// agent_conn() reaches the agent itself (its socket pair, its own socket), not a relay in
  /// between (docker exec's stream): a descriptor sent on it arrives in the agent.
  [[nodiscard]] virtual bool agent_conn_direct() const { return false; }
  /// A Welcome this library speaks with arrived on the session (agent_ready_ is set).
  virtual void agent_welcomed(Instant now) = 0;
  /// The problem of the create waiting for the Welcome when the session ended first (`why`).
  [[nodiscard]] virtual Problem agent_start_problem(const std::string& why) const;
  /// A command was killed (SIGKILL) by nobody here: the backend may find out why (out of
  /// memory) and finish it later with finish_command(); false finishes it as signalled.
  virtual bool explain_kill(OpId id, ExecResult& result,
                            std::chrono::system_clock::time_point started, Instant now) {
    (void)id, (void)result, (void)started, (void)now;
    return false;
  }

  // ---- the session ----
  [[nodiscard]] bool via_agent() const { return agent_ready_ && !gone_; }
  [[nodiscard]] bool agent_python() const {
    return via_agent() && (welcome_.features & agent::kPython3) != 0;
  }
  /// Hello on the session; its Welcome completes `id` (agent_create_) through agent_welcomed.
  void agent_hello(OpId id);
  /// The agent's Welcome, kept when it speaks this library's protocol version; otherwise the
  /// problem (the caller decides what that means).
  std::optional<Problem> take_welcome(std::string_view payload);
  /// A frame from the agent.
  void agent_frame(agent::Frame frame, Instant now);
  /// The session ended (or broke with `problem`): every call ends; a create waiting for the
  /// Welcome fails with agent_start_problem().
  void agent_lost(Problem problem, Instant now);
  void agent_send(agent::Type type, std::uint32_t channel, std::string_view payload = {});

  // ---- operations through the agent ----
  void agent_start(OpId id, Command command, bool streaming, Instant now);
  void agent_kill(OpId id, Termination why, Instant now);
  void agent_file(OpId id, AgentCall::Kind kind, agent::Type type, agent::PathRequest request,
                  Instant now);
  /// write_file(): WriteFile, the content in pieces, FileEnd.
  void agent_write(OpId id, std::string path, Bytes data, Instant now);
  /// A cancelled file transfer or context start: forgotten (a read is stopped there too).
  void agent_cancel_call(OpId id, Instant now);
  /// create_context() through the agent's python3 bootstrap.
  void context_start(OpId id, Instant now);
  void code_start(OpId id, CodeRequest request, Instant now);
  void code_stop(OpId id, Termination why, Instant now);
  /// Stops what `id` runs through the agent for `why` (its timeout, a cancel): a cell is
  /// interrupted (code_stop), a command's whole tree killed (agent_kill). False when `id` runs
  /// nothing through the agent, for the backend to stop its own way.
  bool agent_stop(OpId id, Termination why, Instant now);
  /// Reads a small file in the sandbox for the machine itself (for `id`, which must be alive):
  /// `done` gets its first kProbeLimit bytes, or nullopt.
  void agent_probe(OpId id, std::string path,
                   std::function<void(std::optional<Bytes>, Instant)> done);
  /// Ends a command the way a finished one ends: cancelled, or Done with its result.
  void finish_command(OpId id, ExecResult result, Instant now);

  // ---- egress ----
  /// Upstream connections of egress tunnels are numbered from here, apart from the backend's.
  static constexpr ConnId kEgressConn = 0x4000'0000;
  /// The options a create goes on with: with an allow list (or learning), the proxy variables
  /// join the sandbox's environment (unless it sets them itself), and the Welcome is followed
  /// by EgressListen. Call before adopt().
  CreateOptions egress_setup(CreateOptions options);
  [[nodiscard]] static bool egress_conn(ConnId id) { return id >= kEgressConn; }
  /// True when this sandbox has the proxy: each new session asks for the listener with
  /// egress_listen() before it serves (the tunnels are the asking session's).
  [[nodiscard]] bool egress_wanted() const { return egress_policy_.has_value(); }
  /// EgressListen on the session agent_conn() names now; `then` runs once it listens (or
  /// could not: a warning says so, and nothing can leave).
  void egress_listen(std::function<void(Instant)> then);
  void egress_connected(ConnId id, Instant now);
  void egress_connect_failed(ConnId id, const Problem& problem, Instant now);
  /// Upstream bytes, taken as far as the agent's window allows (the rest waits: backpressure).
  std::size_t egress_bytes(ConnId id, std::string_view data, Instant now);
  void egress_eof(ConnId id, Instant now);
  /// How long an upstream may take to connect: past it, the program gets a 502 naming the
  /// timeout, and the record says so (a black-holed address would hold the tunnel until the program
  /// gave up).
  static constexpr std::chrono::seconds kEgressConnectTimeout{30};
  /// The earliest upstream connect deadline; include it in poll_deadline().
  [[nodiscard]] std::optional<Instant> egress_deadline() const;
  /// Fails the upstream connects whose deadline passed; call from handle_timeout().
  void egress_timeout(Instant now);

  agent::Welcome welcome_{};
  bool agent_ready_ = false;  // the Welcome arrived: commands and files go to the agent
  OpId agent_create_ = 0;     // the create waiting for the Welcome
  Bytes agent_stderr_{};      // the agent's (or its launcher's) last words, for messages
  /// When the sandbox's lifetime ends: a SIGKILL after it is the sandbox going away.
  std::optional<Instant> expires_at_{};
  std::map<std::uint32_t, AgentCall> calls_{};
  std::map<std::string, std::uint32_t> contexts_{};  // create_context()'s ids -> their channels

 private:
  std::uint32_t agent_call(AgentCall call);
  /// The command on `channel` has exited; when it was the last one being killed, the commands
  /// held back meanwhile start.
  void agent_killed(std::uint32_t channel);
  void agent_exit(std::uint32_t channel, const agent::Exit& exit, Instant now);
  void code_frame(std::uint32_t channel, AgentCall& call, agent::Frame& f, Instant now);
  void context_frame(std::uint32_t channel, AgentCall& call, agent::Frame& f, Instant now);
  void code_done(OpId id, std::uint32_t channel, const agent::CodeDone& done, Instant now);
  void end_context(std::uint32_t channel);
  /// The agent says a context is gone: its create_context() id no longer names it.
  void forget_context(std::uint32_t channel);

  struct HostTunnel {
    EgressTunnel tunnel;
    Instant started{};
    ConnId conn = 0;  // the upstream, once asked for
    bool connected = false;
    std::optional<Instant> connect_by{};  // while the upstream connects
    Bytes held{};  // the client's bytes the tunnel could not take yet (connecting)
    std::uint64_t agent_credit = agent::kTunnelWindow;  // bytes the agent will still take
    bool sent_end = false, got_end = false;
    bool end_passed = false;   // the program's end was given to the tunnel
    std::uint64_t used = 0;    // the client's bytes the tunnel took (credited to the agent)
    bool handed_over = false;  // the agent relays it now, on the socket connected here
  };
  void egress_frame(agent::Frame& f, Instant now);
  void egress_listened(const agent::Frame& f, AgentCall& call, Instant now);
  void egress_apply(std::uint32_t channel, EgressTunnel::Step step, Instant now);
  void egress_feed(std::uint32_t channel, Instant now);
  /// The upstream of a tunnel just connected: hands its socket to the agent when it can.
  bool egress_hand_over(std::uint32_t channel);
  void egress_finish(std::uint32_t channel, Instant now, const std::string& why = {});
  /// Every tunnel ends (the session did).
  void egress_lost(Instant now);

  std::optional<NetworkPolicy> egress_policy_{};  // set when the sandbox has the proxy
  bool egress_listening_ = false;
  /// The agent relays allowed tunnels itself, on sockets connected here (agent::TunnelSocket),
  /// when the driver passes descriptors and agent_conn() was direct as the proxy started.
  bool egress_handover_ = false;
  ConnId egress_via_ = 0;  // the session the proxy's tunnels belong to
  std::map<std::uint32_t, HostTunnel> tunnels_{};
  std::map<ConnId, std::uint32_t> egress_conns_{};
  ConnId next_egress_ = kEgressConn;
  std::set<std::uint32_t> agent_killing_{};  // commands told to die, their Exit not yet here
  std::set<std::uint32_t> held_channels_{};  // commands started meanwhile: their frames wait
  std::vector<Bytes> held_{};                // ... in order
  std::uint32_t next_channel_ = 0;
};

}  // namespace sandboxio::backend
