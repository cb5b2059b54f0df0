// local:// on this machine: the whole contract suite through the blocking and the Asio
// transports, and through the simulated link against a simulated agent; and what its
// isolation promises, each checked from the host side: the sandbox's processes run as an
// unprivileged uid with no capabilities, under no_new_privs and a seccomp filter; read-only
// binds stay read-only and host files unwritten; a canary on the host's loopback is
// unreachable (and reachable from a control run that shares the network); a timeout kills a
// whole tree (setsid, double fork, env -i); limits it cannot enforce are refused with their
// code. Needs bubblewrap and user namespaces (scripts/deps.sh installs bubblewrap); without
// them the tests skip loudly, and fail under SBX_REQUIRE_LOCAL=1 (CI).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <csignal>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "../docker/docker_support.hpp"
#include "sandboxio/backend/identity.hpp"
#include "sandboxio/contract_gtest.hpp"
#include "sandboxio/docker.hpp"
#include "sandboxio/fake_agent.hpp"
#include "sandboxio/local.hpp"
#include "sandboxio/sim.hpp"
#include "sandboxio/sinks.hpp"
#include "sandboxio/sync.hpp"

namespace {

using namespace std::chrono_literals;
using sandboxio::contract::Target;
using sandboxio::testing::capture;

/// Whether a sandbox of `dsn` can be made here; the reason when not (asked once per DSN).
std::string unavailable(const std::string& dsn) {
  static std::map<std::string, std::string> why;
  if (auto it = why.find(dsn); it != why.end()) return it->second;
  try {
    auto sb = sandboxio::sync::Sandbox::create(dsn);
    return why[dsn] = "";
  } catch (const sandboxio::Error& e) {
    return why[dsn] = e.what();
  }
}

/// Skips loudly when `dsn` cannot run here, or fails under SBX_REQUIRE_LOCAL=1 (CI).
#define SBX_REQUIRE_DSN(dsn)                                                                   \
  do {                                                                                         \
    if (const std::string why = unavailable(dsn); !why.empty()) {                              \
      const char* req = std::getenv("SBX_REQUIRE_LOCAL");                                      \
      if (req != nullptr && std::string(req) == "1") FAIL() << dsn << " unavailable: " << why; \
      GTEST_SKIP() << "SKIPPED LOUDLY: " << dsn << " cannot run here: " << why;                \
    }                                                                                          \
  } while (0)

#define SBX_REQUIRE_LOCAL() SBX_REQUIRE_DSN("local://")
/// gVisor's runsc installed, and able to run.
#define SBX_REQUIRE_LOCAL_GVISOR()             \
  do {                                         \
    SBX_REQUIRE_LOCAL();                       \
    SBX_REQUIRE_DSN("local://?runtime=runsc"); \
  } while (0)

/// Every process on this machine: its pid and its arguments.
struct HostProcess {
  std::string pid;
  std::vector<std::string> args;
};
std::vector<HostProcess> host_processes() {
  std::vector<HostProcess> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/cmdline", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string cmdline = ss.str();
    HostProcess p{e->d_name, {}};
    std::size_t start = 0;
    for (std::size_t i = 0; i < cmdline.size(); ++i) {
      if (cmdline[i] == '\0') {
        p.args.push_back(cmdline.substr(start, i - start));
        start = i + 1;
      }
    }
    found.push_back(std::move(p));
  }
  ::closedir(proc);
  return found;
}

/// The ids of the local:// sandboxes of this process that are running: their bubblewrap
/// carries the id as the sandbox's host name; under gVisor, runsc's processes end with it.
std::vector<std::string> live_local_sandboxes() {
  std::vector<std::string> ids;
  const std::string mine = "local-" + sandboxio::backend::process_session() + "-";
  for (const auto& [pid, args] : host_processes()) {
    if (!args.empty() && args[0].find("runsc") != std::string::npos &&
        args.back().rfind(mine, 0) == 0) {
      ids.push_back(args.back());
    }
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--hostname" && args[i + 1].rfind(mine, 0) == 0 &&
          args[0].find("bwrap") != std::string::npos) {
        ids.push_back(args[i + 1]);
      }
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

/// A slow launcher (the cancel and create-timeout cases): bubblewrap behind a wait.
const std::string& slow_bwrap() {
  static const std::string path = [] {
    const std::string p = "/tmp/sbx-slow-bwrap-" + std::to_string(::getpid());
    std::ofstream(p) << "#!/bin/sh\nsleep 5\nexec bwrap \"$@\"\n";
    ::chmod(p.c_str(), 0755);
    return p;
  }();
  return path;
}

Target local_target(std::shared_ptr<sandboxio::contract::Transport> transport,
                    const std::string& options = "") {
  Target t;
  t.name = "local" + options;
  t.dsn = "local://" + options;
  t.transport = std::move(transport);
  t.alive_probe = [](const std::string& marker) {
    return std::vector<std::string>{"pgrep", "-f", "--", marker};
  };
  // Exits 0 when the sandbox has a route out; a UDP connect() sends nothing.
  t.egress_probe = {"python3", "-c",
                    "import socket; socket.socket(socket.AF_INET, "
                    "socket.SOCK_DGRAM).connect(('192.0.2.1', 9))"};
  t.fetch_probe = sandboxio::contract::python_fetch;
  t.tls_fetch_probe = sandboxio::contract::python_tls_fetch;
  t.resolve_probe = sandboxio::contract::python_resolve;
  t.live_sandboxes = live_local_sandboxes;
  // A create that takes seconds (under gVisor too: what is tested is the machine's create).
  t.slow_create_dsn = "local://?bwrap=" + slow_bwrap();
  return t;
}

// ---- local:// in virtual time: the machine and its launcher's command line as they are, and
// at the far end of the connection a simulated sandboxio-agent (fake::AgentPeer) that reads
// what bubblewrap's command line gives the agent: its id, environment, directory and lifetime.

/// The ids of the simulated sandboxes whose connection is open.
std::set<std::string>& sim_live() {
  static std::set<std::string> ids;
  return ids;
}

class SimAgent final : public sandboxio::sim::Peer {
 public:
  explicit SimAgent(const std::vector<std::string>& argv) : agent_(options_of(argv)) {
    for (std::size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == "--hostname") id_ = argv[i + 1];
    sim_live().insert(id_);
  }
  ~SimAgent() override { sim_live().erase(id_); }
  SimAgent(const SimAgent&) = delete;
  SimAgent& operator=(const SimAgent&) = delete;

  void on_bytes(std::string_view data, std::string& reply, bool& close) override {
    agent_.on_bytes(data, now(), reply, close);
  }
  std::optional<sandboxio::Instant> wake() const override { return agent_.wake(); }
  void on_wake(std::string& reply, bool& close) override { agent_.on_wake(now(), reply, close); }

 private:
  static sandboxio::fake::AgentPeerOptions options_of(const std::vector<std::string>& argv) {
    sandboxio::fake::AgentPeerOptions o;
    for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "--chdir") o.workdir = argv[i + 1];
      if (argv[i] == "--lifetime") o.lifetime = std::chrono::seconds(std::stoll(argv[i + 1]));
      if (argv[i] == "--setenv" && i + 2 < argv.size()) {
        if (argv[i + 1] == "HOME") o.home = argv[i + 2];
        o.env[argv[i + 1]] = argv[i + 2];
      }
      if (argv[i].find("sbx-slow-bwrap") != std::string::npos) o.welcome_delay = 5s;
    }
    return o;
  }

  sandboxio::fake::AgentPeer agent_;
  std::string id_;
};

