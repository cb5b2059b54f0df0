// End-to-end docker:// benchmarks: the same work done side by side, in one run, by sandboxio
// and by what users would otherwise pick: the `docker` CLI, dockerode (the most used Docker
// client on npm, pinned in bench/node; a warm, long-lived Node process) and a minimal
// raw-socket client (the shortest request sequence: the limit). Peers take turns round by
// round, so the machine's noise hits them alike; the report (scripts/bench-report) takes medians
// and ratios. "sandboxio" is the default, docker://IMAGE: commands and files through
// sandboxio-agent inside the container; "sandboxio exec path" is docker://IMAGE?agent=off, the
// daemon's exec and archive API. The CLI, dockerode and the raw client work on the exec path's
// container (one without the agent, as theirs would be). "sandboxio local://" is the same
// agent in bubblewrap on this machine (no daemon); "bwrap (a process spawn)" runs the program
// itself under the same bubblewrap command line (the same namespaces and the same uid drop),
// started fresh each time: what a sandbox per command would cost.
//
//   latency       run({"true"}) on a running sandbox
//   first_output  from nothing to the first output of a command: create, start, exec
//   code          run_code("1+1"): in a warm context through the agent, in a fresh one of its
//                 own, and as `python3 -c` (the exec path, the docker CLI)
//   stdout        N MiB of stdout read to the end (1 GiB by default)
//   file          an M MiB file written, then read back (256 MiB by default)
//   concurrent    K sandboxes each created, running a command and removed, all at once: from
//                 one thread with the Asio transport, from the blocking API with a thread each,
//                 and dockerode with Promise.all; wall time and peak memory of that process
//
//   sandboxio_bench_docker [--short] [--rounds N] [--runs N] [--mib N] [--file-mib N]
//                          [--concurrent K] [--image IMAGE] [--json FILE] [--only SCENARIO]
//   sandboxio_bench_docker --concurrent-child asio|threads K IMAGE     (one measured process)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio/io_context.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "sandboxio/async.hpp"
#include "sandboxio/codec/tar.hpp"
#include "sandboxio/local.hpp"
#include "sandboxio/sync.hpp"

namespace {

using namespace sandboxio::bench;

// ---- egress: a web server on this machine's loopback that answers every GET with `size`
// bytes (the bench's peer for downloads through the agent's proxy) ----
class Blob {
 public:
  explicit Blob(std::size_t size) : body_(size, 'e') {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 8) != 0)
      throw std::runtime_error("the egress bench's server cannot listen");
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (int c; (c = ::accept(fd_, nullptr, nullptr)) >= 0; ::close(c)) {
        std::string head;
        char buf[4096];
        while (head.find("\r\n\r\n") == std::string::npos) {
          const ssize_t n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0) break;
          head.append(buf, static_cast<std::size_t>(n));
        }
        const std::string reply =
            "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body_.size()) +
            "\r\nConnection: close\r\n\r\n";
        (void)::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
        for (std::string_view rest = body_; !rest.empty();) {
          const ssize_t n = ::send(c, rest.data(), rest.size(), MSG_NOSIGNAL);
          if (n <= 0) break;
          rest.remove_prefix(static_cast<std::size_t>(n));
        }
      }
    });
  }
  ~Blob() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  [[nodiscard]] int port() const { return port_; }

 private:
  std::string body_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// ---- egress: the least any two-hop relay costs here: a loopback listener whose connections
