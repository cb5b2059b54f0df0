// End-to-end docker:// benchmarks, side by side in one run on the same container:
//   latency of run({"true"}): sandboxio (sync API) vs `docker exec` (CLI) vs a minimal
//     raw-socket client doing the shortest request sequence (exec create, start, inspect);
//   throughput of stdout: sandboxio stream() vs `docker exec ... > /dev/null` (CLI).
// The three latency variants are interleaved round by round so that noise hits them alike;
// the report gives medians and ratios.
//
//   sandboxio_bench_docker [--short] [--rounds N] [--mib N] [--image IMAGE] [--json FILE]
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "sandboxio/sync.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int run_shell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
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

void send_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

// One keep-alive request with a Content-Length reply; returns the body.
std::string request(int fd, const std::string& method, const std::string& path,
                    const std::string& body) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: docker\r\n";
  if (!body.empty())
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  send_all(fd, req);
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
      need = cl == std::string::npos ? 0 : std::stoul(in.substr(cl + 16));
    }
    if (in.size() >= head_end + 4 + need) break;
  }
  return head_end == std::string::npos ? std::string() : in.substr(head_end + 4, need);
}

// Creates an exec of `cmd_json` on the keep-alive connection `fd`, starts it on a connection of
// its own without Upgrade (the daemon streams until the process ends, then closes), reads all of
// it and returns the bytes read; `id` receives the exec's id.
std::uint64_t raw_exec(int fd, const std::string& container, const std::string& cmd_json,
                       std::string& id) {
  const std::string created =
      request(fd, "POST", "/v1.41/containers/" + container + "/exec",
              R"({"AttachStdout":true,"AttachStderr":true,"Cmd":)" + cmd_json + "}");
  id = created.substr(created.find("\"Id\":\"") + 6, 64);
  const int s = unix_connect();
  const std::string body = R"({"Detach":false,"Tty":false})";
  send_all(s, "POST /v1.41/exec/" + id +
                  "/start HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
                  "Content-Length: " +
                  std::to_string(body.size()) + "\r\n\r\n" + body);
  static std::vector<char> buf(256 * 1024);
  std::uint64_t total = 0;
  ssize_t n = 0;
  while ((n = ::recv(s, buf.data(), buf.size(), 0)) > 0)
    total += static_cast<std::uint64_t>(n);
  ::close(s);
  return total;
}

// The shortest sequence for run({"true"}): exec create, start, inspect.
double raw_true(const std::string& container) {
  const auto t = Clock::now();
  const int fd = unix_connect();
  std::string id;
  (void)raw_exec(fd, container, R"(["true"])", id);
  const std::string inspect = request(fd, "GET", "/v1.41/exec/" + id + "/json", "");
  ::close(fd);
  if (inspect.find("\"ExitCode\":0") == std::string::npos) std::cerr << "raw: bad exit\n";
  return ms_since(t);
}

// Reads an exec's whole output and discards it: the most a client can take from the daemon.
std::uint64_t raw_read_all(const std::string& container, const std::string& bytes) {
  const int fd = unix_connect();
  std::string id;
  const std::uint64_t total =
      raw_exec(fd, container, R"(["head","-c",")" + bytes + R"(","/dev/zero"])", id);
  ::close(fd);
  return total;
}

