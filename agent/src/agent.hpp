// sandboxio-agent: the small static init that runs as PID 1 inside a sandbox and serves the
// agent protocol (sandboxio/codec/agent.hpp) on its stdin and stdout, and to bridge sessions
// on a root-only Unix socket. It starts processes,
// streams their output under the host's credit, kills whole process trees, moves files in
// chunks, and ends the sandbox when its owner's stream closes or its lifetime runs out.
// Its only network socket is the egress proxy's, on the sandbox's own loopback, when the host
// asks for it. One thread, one poll loop.
//
//   main.cpp       arguments, init duties (subreaper, signals, reaping), the poll loop
//   processes.cpp  Start, Stdin, Signal, Credit; output and exit; tree membership and kills
//   files.cpp      ReadFile, WriteFile, ListDir, Stat, MakeDir, Remove
//   contexts.cpp   code contexts: one python3 per context running the bootstrap it carries
//   user.cpp       --user: the identity commands and files take, from the image's own files
//   bridge.cpp     bridge sessions: the root-only socket, and --bridge, which relays to it
//   seccomp.cpp    --seccomp: the system-call filter of sandboxes with no runtime to set one
//   egress.cpp     EgressListen: the loopback proxy whose connections are tunnelled to the host
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/codec/agent.hpp"

namespace sandboxio::agent_main {

using Clock = std::chrono::steady_clock;
using agent::Frame;
using agent::Type;

inline constexpr std::string_view kAgentVersion = "sandboxio-agent 0.1.0";
using agent::kSocketPath;  // on a tmpfs the host mounts at its directory

/// Processes, transfers and contexts are each a session's own: they are keyed by the session
/// and the channel the session gave them, so two sessions may use the same channel numbers.
using Key = std::uint64_t;
[[nodiscard]] constexpr Key key_of(std::uint32_t session, std::uint32_t channel) {
  return (Key{session} << 32) | channel;
}
[[nodiscard]] constexpr std::uint32_t session_of(Key key) {
  return static_cast<std::uint32_t>(key >> 32);
}
[[nodiscard]] constexpr std::uint32_t channel_of(Key key) {
  return static_cast<std::uint32_t>(key);
}
/// Installs the system-call filter (seccomp.cpp) on the agent and so on everything it starts;
/// false with `error` when the kernel refuses it.
[[nodiscard]] bool install_seccomp(std::string& error);

/// Pipes the agent reads output from (and its own stdout) get this much room, so that a
/// command writes, and the agent reads, in large pieces with few wake-ups.
inline constexpr int kPipeSize = 1 << 20;
/// One read from a pipe or a file: the agent's only buffer for them.
[[nodiscard]] std::span<char> io_buffer();
/// Gives the pipe (or FIFO) at `fd` kPipeSize of room; where the kernel refuses, it keeps its own.
void widen_pipe(int fd);
/// The host-bound queue stops taking output from pipes and files past this many bytes.
inline constexpr std::size_t kOutboxHigh = std::size_t{4} << 20;
/// After a command's main process exits, how long its pipes may stay open (held by a
/// background child) before the agent stops reading them and reports the exit.
inline constexpr std::chrono::milliseconds kDrainGrace{100};

/// One peer speaking the protocol: the owner (session 0, on stdin and stdout: the container's
/// attach stream) or a bridge (a connection on the agent's Unix socket).
struct Session {
  int in_fd = -1, out_fd = -1;  // the same socket for a bridge
  bool hello = false;
  bool input_open = true;
  agent::FrameReader reader{};
  std::string outbox{};
  std::size_t outbox_sent = 0;
  bool socket = false;     // in_fd is a Unix socket: read with recvmsg, descriptors kept
  std::deque<int> passed;  // descriptors that came with its bytes, waiting for TunnelSocket
  [[nodiscard]] std::size_t queued() const { return outbox.size() - outbox_sent; }
  /// The host-bound queue is short enough to take more output.
  [[nodiscard]] bool room() const { return queued() < kOutboxHigh; }
};

struct Proc {
  Key channel = 0;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1, in_fd = -1;
  std::uint64_t credit = 0;
  std::string stdin_buf{};
  bool stdin_close = false;     // close stdin once stdin_buf is written
  std::optional<int> status{};  // waitpid's status of the main process
  std::optional<Clock::time_point> exited_at{};
  std::set<pid_t> members{};  // every process seen in its tree (the main one included)
};

struct Transfer {  // a ReadFile or WriteFile in flight
  bool reading = true;
  int fd = -1;
  std::uint64_t credit = 0;
  std::uint64_t size = 0;
  std::string path{}, temp{};
  bool failed = false;  // WriteFile: an error was reported; data is ignored until FileEnd
};
/// Ends a transfer where it stands: its file is closed, a write's temporary file removed.
void abandon(Transfer& t);

/// A cell of a code context: queued, or running when it is the first of its context.
struct Cell {
  Key channel = 0;
  std::string request{};  // what the bootstrap reads: the RunCode payload
  std::uint64_t credit = 0;
  bool done = false;  // the bootstrap said the cell ended; its output is being drained
  std::uint64_t drain_out = 0, drain_err = 0;  // bytes the pipes held when it did
  std::set<pid_t> before{};  // the context's processes when it started: an interrupt spares them
};

/// A code context: python3 running the bootstrap (agent/python/bootstrap.py), fed cells.
struct Kernel {
  agent::ContextStart spec{};  // kept for a restart
  Proc proc{};                 // python3: its pid, stdout/stderr pipes and its tree
  int req_fd = -1, evt_fd = -1;
  std::string requests{};  // bytes for req_fd not written yet
  std::string events{};    // bytes from evt_fd that do not make a whole event yet
  std::deque<Cell> cells{};
  bool sent = false;  // the first cell's request was queued for the bootstrap
  std::optional<agent::CodeDone::How> restart{};  // why it is being killed (Restarted)
  bool closing = false;                           // ContextEnd: killed for good
  std::string broken{};                           // why the agent killed it (a malformed event)
  bool fresh = false;  // python3 ended between cells and was started again
};

/// A connection a program made to the egress proxy, relayed to the host as a tunnel.
/// A pipe that carries one direction of a handed-over tunnel, socket to socket, by splice(2):
/// the bytes stay in the kernel.
struct SplicePipe {
  int read = -1, write = -1;
  std::size_t held = 0;      // bytes in it
  std::size_t capacity = 0;  // what it holds at most (the kernel's answer)
};

struct Tunnel {
  int fd = -1;
  // Handed over (agent::TunnelSocket): the upstream's socket, connected by the host.
  int upstream = -1;
  std::string to_upstream{};  // the head and replayed client bytes, written before the splice
  SplicePipe down{}, up{};    // upstream -> client, client -> upstream
  bool upstream_ended = false, upstream_shut = false;
  std::uint64_t relayed_down = 0, relayed_up = 0;  // for TunnelDone
  // Before it: the client bytes sent as TunnelData that the host has not credited yet, from
  // `replay_base` on (kept only when the host said it hands sockets over).
  std::string replay{};
  std::uint64_t replay_base = 0;
  std::uint64_t credit = agent::kTunnelWindow;  // bytes the host will still take
  std::string to_client{};                      // the host's bytes, from `sent` on not written
  std::size_t sent = 0;
  std::uint64_t unacked = 0;  // written since the last Credit we sent
  bool client_ended = false;  // EOF read: TunnelEnd sent
  bool host_ended = false;    // the host's TunnelEnd came
  bool write_shut = false;    // ... and was passed on (shutdown SHUT_WR)
  bool broken = false;        // the socket failed: TunnelClose
  [[nodiscard]] std::size_t waiting() const { return to_client.size() - sent; }
};

/// Who commands run as, and files are opened as, when the agent itself stays root.
struct Identity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups{};  // the primary group first
  std::string name{}, home{};
};