// are relayed to `to_port` kernel to kernel (splice(2) through a 1 MiB pipe each way, a thread
// a direction, blocking), with no sandbox, no policy and no protocol. The agent's handed-over
// tunnels move bytes the same way; this is their floor on this machine. ----
class SpliceRelay {
 public:
  explicit SpliceRelay(int to_port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 8) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error("the egress bench's relay cannot listen");
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, to_port] {
      for (int client; (client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) {
        const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        to.sin_port = htons(static_cast<std::uint16_t>(to_port));
        if (::connect(upstream, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
          ::close(client);
          ::close(upstream);
          continue;
        }
        std::thread down([=] { pump(upstream, client); });
        pump(client, upstream);
        down.join();
        ::close(client);
        ::close(upstream);
      }
    });
  }
  ~SpliceRelay() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  [[nodiscard]] int port() const { return port_; }

 private:
  static void pump(int from, int to) {
    int pipe[2];
    if (::pipe2(pipe, O_CLOEXEC) != 0) return;
    (void)::fcntl(pipe[1], F_SETPIPE_SZ, 1 << 20);
    for (;;) {
      ssize_t n = ::splice(from, nullptr, pipe[1], nullptr, 1 << 20, SPLICE_F_MOVE);
      if (n <= 0) break;
      while (n > 0) {
        const ssize_t w =
            ::splice(pipe[0], nullptr, to, nullptr, static_cast<std::size_t>(n), SPLICE_F_MOVE);
        if (w <= 0) break;
        n -= w;
      }
      if (n > 0) break;
    }
    ::shutdown(to, SHUT_WR);
    ::close(pipe[0]);
    ::close(pipe[1]);
  }
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// ---- bubblewrap alone: local://'s launcher with PROGRAM in place of the agent ----
std::string bwrap_command(const std::string& program) {
  auto dsn = sandboxio::parse_dsn("local://");
  auto config = sandboxio::local::config_for(dsn.value());
  if (!config) return {};
  const auto argv = sandboxio::local::launch_argv(config.value(), {});
  std::string command;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (i > 0 && argv[i] == sandboxio::local::kAgentPath && argv[i - 1] != config.value().agent)
      break;
    command += "'" + argv[i] + "' ";
  }
  return command + program;
}

// ---- the raw-socket client: what the shortest possible client does ----
int unix_connect() {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, "/var/run/docker.sock");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, std::string_view s) {
  std::size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

std::string head_of(const std::string& method, const std::string& path, std::size_t body,
                    const char* type = "application/json") {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: docker\r\n";
  if (body != 0)
    req += std::string("Content-Type: ") + type + "\r\nContent-Length: " + std::to_string(body) +
           "\r\n";
  return req + "\r\n";
}

// One keep-alive request with a Content-Length (or empty) reply; returns the body.
std::string request(int fd, const std::string& method, const std::string& path,
                    std::string_view body, const char* type = "application/json") {
  send_all(fd, head_of(method, path, body.size(), type));
  send_all(fd, body);
  std::string in;
  char buf[8192];
  std::size_t head_end = std::string::npos, need = 0;
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<std::size_t>(n));
    if (head_end == std::string::npos) {
      head_end = in.find("\r\n\r\n");
      if (head_end == std::string::npos) continue;
      const auto cl = in.find("Content-Length: ");
      need = cl == std::string::npos || cl > head_end ? 0 : std::stoul(in.substr(cl + 16));
    }
    if (in.size() >= head_end + 4 + need) break;
  }
  return head_end == std::string::npos ? std::string() : in.substr(head_end + 4, need);
}

std::string id_in(const std::string& created) {
  const auto at = created.find("\"Id\":\"");
  return at == std::string::npos ? std::string() : created.substr(at + 6, 64);
}

// Sends a request on a connection of its own and reads the reply to its end (the daemon closes
// it): returns the bytes read; `first` runs at the first byte.
std::uint64_t read_to_end(const std::string& head, std::string_view body,
                          const std::function<void()>& first = {}) {
  const int s = unix_connect();
  send_all(s, head);
  send_all(s, body);
  static std::vector<char> buf(256 * 1024);
  std::uint64_t total = 0;
  ssize_t n = 0;
  while ((n = ::recv(s, buf.data(), buf.size(), 0)) > 0) {
    if (total == 0 && first) first();
    total += static_cast<std::uint64_t>(n);
  }
  ::close(s);
  return total;
}

// Creates an exec of `cmd_json` on the keep-alive connection `fd`, starts it on a connection of
// its own without Upgrade (the daemon streams until the process ends, then closes) and reads
// all of it; returns the bytes read; `id` receives the exec's id.
std::uint64_t raw_exec(int fd, const std::string& container, const std::string& cmd_json,
                       std::string& id, const std::function<void()>& first = {}) {
  id = id_in(request(fd, "POST", "/v1.41/containers/" + container + "/exec",
                     R"({"AttachStdout":true,"AttachStderr":true,"Cmd":)" + cmd_json + "}"));
  const std::string body = R"({"Detach":false,"Tty":false})";
  return read_to_end(head_of("POST", "/v1.41/exec/" + id + "/start", body.size()), body, first);
}