Target local_sim_target() {
  Target t;
  t.name = "local (simulated link)";
  t.dsn = "local://";
  t.transport = sandboxio::contract::blocking_transport([] {
    sandboxio::sim::Config cfg;
    cfg.seed = 15;
    cfg.max_read = 4096;  // frames arrive in pieces, as from a pipe
    cfg.peers = [](const sandboxio::Endpoint& e) -> std::unique_ptr<sandboxio::sim::Peer> {
      if (e.kind != sandboxio::Endpoint::Kind::Process) return nullptr;
      return std::make_unique<SimAgent>(e.argv);
    };
    return sandboxio::sim::make_link(cfg);
  });
  t.alive_probe = [](const std::string& marker) {
    return std::vector<std::string>{"pgrep", "-f", marker};
  };
  t.egress_probe = {"curl", "-sS", "--max-time", "5", "https://example.com/"};
  t.full_python = false;  // the simulated agent's python is fake://'s subset
  t.slow_create_dsn = "local://?bwrap=" + slow_bwrap();
  t.live_sandboxes = [] { return std::vector<std::string>(sim_live().begin(), sim_live().end()); };
  return t;
}

class LocalContract : public ::testing::TestWithParam<std::tuple<std::string, std::size_t>> {
 protected:
  void SetUp() override {
    if (std::get<0>(GetParam()).find("Gvisor") != std::string::npos) {
      SBX_REQUIRE_LOCAL_GVISOR();
    } else {
      SBX_REQUIRE_LOCAL();
    }
  }
  static const Target& target(const std::string& via) {
    static const Target blocking = local_target(sandboxio::contract::blocking_transport());
    static const Target asio = local_target(sandboxio::contract::asio_transport());
    // Under gVisor (runtime=runsc): the GVISOR tier, daemonless.
    static const Target blocking_gvisor =
        local_target(sandboxio::contract::blocking_transport(), "?runtime=runsc");
    static const Target asio_gvisor =
        local_target(sandboxio::contract::asio_transport(), "?runtime=runsc");
    static const Target sim = local_sim_target();
    if (via == "Sim") return sim;
    if (via == "BlockingGvisor") return blocking_gvisor;
    if (via == "AsioGvisor") return asio_gvisor;
    return via == "Blocking" ? blocking : asio;
  }
};

TEST_P(LocalContract, Case) {
  const auto& [via, index] = GetParam();
  const auto& c = sandboxio::contract::cases()[index];
  if (auto failure = sandboxio::contract::run_case(c, target(via))) {
    FAIL() << failure->row << ": " << failure->message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Local, LocalContract,
    ::testing::Combine(::testing::Values("Blocking", "Sim", "Asio", "BlockingGvisor", "AsioGvisor"),
                       ::testing::Range<std::size_t>(0, sandboxio::contract::cases().size())),
    [](const auto& param_info) {
      return std::get<0>(param_info.param) + "_" +
             sandboxio::contract::test_name_of(std::get<1>(param_info.param));
    });

/// A field of /proc/PID/status ("Uid", "CapEff", ...), as the host sees it.
std::string status_field(const std::string& pid, const std::string& field) {
  std::ifstream in("/proc/" + pid + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return line.substr(field.size() + 1);
  }
  return {};
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t'))
    ++i;
  return s.substr(i);
}

TEST(Local, DeclaresTheContainerTierAndTheAgentThatServesIt) {
  SBX_REQUIRE_LOCAL();
  auto sb = sandboxio::sync::Sandbox::create("local://");
  const auto info = sb.info();
  EXPECT_EQ(info.backend, "local");
  EXPECT_EQ(info.tier, sandboxio::IsolationTier::Container);
  EXPECT_NE(info.agent.find("sandboxio-agent"), std::string::npos) << info.agent;
  EXPECT_NE(info.agent.find("bubblewrap"), std::string::npos) << info.agent;
  EXPECT_EQ(sb.run({"hostname"}).stdout_bytes, info.id + "\n");
  // A GVISOR minimum is refused: this is a shared-kernel namespace sandbox.
  sandboxio::CreateOptions strict;
  strict.require_isolation = sandboxio::IsolationTier::Gvisor;
  try {
    (void)sandboxio::sync::Sandbox::create("local://", strict);
    ADD_FAILURE() << "local:// claimed GVISOR";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::IsolationNotSatisfied) << e.what();
  }
}