/// USER[:GROUP] (names or numbers) against the image's /etc/passwd and /etc/group.
[[nodiscard]] Result<Identity> resolve_user(const std::string& spec);
/// Makes `id` the agent's groups and fs identity (files) and HOME; false with `error` when the
/// kernel refuses (no CAP_SETUID / CAP_SETGID).
[[nodiscard]] bool take_identity(const Identity& id, std::string& error);

struct Options {
  std::optional<std::chrono::seconds> lifetime{};
  bool outlive = false;  // keep running when the owner's stream closes (until the lifetime)
  std::optional<Identity> user{};  // --user: commands run as this user, never as root
  int listen_fd = -1;  // bridge sessions are accepted here (root only), when there is one
};

/// Binds the bridge socket at `path` (its directory made root-only); -1 with `error` when it
/// cannot. Called while the agent still has root's file identity.
[[nodiscard]] int listen_for_bridges(const std::string& path, std::string& error);
/// `sandboxio-agent --bridge`: relays stdin and stdout to the agent's socket at `path`, so that
/// one `docker exec` becomes a session of the agent that is already PID 1.
[[nodiscard]] int run_bridge(const std::string& path);

class Agent {
 public:
  explicit Agent(Options options);
  /// Runs the loop until the sandbox ends; returns the agent's exit status.
  int run();

 private:
  // main.cpp
  /// Queues a frame for the session `channel` belongs to; nothing when that session ended.
  void send(Type type, Key channel, std::string_view payload = {});
  /// An Output frame of `data` for `channel`, copied once, into its session's queue.
  void send_output(Key channel, agent::StreamId stream, std::string_view data);
  /// A line for every session.
  void log(const std::string& line);
  /// Whether the session `channel` belongs to may take more output (true once it is gone, so
  /// that what its processes still write drains while they are killed).
  [[nodiscard]] bool room(Key channel) const;
  /// Every session has been told everything queued for it.
  [[nodiscard]] bool drained() const;
  void on_frame(std::uint32_t session, Frame frame);
  void accept_bridge();
  /// The session ended: what it started (commands, transfers, contexts) ends with it.
  void end_session(std::uint32_t session);
  void pump_session(std::uint32_t session, const pollfd& in, const pollfd& out);
  void on_signal(int signo);
  void reap();
  void shutdown(const char* why);
  int poll_timeout(Clock::time_point now) const;