// The shortest sequence for run({"true"}): exec create, start, inspect. `steps` receives the
// milliseconds of each of the three (where the time of a run goes: the profile of the floor).
double raw_true(const std::string& container, double* steps = nullptr) {
  const auto t = Clock::now();
  const int fd = unix_connect();
  const std::string id =
      id_in(request(fd, "POST", "/v1.41/containers/" + container + "/exec",
                    R"({"AttachStdout":true,"AttachStderr":true,"Cmd":["true"]})"));
  const double created = ms_since(t);
  const std::string body = R"({"Detach":false,"Tty":false})";
  (void)read_to_end(head_of("POST", "/v1.41/exec/" + id + "/start", body.size()), body);
  const double ran = ms_since(t);
  const std::string inspect = request(fd, "GET", "/v1.41/exec/" + id + "/json", "");
  ::close(fd);
  const double total = ms_since(t);
  if (inspect.find("\"ExitCode\":0") == std::string::npos) std::cerr << "raw: bad exit\n";
  if (steps) {
    steps[0] = created;
    steps[1] = ran - created;
    steps[2] = total - ran;
  }
  return total;
}

// Create, start, exec `echo ready`: milliseconds to its first output byte.
double raw_first_output(const std::string& image) {
  const auto t = Clock::now();
  const int fd = unix_connect();
  const std::string id =
      id_in(request(fd, "POST", "/v1.41/containers/create",
                    R"({"Image":")" + image +
                        R"(","Cmd":["sleep","infinity"],"Labels":{"io.sandboxio.bench":"raw"},)"
                        R"("HostConfig":{"NetworkMode":"none","AutoRemove":true}})"));
  (void)request(fd, "POST", "/v1.41/containers/" + id + "/start", "");
  double ms = 0;
  std::string exec;
  (void)raw_exec(fd, id, R"(["echo","ready"])", exec, [&] { ms = ms_since(t); });
  (void)request(fd, "DELETE", "/v1.41/containers/" + id + "?force=1", "");
  ::close(fd);
  return ms;
}

std::uint64_t raw_read_all(const std::string& container, std::uint64_t bytes) {
  const int fd = unix_connect();
  std::string id;
  const std::uint64_t total = raw_exec(
      fd, container, R"(["head","-c",")" + std::to_string(bytes) + R"(","/dev/zero"])", id);
  ::close(fd);
  return total;
}

std::string tar_of(const std::string& name, const std::string& content) {
  sandboxio::tar::Entry e;
  e.name = name;
  e.size = content.size();
  e.mode = 0644;
  std::string out = sandboxio::tar::header(e).value();
  out += content;
  out += sandboxio::tar::padding(content.size());
  out += sandboxio::tar::end();
  return out;
}

// PUT the archive, then GET it back: {write ms, read ms}.
std::pair<double, double> raw_file(const std::string& container, const std::string& content) {
  const std::string body = tar_of("bench.bin", content);
  auto t = Clock::now();
  const int fd = unix_connect();
  (void)request(fd, "PUT", "/v1.41/containers/" + container + "/archive?path=%2Ftmp", body,
                "application/x-tar");
  ::close(fd);
  const double write_ms = ms_since(t);
  t = Clock::now();
  const std::uint64_t got = read_to_end(
      "GET /v1.41/containers/" + container +
          "/archive?path=%2Ftmp%2Fbench.bin HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n",
      {});
  const double read_ms = ms_since(t);
  if (got < content.size()) std::cerr << "raw: short file read\n";
  return {write_ms, read_ms};
}

std::string peer_script() {
  return std::string(SBX_SOURCE_DIR) + "/bench/node/dockerode_peer.mjs";
}

bool dockerode_available() {
  return ::access((std::string(SBX_SOURCE_DIR) + "/bench/node/node_modules/dockerode").c_str(),
                  R_OK) == 0 &&
         run_shell("node --version >/dev/null 2>&1") == 0;
}

