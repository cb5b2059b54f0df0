// sandboxio: the command line. Exit codes: 0 ok, 1 failure, 2 usage, 130 interrupted.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "sandboxio/config.hpp"
#include "sandboxio/duration.hpp"
#include "sandboxio/sync.hpp"

namespace {

volatile std::sig_atomic_t g_interrupted = 0;

struct Style {
  bool color = false;
  std::string wrap(const char* code, const std::string& text) const {
    return color ? std::string("\033[") + code + "m" + text + "\033[0m" : text;
  }
  std::string ok(const std::string& t) const { return wrap("32", t); }
  std::string bad(const std::string& t) const { return wrap("31", t); }
  std::string dim(const std::string& t) const { return wrap("2", t); }
};

Style style_for(FILE* stream) {
  const char* no_color = std::getenv("NO_COLOR");
  return Style{::isatty(::fileno(stream)) != 0 && (no_color == nullptr || *no_color == '\0')};
}

std::string printable(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
    text.pop_back();
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') c = '?';
  }
  return text;
}

// Measures the steps of the demo one after another.
class Stopwatch {
 public:
  std::chrono::nanoseconds lap() {
    const auto now = std::chrono::steady_clock::now();
    const auto took = now - last_;
    last_ = now;
    return took;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// True when the local Docker engine answers and holds `image` (GET /images/{name}/json).
bool local_image_present(const std::string& image) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, "/var/run/docker.sock");
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  bool ok = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET /v1.41/images/" + sandboxio::percent_encode(image, "/:") +
                            "/json HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[64] = {};
      const ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
      ok = n > 12 && std::string_view(buf, static_cast<std::size_t>(n)).substr(9, 3) == "200";
    }
  }
  ::close(fd);
  return ok;
}

// Picks the backend the demo runs on, and says why.
std::pair<std::string, std::string> choose_backend(const std::string& requested) {
  if (!requested.empty()) return {requested, "as asked"};
  const char* host = std::getenv("DOCKER_HOST");
  if (host && *host && !std::string_view(host).starts_with("unix:///var/run/docker.sock"))
    return {"docker://python:3.12-slim", "DOCKER_HOST is set"};
  for (const char* image : {"python:3.12-slim", "sandboxio-test/python:bookworm"}) {
    if (local_image_present(image))
      return {std::string("docker://") + image, "a Docker engine answers and has this image"};
  }
  return {
      "fake://",
      "no Docker engine with a python image answers on /var/run/docker.sock (scripts/docker-env "
      "starts one), so the demo runs on the deterministic fake:// backend, which runs no real "
      "code"};
}

int demo(const std::string& requested) {
  const Style out = style_for(stdout);
  const auto chosen = choose_backend(requested);
  const std::string& dsn = chosen.first;
  std::cout << "sandboxio demo on " << dsn << " " << out.dim("(" + chosen.second + ")") << "\n";
  auto line = [](const std::string& step, const std::string& what, std::chrono::nanoseconds took) {
    std::printf("  %-9s %-58s %8s\n", step.c_str(), what.c_str(),
                sandboxio::format_duration(took).c_str());
  };
  Stopwatch watch;
  sandboxio::CreateOptions options;
  options.lifetime = std::chrono::minutes(5);
  auto sandbox = sandboxio::sync::Sandbox::create(dsn, options);
  line("create",
       sandbox.id().substr(0, 12) + " (tier " + std::string(sandbox.tier().name()) + ", network " +
           sandbox.info().network.describe() + ")",
       watch.lap());

  const auto hello = sandbox.run({"python3", "-c", "print('hello from the sandbox')"});
  line("run",
       "python3 -> \"" + printable(hello.stdout_bytes) + "\" exit " +
           std::to_string(hello.exit_code.value_or(-1)),
       watch.lap());
  if (!hello.ok()) {
    std::cerr << out.bad("run failed: ") << printable(hello.stderr_bytes) << "\n";
    return 1;
  }

  auto proc = sandbox.stream(
      {"sh", "-c", "echo tick 1; sleep 0.1; echo tick 2; sleep 0.1; echo tick 3; echo done >&2"});
  int chunks = 0;
  bool had_stderr = false;
  while (auto chunk = proc.next()) {
    ++chunks;
    had_stderr = had_stderr || chunk->stream == sandboxio::StreamKind::Stderr;
  }
  const bool streamed = proc.wait().exit_code.value_or(-1) == 0 && had_stderr;
  line("stream", std::to_string(chunks) + " chunks as they came, stdout and stderr apart",
       watch.lap());
  if (!streamed) {
    std::cerr << out.bad("streaming did not deliver both streams") << "\n";
    return 1;
  }

  const auto probe =
      sandbox.run_code("import socket\nsocket.create_connection(('example.com', 443), timeout=3)");
  const bool denied = !probe.ok();
  std::string why = probe.stderr_bytes;
  while (!why.empty() && why.back() == '\n')
    why.pop_back();
  why = why.substr(why.find_last_of('\n') + 1).substr(0, 40);
  line("egress",
       std::string("connect(example.com:443) -> ") + (denied ? "blocked: " + why : "REACHED"),
       watch.lap());
  if (!denied) {
    std::cerr << out.bad("the sandbox reached the network although the policy denies it") << "\n";
    return 1;
  }

  sandbox.kill();
  line("teardown", "killed; nothing left behind", watch.lap());
  std::cout << out.ok("ok")
            << ": the same program runs on docker:// and e2b:// by changing the DSN\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGINT, [](int) { g_interrupted = 1; });
  CLI::App app{"sandboxio: run AI-agent code in any sandbox, with the same API everywhere"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sandboxio 0.1.0");

  std::string backend;
  auto* demo_cmd = app.add_subcommand(
      "demo", "Create a sandbox, run, stream, probe egress, tear down; each step timed");
  demo_cmd->add_option("backend", backend, "DSN to run on (default: the best backend available)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    int rc = 0;
    if (demo_cmd->parsed()) rc = demo(backend);
    return g_interrupted != 0 ? 130 : rc;
  } catch (const sandboxio::Error& e) {
    std::cerr << "sandboxio: " << e.what() << "\n";
    return g_interrupted != 0 ? 130 : 1;
  } catch (const std::exception& e) {
    std::cerr << "sandboxio: " << e.what() << "\n";
    return g_interrupted != 0 ? 130 : 1;
  }
}