  // processes.cpp
  struct Spawn {
    std::vector<std::string> argv{}, env{};
    std::string cwd{}, user{};
    bool stdin_open = false;
    std::vector<std::pair<int, int>> extra_fds{};  // (our fd, its number in the child)
  };
  struct Spawned {
    pid_t pid = -1;
    int out_fd = -1, err_fd = -1, in_fd = -1;
  };
  std::optional<Spawned> spawn(const Spawn& s, int& error, std::string& what);
  [[nodiscard]] bool channel_in_use(Key channel) const;
  void start(Key channel, const agent::Start& s);
  void stdin_data(Key channel, std::string data);
  void stdin_close(Key channel);
  void signal(Key channel, const agent::Signal& s);
  void credit(Key channel, std::uint32_t bytes);
  bool pump_output(Proc& p);
  void flush_stdin(Proc& p);
  void child_exited(pid_t pid, int status);
  void finish(Proc& p);
  void track_trees();
  std::set<pid_t> tree_of(Proc& p);
  void kill_tree(Proc& p, int signo, const std::set<pid_t>& spare = {});
  void kill_everything(int signo);

  // contexts.cpp
  void context_start(Key channel, agent::ContextStart spec);
  bool launch_kernel(Key channel, Kernel& k, int& error, std::string& what);
  void run_code(Key channel, const agent::RunCode& r);
  void context_end(Key channel);
  bool signal_cell(Key channel, const agent::Signal& s);
  bool credit_cell(Key channel, std::uint32_t bytes);
  void service_kernels();
  void pump_kernel(Kernel& k);
  void read_events(Kernel& k);
  void next_cell(Kernel& k);
  void flush_requests(Kernel& k);
  void kernel_exited(Key channel, Kernel& k);
  [[nodiscard]] bool cells_running() const;

  // files.cpp
  void read_file(Key channel, const agent::PathRequest& r);
  void write_file(Key channel, const agent::PathRequest& r);
  void file_data(Key channel, std::string data);
  void file_end(Key channel);
  /// A Signal on a transfer's channel: it ends there, with no further frame (a write leaves
  /// the old file as it was).
  bool cancel_transfer(Key channel);
  void list_dir(Key channel, const agent::PathRequest& r);
  void stat_path(Key channel, const agent::PathRequest& r);
  void make_dir(Key channel, const agent::PathRequest& r);
  void remove_path(Key channel, const agent::PathRequest& r);
  bool pump_read(Key channel, Transfer& t);
  void fail(Key channel, int error, const std::string& message);

  // egress.cpp
  void egress_listen(Key channel, const agent::EgressListen& request);
  /// Closes the listener and every tunnel of its session (told to the host).
  void close_proxy();
  void accept_tunnels();
  /// A frame on an agent channel (a tunnel's); false for any other channel.
  bool tunnel_frame(Key key, Frame& f);
  void pump_tunnels();
  void poll_tunnels(std::vector<pollfd>& fds) const;
  void drop_tunnel(Key key, bool tell);
  /// TunnelSocket: the tunnel continues on the upstream socket that came with the frame.
  void take_over(Key key, Tunnel& t, std::string_view payload);
  /// A handed-over tunnel's turn: both directions, spliced; false when it ended (told).
  bool relay(Key key, Tunnel& t);
  /// read(2) for a session, with descriptors kept in Session::passed (recvmsg on a socket).
  ssize_t read_session(Session& s, std::span<char> buffer);

  Options options_;
  Clock::time_point started_ = Clock::now();
  pid_t self_ = 0;
  int signal_fd_ = -1;
  std::map<std::uint32_t, Session> sessions_{};  // 0: the owner, while its stream is open
  std::uint32_t next_session_ = 1;
  bool owner_gone_ = false;
  bool ending_ = false;
  std::optional<Clock::time_point> ending_deadline_{};
  std::map<Key, Proc> procs_{};
  std::map<Key, Transfer> transfers_{};
  std::map<pid_t, Key> spawned_{};      // main pid -> channel
  std::map<Key, Kernel> kernels_{};     // by the context's channel
  std::map<pid_t, Key> kernel_pids_{};  // python3's pid -> its context's channel
  std::string python_{};                // python3's path, when the image has one
  Clock::time_point next_scan_{};
  int proxy_fd_ = -1;                // the egress proxy's listener, when a session asked
  std::uint32_t proxy_session_ = 0;  // ... and the session its tunnels belong to
  bool proxy_handover_ = false;      // ... which hands their upstream sockets over
  std::map<Key, Tunnel> tunnels_{};
  std::uint32_t next_tunnel_ = 0;
};

}  // namespace sandboxio::agent_main