TEST(Local, ItsProcessesRunUnprivilegedWithNoCapabilitiesUnderSeccomp) {
  SBX_REQUIRE_LOCAL();
  auto sb = sandboxio::sync::Sandbox::create("local://");
  // Inside: no capability in any set, no_new_privs, a seccomp filter (mode 2).
  const auto r = sb.run(
      {"sh", "-c",
       "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_bytes;
  for (const char* cap : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"})
    EXPECT_NE(r.stdout_bytes.find(std::string(cap) + ":\t0000000000000000"), std::string::npos)
        << r.stdout_bytes;
  EXPECT_NE(r.stdout_bytes.find("NoNewPrivs:\t1"), std::string::npos) << r.stdout_bytes;
  EXPECT_NE(r.stdout_bytes.find("Seccomp:\t2"), std::string::npos) << r.stdout_bytes;
  // The filter refuses what no capability would: io_uring_setup (425 on x86_64 and arm64),
  // which any unprivileged process may call otherwise.
  const auto uring = sb.run({"python3", "-c",
                             "import ctypes\n"
                             "libc = ctypes.CDLL(None, use_errno=True)\n"
                             "p = ctypes.create_string_buffer(120)\n"
                             "print(libc.syscall(425, 1, p), ctypes.get_errno())\n"});
  EXPECT_EQ(uring.stdout_bytes, "-1 1\n") << "io_uring_setup must fail with EPERM";
  // From the host: the process's real uid is not root; as root, it is a uid of its own.
  const std::string marker = "sbx-uid-" + std::to_string(::getpid());
  auto p = sb.stream({"sh", "-c", "echo started; sleep 60; : " + marker});
  const auto first = p.next();  // the shell is running once it has said so
  ASSERT_TRUE(first.has_value());
  // "[-]": the pattern does not match the shell that runs pgrep.
  const std::string pid =
      trim(capture("pgrep -f -- 'sbx[-]uid-" + std::to_string(::getpid()) + "' | head -1"));
  ASSERT_FALSE(pid.empty());
  std::istringstream uids(status_field(pid, "Uid"));
  unsigned long real = 0, effective = 0;
  uids >> real >> effective;
  EXPECT_NE(real, 0u);
  EXPECT_NE(effective, 0u);
  if (::geteuid() == 0) {
    EXPECT_GE(effective, 0x60000000ul) << "as root, a dedicated uid";
  } else {
    EXPECT_EQ(effective, ::geteuid());
  }
  EXPECT_EQ(trim(status_field(pid, "CapEff")), "0000000000000000");
  p.kill();
}

TEST(Local, NoDescriptorOfTheOwnerReachesTheSandbox) {
  SBX_REQUIRE_LOCAL();
  // A descriptor the owner holds open without close-on-exec, to a file the sandbox must not
  // see: the launcher is started with nothing but its socket.
  char path[] = "/tmp/sbx-host-secret-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "host-secret\n", 12), 12);
  ::fcntl(fd, F_SETFD, 0);
  auto sb = sandboxio::sync::Sandbox::create("local://");
  auto p = sb.stream({"sh", "-c", "echo started; sleep 60"});
  ASSERT_TRUE(p.next().has_value());  // the sandbox and a command in it are running
  // No process on this machine but this one holds the file open: not bubblewrap, not the
  // agent, not the command.
  std::vector<std::string> holders;
  DIR* proc = ::opendir("/proc");
  ASSERT_NE(proc, nullptr);
  while (dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || std::stoi(e->d_name) == ::getpid()) continue;
    const std::string fds = std::string("/proc/") + e->d_name + "/fd";
    DIR* d = ::opendir(fds.c_str());
    if (d == nullptr) continue;
    while (dirent* f = ::readdir(d)) {
      char target[512];
      const ssize_t n = ::readlink((fds + "/" + f->d_name).c_str(), target, sizeof target - 1);
      if (n > 0 && std::string(target, static_cast<std::size_t>(n)) == path)
        holders.push_back(e->d_name);
    }
    ::closedir(d);
  }
  ::closedir(proc);
  EXPECT_TRUE(holders.empty()) << "held open by pid " << holders.front();
  p.kill();
  ::close(fd);
  ::unlink(path);
}

TEST(Local, ReadOnlyBindsStayReadOnlyAndHostFilesUnwritten) {
  SBX_REQUIRE_LOCAL();
  // A scratch root (an unpacked "image" would look the same) with a file that root owns and
  // that everyone may write (0666): bound read-only, it stays as it is.
  char dir[] = "/tmp/sbx-local-root-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string root = dir;
  ASSERT_EQ(::chmod(root.c_str(), 0755), 0);
  for (const char* sub : {"/usr", "/proc", "/dev", "/tmp", "/etc"})
    ASSERT_EQ(::mkdir((root + sub).c_str(), 0755), 0);
  const std::string victim = root + "/etc/victim";
  { std::ofstream(victim) << "original\n"; }
  ASSERT_EQ(::chmod(victim.c_str(), 0666), 0);
  ASSERT_EQ(::mkdir((root + "/home").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((root + "/home/sandbox").c_str(), 0755), 0);
  {
    auto sb = sandboxio::sync::Sandbox::create("local://");
    // Remounting a read-only bind read-write: refused (no capability, and seccomp refuses
    // mount(2) whatever the capabilities).
    auto r = sb.run({"python3", "-c",
                     "import ctypes, os\n"
                     "libc = ctypes.CDLL(None, use_errno=True)\n"
                     "rc = libc.mount(None, b'/usr', None, 0x20 | 0x1000 | 0x20000, None)\n"
                     "print(rc, ctypes.get_errno())\n"});
    ASSERT_EQ(r.exit_code, 0) << r.stderr_bytes;
    EXPECT_EQ(r.stdout_bytes, "-1 1\n") << "mount(MS_REMOUNT|MS_BIND) must fail with EPERM";
    // Writing this machine's files through the read-only binds.
    r = sb.run(
        {"sh", "-c", "echo x >> /usr/bin/python3; echo x >> /etc/ld.so.cache; touch /usr/sbx"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.stderr_bytes.find("Read-only file system"), std::string::npos) << r.stderr_bytes;
    // A new user namespace (where it would have every capability again): refused.
    r = sb.run({"unshare", "-Ur", "true"});
    EXPECT_NE(r.exit_code, 0) << "nested user namespaces must be disabled";
  }
  {
    // On a root of its own (no programs in it: the agent needs none to move files), the 0666
    // file cannot be written: the root is bound read-only. The private /tmp is writable.
    auto sb = sandboxio::sync::Sandbox::create("local://" + root);
    sb.write_file("/tmp/ok", "fine");
    EXPECT_EQ(sb.read_file("/tmp/ok"), "fine");
    EXPECT_THROW(sb.write_file("/etc/victim", "pwned\n"), sandboxio::Error);
  }
  std::ifstream in(victim);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "original\n");
  capture("rm -rf '" + root + "'");
}

/// A TCP server on the host's loopback that counts the connections it accepts.
class Canary {
 public:
  Canary() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(::listen(fd_, 16), 0);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, -1) < 0 && errno != EINTR) return;
        (void)accepted();
      }
    });
  }
  ~Canary() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);  // wakes the poll
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  /// Connections accepted so far, those waiting in the backlog included: a client that saw its
  /// connect succeed is counted, whether or not the thread got to it yet.
  int accepted() {
    std::lock_guard lock(mu_);
    for (int c; (c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) {
      ++accepted_;
      ::close(c);
    }
    return accepted_;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::mutex mu_;
  int accepted_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// A python program that tries the canary, and says "reached" or "refused ERRNO".
std::string canary_probe(const Canary& canary) {
  return "import socket\n"
         "s = socket.socket()\n"
         "s.settimeout(5)\n"
         "try:\n"
         "    s.connect(('127.0.0.1', " +
         std::to_string(canary.port()) +
         "))\n"
         "    print('reached')\n"
         "except OSError as e:\n"
         "    print('refused', e.errno)\n";
}

/// From a sandbox of `dsn`: the canary on the host's loopback is unreachable, and names do not
/// resolve.
void expect_no_egress(const std::string& dsn, Canary& canary) {
  auto sb = sandboxio::sync::Sandbox::create(dsn);
  auto r = sb.run({"python3", "-c", canary_probe(canary)});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_bytes;
  EXPECT_EQ(r.stdout_bytes.rfind("refused", 0), 0u) << r.stdout_bytes;
  // Only lo, and names do not resolve.
  r = sb.run({"python3", "-c",
              "import socket\ntry:\n    socket.getaddrinfo('localhost.localdomain', 80)\n    "
              "print('resolved')\nexcept OSError:\n    print('no names')\n"});
  EXPECT_EQ(r.stdout_bytes, "no names\n");
  EXPECT_EQ(canary.accepted(), 0);
}

TEST(Local, EgressIsDeniedAControlRunSharingTheNetworkReachesTheCanary) {
  SBX_REQUIRE_LOCAL();
  Canary canary;
  const std::string probe = canary_probe(canary);
  expect_no_egress("local://", canary);
  // The control: the same launcher with the network shared reaches it, so the probe can.
  sandboxio::CreateOptions options;
  auto config = sandboxio::local::config_for(sandboxio::parse_dsn("local://").value()).value();
  auto argv = sandboxio::local::launch_argv(config, options);
  std::string command;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    // Up to the agent as the command (its path after anything but the --ro-bind source).
    if (argv[i] == sandboxio::local::kAgentPath && argv[i - 1] != config.agent) break;
    command += "'" + argv[i] + "' ";
    if (argv[i] == "--unshare-all") command += "--share-net ";
  }
  command += "/usr/bin/python3 -c \"$PROBE\"";
  ::setenv("PROBE", probe.c_str(), 1);
  const std::string out = capture(command);
  EXPECT_EQ(out, "reached\n") << command;
  EXPECT_EQ(canary.accepted(), 1);
}

TEST(Local, EgressRelaysLargeBodiesAndRecordsEachConnectionWithoutItsPath) {
  SBX_REQUIRE_LOCAL();
  constexpr std::size_t kBig = std::size_t{32} << 20;
  sandboxio::contract::HttpCanary canary(kBig);
  const std::string host = "canary.sandboxio.test";
  const std::string port = std::to_string(canary.port());
  auto sink = std::make_shared<sandboxio::QueueSink>();
  sandboxio::CreateOptions o;
  o.network = sandboxio::NetworkPolicy::allowing({host + ":" + port});
  o.network.pinned = {{host, "127.0.0.1"}};
  o.audit.sink = sink;
  auto sb = sandboxio::sync::Sandbox::create("local://", o);
  // 32 MiB through the tunnel (eight times both windows), under both sides' credit, byte for byte.
  auto r = sb.run(
      sandboxio::contract::python_fetch("http://" + host + ":" + port + "/big?token=s3cr3t-q"));
  ASSERT_EQ(r.exit_code, 0) << r.stderr_bytes;
  ASSERT_EQ(r.stdout_bytes.size(), canary.body().size() + kBig);
  EXPECT_EQ(r.stdout_bytes.substr(0, canary.body().size()), canary.body());
  EXPECT_EQ(r.stdout_bytes.find_first_not_of('x', canary.body().size()), std::string::npos);
  r = sb.run(sandboxio::contract::python_fetch("http://elsewhere.sandboxio.test/denied-path"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.stderr_bytes.find("403"), std::string::npos) << r.stderr_bytes;
  sb.kill();  // every connection has closed into its record
  std::vector<sandboxio::OperationRecord> egress;
  for (auto& rec : sink->drain()) {
    if (rec.operation != sandboxio::Operation::Egress) continue;
    const std::string line = sandboxio::to_json_line(rec);
    EXPECT_EQ(line.find("s3cr3t-q"), std::string::npos) << line;
    EXPECT_EQ(line.find("/big"), std::string::npos) << line;
    EXPECT_EQ(line.find("denied-path"), std::string::npos) << line;
    egress.push_back(std::move(rec));
  }
  ASSERT_EQ(egress.size(), 2u);
  const auto& allowed = egress[0].egress->allowed ? egress[0] : egress[1];
  const auto& denied = egress[0].egress->allowed ? egress[1] : egress[0];
  EXPECT_EQ(allowed.egress->host, host);
  EXPECT_EQ(std::to_string(allowed.egress->port), port);
  EXPECT_EQ(allowed.egress->method, "GET");
  EXPECT_GE(allowed.egress->bytes_in, kBig);
  // The sync API's driver passes sockets: the agent relayed it on the host's connection.
  EXPECT_TRUE(allowed.egress->handed_over);
  EXPECT_EQ(allowed.outcome, sandboxio::Outcome::Ok);
  EXPECT_FALSE(denied.egress->allowed);
  EXPECT_EQ(denied.egress->host, "elsewhere.sandboxio.test");
  EXPECT_EQ(denied.egress->port, 80);
  EXPECT_EQ(denied.error_code, static_cast<int>(sandboxio::errc::EgressDenied));
  EXPECT_EQ(denied.egress->bytes_in, 0u);
  EXPECT_EQ(canary.requests(), 1);
  EXPECT_EQ(
      sandboxio::learned_allow_list(egress),
      (std::vector<std::string>{"canary.sandboxio.test:" + port, "elsewhere.sandboxio.test:80"}));
}

/// A TCP server on loopback that reads one connection to its end and answers whether it was
/// the pattern byte i == i % 251, and how long: "ok N" or "bad at I".
class PatternSink {
 public:
  PatternSink() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 8) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error("PatternSink cannot listen");
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (int c; (c = ::accept(fd_, nullptr, nullptr)) >= 0; ::close(c)) {
        std::uint64_t count = 0;
        std::optional<std::uint64_t> bad;
        char buf[65536];
        for (ssize_t n; (n = ::recv(c, buf, sizeof buf, 0)) > 0;) {
          for (ssize_t i = 0; i < n && !bad; ++i)
            if (static_cast<unsigned char>(buf[i]) != (count + i) % 251) bad = count + i;
          count += static_cast<std::uint64_t>(n);
        }
        const std::string reply =
            bad ? "bad at " + std::to_string(*bad) : "ok " + std::to_string(count);
        (void)::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      }
    });
  }
  ~PatternSink() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  [[nodiscard]] int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

