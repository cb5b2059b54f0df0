// sandboxio-agent: the small static init that runs as PID 1 inside a sandbox and serves the
// agent protocol (sandboxio/codec/agent.hpp) on its stdin and stdout. It starts processes,
// streams their output under the host's credit, kills whole process trees, moves files in
// chunks, and ends the sandbox when its owner's stream closes or its lifetime runs out.
// It never opens a network socket. One thread, one poll loop.
//
//   main.cpp       arguments, init duties (subreaper, signals, reaping), the poll loop
//   processes.cpp  Start, Stdin, Signal, Credit; output and exit; tree membership and kills
//   files.cpp      ReadFile, WriteFile, ListDir, Stat, MakeDir, Remove
//   contexts.cpp   code contexts: one python3 per context running the bootstrap it carries
//   user.cpp       --user: the identity commands and files take, from the image's own files
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/codec/agent.hpp"

namespace sandboxio::agent_main {

using Clock = std::chrono::steady_clock;
using agent::Frame;
using agent::Type;

inline constexpr std::string_view kAgentVersion = "sandboxio-agent 0.1.0";
/// The host-bound queue stops taking output from pipes and files past this many bytes.
inline constexpr std::size_t kOutboxHigh = std::size_t{4} << 20;
/// After a command's main process exits, how long its pipes may stay open (held by a
/// background child) before the agent stops reading them and reports the exit.
inline constexpr std::chrono::milliseconds kDrainGrace{100};

struct Proc {
  std::uint32_t channel = 0;
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

/// A cell of a code context: queued, or running when it is the first of its context.
struct Cell {
  std::uint32_t channel = 0;
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
};

class Agent {
 public:
  explicit Agent(Options options);
  /// Runs the loop until the sandbox ends; returns the agent's exit status.
  int run();

 private:
  // main.cpp
  void send(Type type, std::uint32_t channel, std::string_view payload = {});
  void log(const std::string& line);
  void on_frame(Frame frame);
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
  [[nodiscard]] bool channel_in_use(std::uint32_t channel) const;
  void start(std::uint32_t channel, const agent::Start& s);
  void stdin_data(std::uint32_t channel, std::string data);
  void stdin_close(std::uint32_t channel);
  void signal(std::uint32_t channel, const agent::Signal& s);
  void credit(std::uint32_t channel, std::uint32_t bytes);
  bool pump_output(Proc& p);
  void flush_stdin(Proc& p);
  void child_exited(pid_t pid, int status);
  void finish(Proc& p);
  void track_trees();
  std::set<pid_t> tree_of(Proc& p);
  void kill_tree(Proc& p, int signo, const std::set<pid_t>& spare = {});
  void kill_everything(int signo);

  // contexts.cpp
  void context_start(std::uint32_t channel, agent::ContextStart spec);
  bool launch_kernel(std::uint32_t channel, Kernel& k, int& error, std::string& what);
  void run_code(std::uint32_t channel, const agent::RunCode& r);
  void context_end(std::uint32_t channel);
  bool signal_cell(std::uint32_t channel, const agent::Signal& s);
  bool credit_cell(std::uint32_t channel, std::uint32_t bytes);
  void service_kernels();
  void pump_kernel(Kernel& k);
  void read_events(Kernel& k);
  void next_cell(Kernel& k);
  void flush_requests(Kernel& k);
  void kernel_exited(std::uint32_t channel, Kernel& k);
  [[nodiscard]] bool cells_running() const;

  // files.cpp
  void read_file(std::uint32_t channel, const agent::PathRequest& r);
  void write_file(std::uint32_t channel, const agent::PathRequest& r);
  void file_data(std::uint32_t channel, std::string data);
  void file_end(std::uint32_t channel);
  void list_dir(std::uint32_t channel, const agent::PathRequest& r);
  void stat_path(std::uint32_t channel, const agent::PathRequest& r);
  void make_dir(std::uint32_t channel, const agent::PathRequest& r);
  void remove_path(std::uint32_t channel, const agent::PathRequest& r);
  bool pump_read(std::uint32_t channel, Transfer& t);
  void fail(std::uint32_t channel, int error, const std::string& message);

  Options options_;
  Clock::time_point started_ = Clock::now();
  pid_t self_ = 0;
  int signal_fd_ = -1;
  bool hello_ = false;
  bool input_open_ = true;
  bool ending_ = false;
  std::optional<Clock::time_point> ending_deadline_{};
  std::string outbox_{};
  std::size_t outbox_sent_ = 0;
  agent::FrameReader reader_{};
  std::map<std::uint32_t, Proc> procs_{};
  std::map<std::uint32_t, Transfer> transfers_{};
  std::map<pid_t, std::uint32_t> spawned_{};      // main pid -> channel
  std::map<std::uint32_t, Kernel> kernels_{};     // by the context's channel
  std::map<pid_t, std::uint32_t> kernel_pids_{};  // python3's pid -> its context's channel
  std::string python_{};                          // python3's path, when the image has one
  Clock::time_point next_scan_{};
};

}  // namespace sandboxio::agent_main