std::string python_peer_script() {
  return std::string(SBX_SOURCE_DIR) + "/bench/python/peer.py";
}

bool python_available() {
  return std::string(SBX_PYTHON_PACKAGE_DIR).size() > 0 &&
         run_shell("PYTHONPATH=" SBX_PYTHON_PACKAGE_DIR " " SBX_PYTHON
                   " -c 'import sandboxio' >/dev/null 2>&1") == 0;
}

// ---- the concurrent scenario, each in a process of its own (its peak memory is its own) ----
constexpr const char* kConcurrentCommand = "echo ready";

int concurrent_child(const std::string& mode, int n, const std::string& image) {
  const std::string dsn = "docker://" + image;
  std::atomic<int> ok{0};
  const auto t = Clock::now();
  if (mode == "threads") {
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&] {
        try {
          auto sb = sandboxio::sync::Sandbox::create(dsn);
          if (sb.run({"sh", "-c", kConcurrentCommand}).stdout_bytes == "ready\n") ++ok;
        } catch (const std::exception& e) {
          std::cerr << "threads: " << e.what() << "\n";
        }
      });
    }
    for (auto& th : threads)
      th.join();
  } else {
    ok = concurrent_asio(n, dsn, {"sh", "-c", kConcurrentCommand});
  }
  std::printf("{\"wall_ms\":%.1f,\"peak_rss_kib\":%ld,\"ok\":%d}\n", ms_since(t), peak_rss_kib(),
              ok.load());
  return ok == n ? 0 : 1;
}