class LocalUpload : public ::testing::TestWithParam<std::string> {};

// A client that does not wait for CONNECT's answer: its request and 24 MiB go out at once, so
// the proxy holds some while the upstream connects and the agent has sent more that nobody
// took. Where the agent takes the socket over (both C++ transports), it writes those itself;
// where the library relays (gVisor, whose kernel takes no host descriptor), the library does.
// Either way the upstream gets every byte, in order.
TEST_P(LocalUpload, BytesSentBeforeTheTunnelOpenedArriveWholeAndInOrder) {
  const bool gvisor = GetParam() == "BlockingGvisor";
  const std::string dsn = gvisor ? "local://?runtime=runsc" : "local://";
  if (gvisor) {
    SBX_REQUIRE_LOCAL_GVISOR();
  } else {
    SBX_REQUIRE_LOCAL();
  }
  constexpr std::size_t kSize = std::size_t{24} << 20;
  PatternSink sink;
  const std::string target = "upload.sandboxio.test:" + std::to_string(sink.port());
  auto records = std::make_shared<sandboxio::QueueSink>();
  sandboxio::CreateOptions o;
  o.network = sandboxio::NetworkPolicy::allowing({target});
  o.network.pinned = {{"upload.sandboxio.test", "127.0.0.1"}};
  o.audit.sink = records;
  auto transport = GetParam() == "Asio" ? sandboxio::contract::asio_transport()
                                        : sandboxio::contract::blocking_transport();
  auto box = transport->create(dsn, o);
  const std::string script =
      "import os, socket, sys\n"
      "host, port = os.environ['http_proxy'].split('//')[1].rsplit(':', 1)\n"
      "target, size = sys.argv[1], int(sys.argv[2])\n"
      "body = bytes(i % 251 for i in range(251 * 4096))\n"
      "s = socket.create_connection((host, int(port)))\n"
      "s.sendall(('CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (target, target)).encode())\n"
      "sent = 0\n"
      "while sent < size:\n"
      "    n = min(len(body), size - sent)\n"
      "    s.sendall(body[:n])\n"
      "    sent += n\n"
      "s.shutdown(socket.SHUT_WR)\n"
      "reply = b''\n"
      "while True:\n"
      "    chunk = s.recv(65536)\n"
      "    if not chunk: break\n"
      "    reply += chunk\n"
      "print(reply.split(b'\\r\\n\\r\\n', 1)[1].decode())\n";
  // 251 * 4096 is a multiple of 251: each piece continues the pattern where the last ended.
  auto r = box->run({"python3", "-c", script, target, std::to_string(kSize)});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_bytes;
  EXPECT_EQ(r.stdout_bytes, "ok " + std::to_string(kSize) + "\n");
  box->kill();
  std::vector<sandboxio::OperationRecord> egress;
  for (auto& rec : records->drain())
    if (rec.operation == sandboxio::Operation::Egress) egress.push_back(std::move(rec));
  ASSERT_EQ(egress.size(), 1u);
  EXPECT_EQ(egress[0].outcome, sandboxio::Outcome::Ok) << egress[0].error_detail;
  EXPECT_EQ(egress[0].egress->bytes_out, kSize);  // counted once, whoever carried them
  EXPECT_EQ(egress[0].egress->handed_over, !gvisor);
}