struct Options {
  int rounds = 30;
  std::size_t mib = 1024;
  int throughput_runs = 5;
  std::string image = "sandboxio-test/python:bookworm";
  std::string json;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--short") {
      o.rounds = 5;
      o.mib = 64;
      o.throughput_runs = 1;
    } else if (a == "--rounds") {
      o.rounds = std::stoi(next());
    } else if (a == "--mib") {
      o.mib = std::stoul(next());
    } else if (a == "--image") {
      o.image = next();
    } else if (a == "--json") {
      o.json = next();
    } else {
      std::cerr << "usage: sandboxio_bench_docker [--short] [--rounds N] [--mib N] "
                   "[--image IMAGE] [--json FILE]\n";
      return 2;
    }
  }
  if (int fd = unix_connect(); fd < 0) {
    std::cerr << "no Docker engine at /var/run/docker.sock (scripts/docker-env starts one)\n";
    return 1;
  } else {
    ::close(fd);
  }

  // The docker CLIs to compare with: the one in PATH, and Debian's docker.io client when it
  // is a different one (their speeds differ by 2x: the newer client is much faster).
  struct Cli {
    std::string name, path;
    std::vector<double> ms, mibs;
  };
  std::vector<Cli> clis;
  auto version_of = [](const std::string& path) {
    std::string v;
    if (FILE* f =
            ::popen((path + " version --format '{{.Client.Version}}' 2>/dev/null").c_str(), "r")) {
      char buf[128] = {};
      if (std::fgets(buf, sizeof buf, f)) v = buf;
      ::pclose(f);
    }
    while (!v.empty() && (v.back() == '\n' || v.back() == ' '))
      v.pop_back();
    return v;
  };
  const std::string path_version = version_of("docker");
  clis.push_back({"docker CLI " + path_version, "docker", {}, {}});
  if (::access("/usr/bin/docker", X_OK) == 0) {
    const std::string v = version_of("/usr/bin/docker");
    if (v != path_version) clis.push_back({"docker CLI " + v, "/usr/bin/docker", {}, {}});
  }

  auto sb = sandboxio::sync::Sandbox::create("docker://" + o.image);
  const std::string id = sb.id();
  // Warm up every path once.
  (void)sb.run({"true"});
  for (const auto& c : clis)
    (void)run_shell(c.path + " exec " + id + " true");
  (void)raw_true(id);

  std::vector<double> lib, raw;
  for (int r = 0; r < o.rounds; ++r) {
    auto t = Clock::now();
    if (!sb.run({"true"}).ok()) std::cerr << "sandboxio: run failed\n";
    lib.push_back(ms_since(t));
    for (auto& c : clis) {
      t = Clock::now();
      if (run_shell(c.path + " exec " + id + " true") != 0) std::cerr << c.name << ": failed\n";
      c.ms.push_back(ms_since(t));
    }
    raw.push_back(raw_true(id));
  }

  const std::string bytes = std::to_string(o.mib << 20);
  const auto expected = static_cast<std::uint64_t>(o.mib) << 20;
  std::vector<double> lib_mibs, raw_mibs;
  for (int r = 0; r < o.throughput_runs; ++r) {
    auto t = Clock::now();
    sandboxio::Command c;
    c.argv = {"head", "-c", bytes, "/dev/zero"};
    c.timeout = std::chrono::minutes(10);
    auto p = sb.stream(c);
    std::uint64_t got = 0;
    while (auto chunk = p.next())
      got += chunk->data.size();
    (void)p.wait();
    if (got != expected) std::cerr << "sandboxio: short read\n";
    lib_mibs.push_back(static_cast<double>(o.mib) / (ms_since(t) / 1000.0));
    for (auto& cli : clis) {
      t = Clock::now();
      (void)run_shell(cli.path + " exec " + id + " head -c " + bytes + " /dev/zero > /dev/null");
      cli.mibs.push_back(static_cast<double>(o.mib) / (ms_since(t) / 1000.0));
    }
    t = Clock::now();
    if (raw_read_all(id, bytes) < expected) std::cerr << "raw: short read\n";
    raw_mibs.push_back(static_cast<double>(o.mib) / (ms_since(t) / 1000.0));
  }

  const double lib_ms = median(lib), raw_ms = median(raw);
  const double lib_tp = median(lib_mibs), raw_tp = median(raw_mibs);
  std::printf(
      "docker:// end to end, image %s; medians of %d interleaved rounds (latency) and %d "
      "runs of %zu MiB (throughput)\n",
      o.image.c_str(), o.rounds, o.throughput_runs, o.mib);
  std::printf(
      "  run({\"true\"}) latency   sandboxio %7.2f ms   raw socket %7.2f ms   ratio %.3f "
      "(target <= 1.10)\n",
      lib_ms, raw_ms, lib_ms / raw_ms);
  for (const auto& c : clis) {
    std::printf("    vs %-24s %7.2f ms   ratio %.3f (target <= 0.65)\n", c.name.c_str(),
                median(c.ms), lib_ms / median(c.ms));
  }
  std::printf(
      "  stdout throughput      sandboxio %7.1f MiB/s   raw reader %7.1f MiB/s   ratio %.3f\n",
      lib_tp, raw_tp, lib_tp / raw_tp);
  for (const auto& c : clis) {
    std::printf("    vs %-24s %7.1f MiB/s   ratio %.3f (target >= 1.10)\n", c.name.c_str(),
                median(c.mibs), lib_tp / median(c.mibs));
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << "{\"rounds\":" << o.rounds << ",\"mib\":" << o.mib
      << ",\"latency_ms\":{\"sandboxio\":" << lib_ms << ",\"raw\":" << raw_ms;
    for (const auto& c : clis)
      f << ",\"" << c.name << "\":" << median(c.ms);
    f << "},\"throughput_mib_s\":{\"sandboxio\":" << lib_tp << ",\"raw\":" << raw_tp;
    for (const auto& c : clis)
      f << ",\"" << c.name << "\":" << median(c.mibs);
    f << "}}\n";
  }
  return 0;
}