struct Options {
  int rounds = 30;           // latency rounds
  int runs = 5;              // runs of every other scenario
  std::uint64_t mib = 1024;  // stdout scenario
  std::uint64_t file_mib = 256;
  int concurrent = 100;
  std::string image = "sandboxio-test/python:bookworm";
  std::string json;
  std::string only;  // one scenario (for profiling), or all
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--concurrent-child" && i + 3 < argc) {
      return concurrent_child(argv[i + 1], std::stoi(argv[i + 2]), argv[i + 3]);
    } else if (a == "--short") {
      o.rounds = 5;
      o.runs = 1;
      o.mib = 64;
      o.file_mib = 16;
      o.concurrent = 4;
    } else if (a == "--rounds") {
      o.rounds = std::stoi(next());
    } else if (a == "--runs") {
      o.runs = std::stoi(next());
    } else if (a == "--mib") {
      o.mib = std::stoull(next());
    } else if (a == "--file-mib") {
      o.file_mib = std::stoull(next());
    } else if (a == "--concurrent") {
      o.concurrent = std::stoi(next());
    } else if (a == "--image") {
      o.image = next();
    } else if (a == "--json") {
      o.json = next();
    } else if (a == "--only") {
      o.only = next();
    } else {
      std::cerr
          << "usage: sandboxio_bench_docker [--short] [--rounds N] [--runs N] [--mib N] "
             "[--file-mib N] [--concurrent K] [--image IMAGE] [--json FILE] [--only SCENARIO]\n";
      return 2;
    }
  }
  if (int fd = unix_connect(); fd < 0) {
    std::cerr << "no Docker engine at /var/run/docker.sock (scripts/docker-env starts one)\n";
    return 1;
  } else {
    ::close(fd);
  }

  std::map<std::string, std::string> versions;
  versions["docker engine"] = shell_output("docker version --format '{{.Server.Version}}'");
  versions["docker CLI"] = shell_output("docker version --format '{{.Client.Version}}'");
  std::unique_ptr<NodePeer> node;
  if (dockerode_available()) {
    node = NodePeer::start({"node", peer_script()});
    versions["dockerode"] = shell_output("node -p \"require('" + std::string(SBX_SOURCE_DIR) +
                                         "/bench/node/node_modules/dockerode/package.json')"
                                         ".version\"");
    versions["node"] = shell_output("node --version");
  } else {
    std::cerr << "*** dockerode is not installed (npm ci in bench/node): its column is empty ***\n";
  }
  // sandboxio from Python (python/): the same engine through the extension, sync and asyncio.
  std::unique_ptr<NodePeer> python;
  if (python_available()) {
    python = NodePeer::start(
        {"env", "PYTHONPATH=" SBX_PYTHON_PACKAGE_DIR, SBX_PYTHON, python_peer_script(), o.image});
    versions["python"] = shell_output(SBX_PYTHON " -c 'import sys; print(sys.version.split()[0])'");
  } else {
    std::cerr << "*** the Python package is not built (python3-dev, pybind11-dev): its rows are "
                 "empty ***\n";
  }
  Samples samples;
  auto want = [&o](const char* scenario) { return o.only.empty() || o.only == scenario; };
  auto node_ms = [&](const std::string& cmd, const char* key = "ms") -> std::optional<double> {
    if (!node) return std::nullopt;
    return number_in(node->call(cmd), key);
  };

  const std::string exec_dsn = "docker://" + o.image + "?agent=off";
  auto sb = sandboxio::sync::Sandbox::create(exec_dsn);
  const std::string id = sb.id();
  const std::string agent_dsn = "docker://" + o.image;
  auto sba = sandboxio::sync::Sandbox::create(agent_dsn);
  (void)sba.run({"true"});
  const std::string bwrap_true = bwrap_command("/usr/bin/true");
  std::optional<sandboxio::sync::Sandbox> sbl;
  try {
    sandboxio::CreateOptions long_lived;
    long_lived.lifetime = std::chrono::hours(1);
    sbl = sandboxio::sync::Sandbox::create("local://", long_lived);
    (void)sbl->run({"true"});
  } catch (const sandboxio::Error& e) {
    std::cerr << "*** local:// cannot run here (" << e.what() << "): its columns are empty ***\n";
  }
  // The GVISOR tier both ways: the agent under runsc with no daemon, and under dockerd's runsc
  // runtime.
  std::optional<sandboxio::sync::Sandbox> sbg, sbdg;
  const std::string docker_gvisor_dsn = agent_dsn + "?runtime=runsc";
  try {
    sandboxio::CreateOptions long_lived;
    long_lived.lifetime = std::chrono::hours(1);
    sbg = sandboxio::sync::Sandbox::create("local://?runtime=runsc", long_lived);
    (void)sbg->run({"true"});
    sbdg = sandboxio::sync::Sandbox::create(docker_gvisor_dsn);
    (void)sbdg->run({"true"});
  } catch (const sandboxio::Error& e) {
    std::cerr << "*** gVisor cannot run here (" << e.what() << "): its columns are empty ***\n";
    sbg.reset();
    sbdg.reset();
  }
  const std::string run_true_cmd = R"({"op":"run_true","container":")" + id + "\"}";
  // Warm up every path once.
  (void)sb.run({"true"});
  (void)run_shell("docker exec " + id + " true");
  (void)raw_true(id);
  (void)node_ms(run_true_cmd);

  std::cerr << "latency: " << o.rounds << " rounds\n";
  for (int r = 0; want("latency") && r < o.rounds; ++r) {
    auto t = Clock::now();
    if (!sb.run({"true"}).ok()) std::cerr << "sandboxio exec path: run failed\n";
    samples["latency_ms"]["sandboxio exec path"].push_back(ms_since(t));
    // The C++ sync API and Python's two APIs over it, in an order that rotates every round:
    // what ran just before (a docker exec's runc, still exiting on the other core) shows in a
    // round trip of a millisecond, so no peer may always come first.
    // Then each takes a burst of 10 runs in a row and gives its median: warm, each in its own
    // process, which compares the APIs rather than the processes' wake-ups.
    for (const bool burst : {false, true}) {
      const char* key = burst ? "latency_burst_ms" : "latency_ms";
      for (int k = 0; k < 3; ++k) {
        const int turn = (k + r) % 3;
        if (turn == 0) {
          std::vector<double> times;
          for (int i = 0; i < (burst ? 10 : 1); ++i) {
            t = Clock::now();
            if (!sba.run({"true"}).ok()) std::cerr << "sandboxio: run failed\n";
            times.push_back(ms_since(t));
          }
          samples[key]["sandboxio"].push_back(median(times));
        } else if (python) {
          const bool sync_turn = turn == 1;
          const char* op = sync_turn
                               ? (burst ? R"({"op":"burst_sync"})" : R"({"op":"run_true_sync"})")
                               : (burst ? R"({"op":"burst_async"})" : R"({"op":"run_true_async"})");
          if (auto ms = number_in(python->call(op), "ms"))
            samples[key]
                   [sync_turn ? "sandboxio from Python, sync" : "sandboxio from Python, asyncio"]
                       .push_back(*ms);
        }
      }
    }
    t = Clock::now();
    if (run_shell("docker exec " + id + " true") != 0) std::cerr << "docker CLI: failed\n";
    samples["latency_ms"]["docker CLI"].push_back(ms_since(t));
    double steps[3] = {};
    samples["latency_ms"]["raw socket"].push_back(raw_true(id, steps));
    samples["raw_run_steps_ms"]["exec create"].push_back(steps[0]);
    samples["raw_run_steps_ms"]["exec start (runc runs it)"].push_back(steps[1]);
    samples["raw_run_steps_ms"]["exec inspect"].push_back(steps[2]);
    if (auto ms = node_ms(run_true_cmd)) samples["latency_ms"]["dockerode"].push_back(*ms);
    if (sbl) {
      t = Clock::now();
      if (!sbl->run({"true"}).ok()) std::cerr << "sandboxio local://: run failed\n";
      samples["latency_ms"]["sandboxio local://"].push_back(ms_since(t));
      t = Clock::now();
      if (run_shell(bwrap_true) != 0) std::cerr << "bwrap: failed\n";
      samples["latency_ms"]["bwrap (a process spawn)"].push_back(ms_since(t));
    }
    if (sbg) {
      t = Clock::now();
      if (!sbg->run({"true"}).ok()) std::cerr << "sandboxio local:// gVisor: run failed\n";
      samples["latency_ms"]["sandboxio local:// gVisor"].push_back(ms_since(t));
      t = Clock::now();
      if (!sbdg->run({"true"}).ok()) std::cerr << "sandboxio docker:// gVisor: run failed\n";
      samples["latency_ms"]["sandboxio docker:// gVisor"].push_back(ms_since(t));
    }
  }

  std::cerr << "first output: " << o.runs << " runs\n";
  for (int r = 0; want("first_output") && r < o.runs; ++r) {
    // Removal is not timed (the others remove after their clock stops too).
    samples["first_output_ms"]["sandboxio exec path"].push_back(sandboxio_first_output(exec_dsn));
    samples["first_output_ms"]["sandboxio"].push_back(sandboxio_first_output(agent_dsn));
    const auto t = Clock::now();
    const std::string cid =
        shell_output("docker run -d --rm --network none --label io.sandboxio.bench=cli " + o.image +
                     " sleep infinity");
    (void)run_shell("docker exec " + cid + " echo ready >/dev/null");
    samples["first_output_ms"]["docker CLI"].push_back(ms_since(t));
    (void)run_shell("docker rm -f " + cid + " >/dev/null");
    samples["first_output_ms"]["raw socket"].push_back(raw_first_output(o.image));
    if (auto ms = node_ms(R"({"op":"first_output","image":")" + o.image + "\"}"))
      samples["first_output_ms"]["dockerode"].push_back(*ms);
    if (sbl) {
      samples["first_output_ms"]["sandboxio local://"].push_back(
          sandboxio_first_output("local://"));
      const auto tb = Clock::now();
      (void)run_shell(bwrap_command("/usr/bin/echo ready >/dev/null"));
      samples["first_output_ms"]["bwrap (a process spawn)"].push_back(ms_since(tb));
    }
    if (sbg) {
      samples["first_output_ms"]["sandboxio local:// gVisor"].push_back(
          sandboxio_first_output("local://?runtime=runsc"));
      samples["first_output_ms"]["sandboxio docker:// gVisor"].push_back(
          sandboxio_first_output(docker_gvisor_dsn));
    }
  }

  std::cerr << "code: " << o.rounds << " rounds\n";
  if (want("code")) {
    const auto ctx = sba.create_context();
    sandboxio::CodeRequest warm;
    warm.code = "1+1";
    warm.context = ctx.id;
    (void)sba.run_code(warm);
    for (int r = 0; r < o.rounds; ++r) {
      auto t = Clock::now();
      if (sba.run_code(warm).results.empty()) std::cerr << "sandboxio: no value\n";
      samples["code_ms"]["sandboxio, warm context"].push_back(ms_since(t));
      t = Clock::now();
      (void)sba.run_code("1+1");
      samples["code_ms"]["sandboxio, fresh context"].push_back(ms_since(t));
      t = Clock::now();
      (void)sb.run_code("1+1");
      samples["code_ms"]["sandboxio exec path, python3 -c"].push_back(ms_since(t));
      t = Clock::now();
      (void)run_shell("docker exec " + id + " python3 -c 1+1");
      samples["code_ms"]["docker CLI, python3 -c"].push_back(ms_since(t));
    }
  }

  std::cerr << "stdout: " << o.runs << " runs of " << o.mib << " MiB\n";
  const std::uint64_t bytes = o.mib << 20;
  const double mib = static_cast<double>(o.mib);
  for (int r = 0; want("stdout") && r < o.runs; ++r) {
    sandboxio::Command c;
    c.argv = {"head", "-c", std::to_string(bytes), "/dev/zero"};
    c.timeout = std::chrono::minutes(10);
    // Streams the command's output through one sandbox and records its throughput.
    auto stream_through = [&](sandboxio::sync::Sandbox& through, const std::string& peer) {
      const auto t = Clock::now();
      auto p = through.stream(c);
      std::uint64_t got = 0;
      while (auto chunk = p.next())
        got += chunk->data.size();
      (void)p.wait();
      if (got != bytes) std::cerr << peer << ": short read\n";
      samples["stdout_mib_s"][peer].push_back(mib / (ms_since(t) / 1000.0));
    };
    stream_through(sb, "sandboxio exec path");
    stream_through(sba, "sandboxio");
    if (sbl) stream_through(*sbl, "sandboxio local://");
    auto t = Clock::now();
    (void)run_shell("docker exec " + id + " head -c " + std::to_string(bytes) +
                    " /dev/zero > /dev/null");
    samples["stdout_mib_s"]["docker CLI"].push_back(mib / (ms_since(t) / 1000.0));
    t = Clock::now();
    if (raw_read_all(id, bytes) < bytes) std::cerr << "raw: short read\n";
    samples["stdout_mib_s"]["raw socket"].push_back(mib / (ms_since(t) / 1000.0));
    if (auto ms = node_ms(R"({"op":"stdout","container":")" + id +
                          "\",\"bytes\":" + std::to_string(bytes) + "}"))
      samples["stdout_mib_s"]["dockerode"].push_back(mib / (*ms / 1000.0));
  }

  std::cerr << "file: " << o.runs << " runs of " << o.file_mib << " MiB\n";
  const std::string content(o.file_mib << 20, 'f');
  const double fmib = static_cast<double>(o.file_mib);
  const std::string local = "/tmp/sandboxio-bench-" + std::to_string(::getpid());
  { std::ofstream(local + ".in", std::ios::binary) << content; }
  auto add_file = [&](const std::string& peer, double write_ms, double read_ms) {
    add_file_sample(samples, peer, fmib, write_ms, read_ms);
  };
  for (int r = 0; want("file") && r < o.runs; ++r) {
    const auto [w, rd] = sandboxio_file(sb, content);
    add_file("sandboxio exec path", w, rd);
    const auto [aw, ard] = sandboxio_file(sba, content);
    add_file("sandboxio", aw, ard);
    auto t = Clock::now();
    (void)run_shell("docker cp " + local + ".in " + id + ":/tmp/bench.bin");
    const double cw = ms_since(t);
    t = Clock::now();
    (void)run_shell("docker cp " + id + ":/tmp/bench.bin " + local + ".out");
    add_file("docker CLI", cw, ms_since(t));
    const auto [rw, rr] = raw_file(id, content);
    add_file("raw socket", rw, rr);
    if (node) {
      if (auto times =
              file_times_in(node->call(R"({"op":"file","container":")" + id +
                                       "\",\"bytes\":" + std::to_string(content.size()) + "}")))
        add_file("dockerode", times->first, times->second);
    }
  }
  ::unlink((local + ".in").c_str());
  ::unlink((local + ".out").c_str());

  // Egress: curl downloading from this machine's loopback, on the host directly and in a
  // local:// sandbox through the agent's proxy (allowed by address; --noproxy '' keeps curl
  // from treating 127.0.0.1 as the sandbox's own).
  if (want("egress") && sbl) {
    Blob blob(o.file_mib << 20);
    SpliceRelay relay(blob.port());
    const std::string url = "http://127.0.0.1:" + std::to_string(blob.port()) + "/blob";
    const std::string relayed = "http://127.0.0.1:" + std::to_string(relay.port()) + "/blob";
    sandboxio::CreateOptions allowed;
    allowed.network =
        sandboxio::NetworkPolicy::allowing({"127.0.0.1:" + std::to_string(blob.port())});
    auto sbe = sandboxio::sync::Sandbox::create("local://", allowed);
    std::cerr << "egress: " << o.runs << " downloads of " << o.file_mib << " MiB\n";
    for (int r = 0; r < o.runs; ++r) {
      auto t = Clock::now();
      if (run_shell("curl -sSf -o /dev/null " + url) != 0)
        std::cerr << "curl on the host: failed\n";
      samples["egress_download_mib_s"]["curl on the host, direct"].push_back(
          fmib / (ms_since(t) / 1000.0));
      t = Clock::now();
      if (run_shell("curl -sSf -o /dev/null " + relayed) != 0)
        std::cerr << "curl through the splice relay: failed\n";
      samples["egress_download_mib_s"]["curl on the host, through a splice relay"].push_back(
          fmib / (ms_since(t) / 1000.0));
      t = Clock::now();
      const auto res = sbe.run({"curl", "--noproxy", "", "-sSf", "-o", "/dev/null", url});
      if (!res.ok())
        std::cerr << "curl in local:// through the proxy: " << res.stderr_bytes << "\n";
      samples["egress_download_mib_s"]["curl in local:// through the proxy"].push_back(
          fmib / (ms_since(t) / 1000.0));
    }
  }

  std::cerr << "concurrent: " << o.runs << " runs of " << o.concurrent << " sandboxes\n";
  const std::string self = shell_output("readlink -f /proc/" + std::to_string(::getpid()) + "/exe");
  const std::string k = std::to_string(o.concurrent);
  for (int r = 0; want("concurrent") && r < o.runs; ++r) {
    const std::vector<std::pair<std::string, std::string>> modes = {
        {"sandboxio asio, 1 thread", self + " --concurrent-child asio " + k + " " + o.image},
        {"sandboxio sync, thread each", self + " --concurrent-child threads " + k + " " + o.image},
        {"dockerode", node ? "node " + peer_script() + " --concurrent " + k + " " + o.image : ""},
        {"sandboxio from Python, asyncio, 1 loop",
         python ? std::string("PYTHONPATH=" SBX_PYTHON_PACKAGE_DIR " " SBX_PYTHON " ") +
                      python_peer_script() + " --concurrent " + k + " " + o.image
                : ""},
    };
    for (const auto& [name, cmd] : modes) {
      if (cmd.empty()) continue;
      if (auto m = measure_child(cmd)) {
        samples["concurrent_wall_ms"][name].push_back(m->wall_ms);
        samples["concurrent_peak_mib"][name].push_back(m->peak_mib);
      }
    }
  }

  print_medians("docker:// end to end, image " + o.image, samples);
  if (!o.json.empty()) {
    write_json(o.json,
               {{"image", "\"" + o.image + "\""},
                {"rounds", std::to_string(o.rounds)},
                {"runs", std::to_string(o.runs)},
                {"stdout_mib", std::to_string(o.mib)},
                {"file_mib", std::to_string(o.file_mib)},
                {"concurrent", std::to_string(o.concurrent)}},
               versions, samples);
  }
  return 0;
}