INSTANTIATE_TEST_SUITE_P(Local, LocalUpload,
                         ::testing::Values("Blocking", "Asio", "BlockingGvisor"));

TEST(Local, EgressRecordsReachTheJsonLinesSinkAndABearerTokenReachesNone) {
  SBX_REQUIRE_LOCAL();
  sandboxio::contract::HttpCanary canary;
  const std::string port = std::to_string(canary.port());
  const std::string file = "/tmp/sbx-egress-records-" + std::to_string(::getpid()) + ".jsonl";
  ::unlink(file.c_str());
  {
    sandboxio::CreateOptions o;
    o.network = sandboxio::NetworkPolicy::allowing({"canary.sandboxio.test:" + port});
    o.network.pinned = {{"canary.sandboxio.test", "127.0.0.1"}};
    o.audit.sink = std::make_shared<sandboxio::JsonLinesFileSink>(file);
    auto sb = sandboxio::sync::Sandbox::create("local://", o);
    // The same request, with a bearer token in a header and in the query, to an allowed host
    // and to one that is not.
    const std::string script =
        "import os, socket, sys\n"
        "host, port = os.environ['http_proxy'].split('//')[1].split(':')\n"
        "for target in sys.argv[1:]:\n"
        "    s = socket.create_connection((host, int(port)))\n"
        "    s.sendall(('GET http://%s/api?access_token=tok-s3cr3t-77 HTTP/1.1\\r\\n'\n"
        "               'Host: %s\\r\\nAuthorization: Bearer tok-s3cr3t-77\\r\\n'\n"
        "               'Connection: close\\r\\n\\r\\n' % (target, target)).encode())\n"
        "    reply = b''\n"
        "    while True:\n"
        "        chunk = s.recv(65536)\n"
        "        if not chunk:\n"
        "            break\n"
        "        reply += chunk\n"
        "    print(reply.split(b'\\r\\n')[0].decode())\n";
    const auto r = sb.run(
        {"python3", "-c", script, "canary.sandboxio.test:" + port, "other.sandboxio.test:" + port});
    ASSERT_EQ(r.exit_code, 0) << r.stderr_bytes;
    EXPECT_EQ(r.stdout_bytes, "HTTP/1.1 200 OK\nHTTP/1.1 403 Forbidden\n");
    sb.kill();
  }
  std::ifstream in(file);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(file.c_str());
  EXPECT_EQ(all.find("tok-s3cr3t-77"), std::string::npos) << all;
  EXPECT_EQ(all.find("/api"), std::string::npos) << all;
  std::vector<std::string> egress;
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);)
    if (line.find(R"("operation":"egress")") != std::string::npos) egress.push_back(line);
  ASSERT_EQ(egress.size(), 2u) << all;
  const std::string& allowed =
      egress[0].find(R"("allowed":true)") != std::string::npos ? egress[0] : egress[1];
  const std::size_t at = allowed.find("\"bytes_in\":", allowed.find("\"egress\":"));
  ASSERT_NE(at, std::string::npos) << allowed;
  EXPECT_GE(std::stoul(allowed.substr(at + 11)), canary.body().size())
      << allowed;  // the reply: its head and the canary's body
  EXPECT_NE(all.find(R"("error_code":"SBX_E1405")"), std::string::npos) << all;
}

