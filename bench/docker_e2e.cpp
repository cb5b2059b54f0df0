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

double raw_true(const std::string& container) {
  const auto t = Clock::now();
  const int fd = unix_connect();
  const std::string created =
      request(fd, "POST", "/v1.41/containers/" + container + "/exec",
              R"({"AttachStdout":true,"AttachStderr":true,"Cmd":["true"]})");
  const auto p = created.find("\"Id\":\"");
  const std::string id = created.substr(p + 6, 64);
  // start without Upgrade: the daemon streams until the process ends, then closes.
  const int s = unix_connect();
  const std::string body = R"({"Detach":false,"Tty":false})";
  send_all(s, "POST /v1.41/exec/" + id +
                  "/start HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
                  "Content-Length: " +
                  std::to_string(body.size()) + "\r\n\r\n" + body);
  char buf[8192];
  while (::recv(s, buf, sizeof buf, 0) > 0) {
  }
  ::close(s);
  const std::string inspect = request(fd, "GET", "/v1.41/exec/" + id + "/json", "");
  ::close(fd);
  if (inspect.find("\"ExitCode\":0") == std::string::npos) std::cerr << "raw: bad exit\n";
  return ms_since(t);
}

struct Options {
  int rounds = 30;
  std::size_t mib = 1024;
  int throughput_runs = 3;
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

  auto sb = sandboxio::sync::Sandbox::create("docker://" + o.image);
  const std::string id = sb.id();
  // Warm up all three paths once.
  (void)sb.run({"true"});
  (void)run_shell("docker exec " + id + " true");
  (void)raw_true(id);

  std::vector<double> lib, cli, raw;
  for (int r = 0; r < o.rounds; ++r) {
    auto t = Clock::now();
    if (!sb.run({"true"}).ok()) std::cerr << "sandboxio: run failed\n";
    lib.push_back(ms_since(t));
    t = Clock::now();
    if (run_shell("docker exec " + id + " true") != 0) std::cerr << "cli: failed\n";
    cli.push_back(ms_since(t));
    raw.push_back(raw_true(id));
  }

  const std::string bytes = std::to_string(o.mib << 20);
  std::vector<double> lib_mibs, cli_mibs;
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
    const double s1 = ms_since(t) / 1000.0;
    if (got != (static_cast<std::uint64_t>(o.mib) << 20)) std::cerr << "sandboxio: short read\n";
    lib_mibs.push_back(static_cast<double>(o.mib) / s1);
    t = Clock::now();
    (void)run_shell("docker exec " + id + " head -c " + bytes + " /dev/zero > /dev/null");
    cli_mibs.push_back(static_cast<double>(o.mib) / (ms_since(t) / 1000.0));
  }

  const double lib_ms = median(lib), cli_ms = median(cli), raw_ms = median(raw);
  const double lib_tp = median(lib_mibs), cli_tp = median(cli_mibs);
  std::printf("docker:// end to end, %d interleaved rounds, image %s\n", o.rounds, o.image.c_str());
  std::printf(
      "  run({\"true\"}) latency  sandboxio %7.2f ms | docker CLI %7.2f ms | raw socket "
      "%7.2f ms\n",
      lib_ms, cli_ms, raw_ms);
  std::printf("    ratio vs CLI %.3f (target <= 0.65)   ratio vs raw %.3f (target <= 1.10)\n",
              lib_ms / cli_ms, lib_ms / raw_ms);
  std::printf("  %zu MiB stdout          sandboxio %7.1f MiB/s | docker CLI %7.1f MiB/s\n", o.mib,
              lib_tp, cli_tp);
  std::printf("    ratio vs CLI %.3f (target >= 1.10)\n", lib_tp / cli_tp);
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << "{\"rounds\":" << o.rounds << ",\"latency_ms\":{\"sandboxio\":" << lib_ms
      << ",\"cli\":" << cli_ms << ",\"raw\":" << raw_ms
      << "},\"throughput_mib_s\":{\"mib\":" << o.mib << ",\"sandboxio\":" << lib_tp
      << ",\"cli\":" << cli_tp << "}}\n";
  }
  return 0;
}