TEST(Local, LearningModeRefusesEverythingAndRecordsWhatWasTried) {
  SBX_REQUIRE_LOCAL();
  sandboxio::contract::HttpCanary canary;
  auto sink = std::make_shared<sandboxio::QueueSink>();
  sandboxio::CreateOptions o;
  o.network = sandboxio::NetworkPolicy::learning();
  o.network.pinned = {{"canary.sandboxio.test", "127.0.0.1"}};
  o.audit.sink = sink;
  auto sb = sandboxio::sync::Sandbox::create("local://", o);
  EXPECT_EQ(sb.info().network.describe(), "learn");
  const auto r = sb.run(sandboxio::contract::python_fetch(
      "http://canary.sandboxio.test:" + std::to_string(canary.port()) + "/"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.stderr_bytes.find("403"), std::string::npos) << r.stderr_bytes;
  sb.kill();
  EXPECT_EQ(canary.requests(), 0);  // learning lets nothing out, not even a pinned name
  EXPECT_EQ(sandboxio::learned_allow_list(sink->drain()),
            std::vector<std::string>{"canary.sandboxio.test:" + std::to_string(canary.port())});
}

/// In a sandbox of `dsn`: a command's timeout kills its whole tree.
void expect_tree_killed_on_timeout(const std::string& dsn) {
  auto sb = sandboxio::sync::Sandbox::create(dsn);
  sandboxio::Command c;
  c.argv = {"sh", "-c",
            "sleep 1001 & setsid sleep 1002 & (sleep 1003 &); env -i sleep 1004 & "
            "nohup sleep 1005 >/dev/null 2>&1 & wait"};
  c.timeout = 1500ms;
  const auto r = sb.run(c);
  EXPECT_EQ(r.termination, sandboxio::Termination::Timeout);
  const auto left = sb.run({"sh", "-c", "pgrep -f 'sleep 100[1-5]' || true"});
  EXPECT_EQ(left.stdout_bytes, "") << "survivors: " << left.stdout_bytes;
}

TEST(Local, ATimeoutKillsTheWholeTreeSetsidDoubleForkAndEnvI) {
  SBX_REQUIRE_LOCAL();
  expect_tree_killed_on_timeout("local://");
}

/// Whether local:// enforces limits here (cgroups it may make: as root).
int cgroup_version() {
  auto config = sandboxio::local::config_for(sandboxio::parse_dsn("local://").value());
  return config ? config.value().cgroup_version : 0;
}

/// In sandboxes of `dsn`: memory and pids limits hold where cgroups are writable (and `dsn` can
/// enforce them per command), and are refused with their code elsewhere; a disk limit is always
/// refused.
void expect_limits_hold_or_refused(const std::string& dsn, bool enforceable = true) {
  sandboxio::CreateOptions disk;
  disk.resources.disk_bytes = 1ull << 30;  // never: the writable places are tmpfs
  EXPECT_THROW((void)sandboxio::sync::Sandbox::create(dsn, disk), sandboxio::Error);
  for (int which = 0; which < 2; ++which) {
    sandboxio::CreateOptions options;
    if (which == 0) options.resources.memory_bytes = 64ull << 20;
    if (which == 1) options.resources.pids = 16;
    if (cgroup_version() == 0 || !enforceable) {
      try {
        (void)sandboxio::sync::Sandbox::create(dsn, options);
        ADD_FAILURE() << "a limit local:// cannot enforce here was accepted";
      } catch (const sandboxio::Error& e) {
        EXPECT_EQ(e.code(), sandboxio::errc::ResourceLimitUnsupported) << e.what();
      }
      continue;
    }
    auto sb = sandboxio::sync::Sandbox::create(dsn, options);
    EXPECT_TRUE(sb.capabilities().contains(sandboxio::Capability::ResourceCaps));
    if (which == 0) {
      // 10 MiB at a time up to 400 MiB: the kernel ends it at the limit.
      const auto r = sb.run({"python3", "-c",
                             "chunks = []\n"
                             "for i in range(40):\n"
                             "    chunks.append(bytearray(10 << 20))\n"
                             "print('survived')\n"});
      EXPECT_EQ(r.stdout_bytes, "");
      EXPECT_EQ(r.signal, SIGKILL) << "exit " << r.exit_code.value_or(-1) << ": " << r.stderr_bytes;
      EXPECT_EQ(r.termination, sandboxio::Termination::OutOfMemory);
      // A SIGKILL from inside the sandbox is not the OOM killer's.
      const auto self = sb.run({"sh", "-c", "kill -9 $$"});
      EXPECT_EQ(self.signal, SIGKILL);
      EXPECT_EQ(self.termination, sandboxio::Termination::Signalled);
      // Below the limit, all is well.
      EXPECT_EQ(sb.run({"python3", "-c", "b = bytearray(20 << 20); print('ok')"}).stdout_bytes,
                "ok\n");
    } else {
      const auto r = sb.run({"sh", "-c", "for i in $(seq 40); do sleep 5 & done 2>&1; wait"});
      EXPECT_NE(r.stdout_bytes.find("fork"), std::string::npos)
          << "forty processes under pids=16: " << r.stdout_bytes << r.stderr_bytes;
      EXPECT_EQ(sb.run({"true"}).exit_code, 0) << "the sandbox works on at its limit";
    }
    const std::string id = sb.id();
    sb.kill();
    // Its cgroups went with it.
    struct stat st {};
    const std::string group =
        (cgroup_version() == 2 ? "/sys/fs/cgroup/sandboxio/" : "/sys/fs/cgroup/memory/sandboxio/") +
        id;
    EXPECT_NE(::stat(group.c_str(), &st), 0) << group << " remains";
  }
  EXPECT_TRUE(live_local_sandboxes().empty());
}

TEST(Local, MemoryAndPidsLimitsHoldWhereCgroupsAreWritableAndAreRefusedElsewhere) {
  SBX_REQUIRE_LOCAL();
  expect_limits_hold_or_refused("local://");
}

TEST(Local, TheSandboxEndsWithItsHandleAndKillEndsItAtOnce) {
  SBX_REQUIRE_LOCAL();
  std::string id;
  {
    auto sb = sandboxio::sync::Sandbox::create("local://");
    id = sb.id();
    EXPECT_EQ(live_local_sandboxes(), std::vector<std::string>{id});
  }
  EXPECT_TRUE(live_local_sandboxes().empty());
  auto sb = sandboxio::sync::Sandbox::create("local://");
  sb.kill();
  EXPECT_TRUE(live_local_sandboxes().empty());
  std::error_code ec;
  (void)sb.run(sandboxio::Command{{"true"}}, ec);
  EXPECT_TRUE(ec);
}

TEST(Local, AsRootAnAgentInAPrivateDirectoryIsCopiedWhereTheSandboxCanRunIt) {
  SBX_REQUIRE_LOCAL();
  if (::geteuid() != 0) GTEST_SKIP() << "as a normal user the sandbox runs as that user";
  // A build tree under /root (0700): the sandbox's own uid cannot reach the agent there.
  char dir[] = "/tmp/sbx-private-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  ASSERT_EQ(::chmod(dir, 0700), 0);
  const std::string agent = std::string(dir) + "/sandboxio-agent";
  std::string built;
  for (const auto& path : sandboxio::docker::agent_search_path())
    if (built.empty() && ::access(path.c_str(), R_OK) == 0) built = path;
  ASSERT_FALSE(built.empty());
  capture("cp '" + built + "' '" + agent + "'");
  ::setenv("SBX_AGENT", agent.c_str(), 1);
  // Copies of agents built before, an hour old: /run is memory, so only the newest few stay.
  capture(
      "mkdir -p /run/sandboxio && for i in 1 2 3 4 5 6 7 8 9 10 11 12; do "
      "touch -d '1 hour ago' /run/sandboxio/agent-old-$i; done");
  auto config = sandboxio::local::config_for(sandboxio::parse_dsn("local://").value());
  ASSERT_TRUE(config) << config.problem().detail;
  EXPECT_EQ(config.value().agent.rfind("/run/sandboxio/agent-", 0), 0u) << config.value().agent;
  EXPECT_LE(std::stoi(capture("ls /run/sandboxio | grep -c '^agent-'")), 8);
  std::vector<std::string> dsns = {"local://"};
  if (unavailable("local://?runtime=runsc").empty()) dsns.push_back("local://?runtime=runsc");
  for (const auto& dsn : dsns) {
    auto sb = sandboxio::sync::Sandbox::create(dsn);
    EXPECT_EQ(sb.run({"sh", "-c", "echo served"}).stdout_bytes, "served\n") << dsn;
  }
  ::unsetenv("SBX_AGENT");
  capture("rm -rf '" + std::string(dir) + "'");
}

TEST(Local, ALauncherThatFailsSaysWhy) {
  SBX_REQUIRE_LOCAL();
  // A root that is not a directory is refused before anything starts.
  try {
    (void)sandboxio::sync::Sandbox::create("local:///nonexistent-root");
    ADD_FAILURE() << "a missing root was accepted";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::InvalidDsn) << e.what();
  }
  // A root without the mount points bubblewrap needs: its own words reach the message.
  char dir[] = "/tmp/sbx-empty-root-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  ::chmod(dir, 0755);
  try {
    (void)sandboxio::sync::Sandbox::create(std::string("local://") + dir);
    ADD_FAILURE() << "an empty root started";
  } catch (const sandboxio::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bwrap"), std::string::npos) << e.what();
  }
  ::rmdir(dir);
  // bubblewrap's words inside Docker's default container: the hint says what to change.
  const std::string masked = "/tmp/sbx-masked-proc-bwrap-" + std::to_string(::getpid());
  std::ofstream(masked) << "#!/bin/sh\necho 'bwrap: Can'\\''t mount proc on /newroot/proc: "
                           "Operation not permitted' >&2\nexit 1\n";
  ::chmod(masked.c_str(), 0755);
  try {
    (void)sandboxio::sync::Sandbox::create("local://?bwrap=" + masked);
    ADD_FAILURE() << "a bubblewrap that cannot mount proc started";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::CreateFailed) << e.what();
    EXPECT_NE(std::string(e.what()).find("Can't mount proc"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("systempaths=unconfined"), std::string::npos) << e.hint();
  }
  ::unlink(masked.c_str());
}

// ---- runtime=runsc: the agent under gVisor, daemonless and rootless ----

/// The processes on this machine whose command line mentions `word`, as {pid, uid}, but for
/// the launcher's shell (as root it is root's: it makes the bundle and the cgroups).
std::vector<std::pair<std::string, unsigned long>> processes_mentioning(const std::string& word) {
  std::vector<std::pair<std::string, unsigned long>> found;
  for (const auto& [pid, args] : host_processes()) {
    const bool mentions = std::any_of(args.begin(), args.end(), [&](const std::string& arg) {
      return arg.find(word) != std::string::npos;
    });
    if (!mentions || (!args.empty() && args[0] == "/bin/sh")) continue;
    if (status_field(pid, "State").find('Z') != std::string::npos) continue;
    std::istringstream uids(status_field(pid, "Uid"));
    unsigned long real = 0, effective = 0;
    uids >> real >> effective;
    found.emplace_back(pid, effective);
  }
  return found;
}

/// The gVisor bundles (under /tmp) that name the sandbox `id`.
std::string bundles_of(const std::string& id) {
  return capture("grep -l -- '" + id + "' /tmp/sandboxio-gvisor.*/config.json 2>/dev/null || true");
}

TEST(LocalGvisor, DeclaresGvisorWhichRequireIsolationAcceptsAndGuestsSeeGvisorsKernel) {
  SBX_REQUIRE_LOCAL_GVISOR();
  sandboxio::CreateOptions strict;
  strict.require_isolation = sandboxio::IsolationTier::Gvisor;
  auto sb = sandboxio::sync::Sandbox::create("local://?runtime=runsc", strict);
  const auto info = sb.info();
  EXPECT_EQ(info.backend, "local");
  EXPECT_EQ(info.tier, sandboxio::IsolationTier::Gvisor);
  EXPECT_NE(info.agent.find("gVisor"), std::string::npos) << info.agent;
  EXPECT_EQ(sb.run({"hostname"}).stdout_bytes, info.id + "\n");
  // The kernel the sandbox talks to is gVisor's (the Sentry), not this machine's.
  struct utsname host {};
  ASSERT_EQ(::uname(&host), 0);
  const auto r = sb.run({"uname", "-r"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_bytes;
  EXPECT_NE(r.stdout_bytes, std::string(host.release) + "\n");
  // bubblewrap is no GVISOR: the same minimum refuses plain local://.
  try {
    (void)sandboxio::sync::Sandbox::create("local://", strict);
    ADD_FAILURE() << "local:// (bubblewrap) claimed GVISOR";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::IsolationNotSatisfied) << e.what();
  }
}

TEST(LocalGvisor, EveryProcessOfItHereIsUnprivilegedAndHostFilesStayOutOfReach) {
  SBX_REQUIRE_LOCAL_GVISOR();
  auto sb = sandboxio::sync::Sandbox::create("local://?runtime=runsc");
  // Inside: nobody, no capabilities, the agent's seccomp filter.
  auto r = sb.run({"sh", "-c", "id -u; grep -E '^(CapEff|CapBnd|Seccomp):' /proc/self/status"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_bytes;
  EXPECT_EQ(r.stdout_bytes.rfind("65534\n", 0), 0u) << r.stdout_bytes;
  EXPECT_NE(r.stdout_bytes.find("CapEff:\t0000000000000000"), std::string::npos) << r.stdout_bytes;
  EXPECT_NE(r.stdout_bytes.find("CapBnd:\t0000000000000000"), std::string::npos) << r.stdout_bytes;
  EXPECT_NE(r.stdout_bytes.find("Seccomp:\t2"), std::string::npos) << r.stdout_bytes;
  // On this machine: runsc, its gofer and its sandbox (the Sentry) all run as a uid that is
  // not root (rootless), as root a dedicated one.
  const auto processes = processes_mentioning(sb.id());
  ASSERT_GE(processes.size(), 3u) << "runsc, its gofer and its sandbox";
  for (const auto& [pid, uid] : processes) {
    EXPECT_NE(uid, 0u) << "pid " << pid << " runs as root";
    if (::geteuid() == 0) {
      EXPECT_GE(uid, 0x60000000ul) << "pid " << pid;
    }
  }
  // This machine's files: read-only where bound, absent where not.
  r = sb.run({"sh", "-c",
              "echo x >> /usr/bin/python3; echo x >> /etc/ld.so.cache; touch /usr/sbx; "
              "cat /etc/shadow /etc/hostname /root/.bashrc"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.stdout_bytes, "");
  EXPECT_TRUE(r.stderr_bytes.find("Permission denied") != std::string::npos ||
              r.stderr_bytes.find("Read-only") != std::string::npos)
      << r.stderr_bytes;
  EXPECT_NE(r.stderr_bytes.find("/etc/shadow: No such file"), std::string::npos) << r.stderr_bytes;
  struct stat st {};
  EXPECT_NE(::stat("/usr/sbx", &st), 0);
  // Killed: nothing of it is left, not even its bundle.
  EXPECT_NE(bundles_of(sb.id()), "");
  sb.kill();
  EXPECT_EQ(bundles_of(sb.id()), "");
  EXPECT_TRUE(processes_mentioning(sb.id()).empty());
  EXPECT_TRUE(live_local_sandboxes().empty());
}

TEST(LocalGvisor, EgressIsDenied) {
  SBX_REQUIRE_LOCAL_GVISOR();
  Canary canary;
  expect_no_egress("local://?runtime=runsc", canary);
}

TEST(LocalGvisor, ATimeoutKillsTheWholeTree) {
  SBX_REQUIRE_LOCAL_GVISOR();
  expect_tree_killed_on_timeout("local://?runtime=runsc");
}

TEST(LocalGvisor, MemoryAndPidsLimitsAreRefused) {
  SBX_REQUIRE_LOCAL_GVISOR();
  // Under gVisor a cgroup's limit would kill the Sentry, and with it the whole sandbox: refused.
  expect_limits_hold_or_refused("local://?runtime=runsc", false);
}

TEST(LocalGvisor, ARootDirectoryIsRefusedWithItsCode) {
  SBX_REQUIRE_LOCAL_GVISOR();
  try {
    (void)sandboxio::sync::Sandbox::create("local:///tmp?runtime=runsc");
    ADD_FAILURE() << "a root directory under runsc was accepted";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::InvalidOption) << e.what();
  }
}

}  // namespace
