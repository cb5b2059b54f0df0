// Shared pieces of the sandboxio command line.
#include "common.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string_view>

#include "sandboxio/dsn.hpp"

namespace sandboxio::cli {

volatile std::sig_atomic_t g_interrupted = 0;

bool is_terminal(FILE* stream) {
  return ::isatty(::fileno(stream)) != 0;
}

Style style_for(FILE* stream) {
  const char* no_color = std::getenv("NO_COLOR");
  return Style{is_terminal(stream) && (no_color == nullptr || *no_color == '\0')};
}

void print_warnings(const std::vector<sandboxio::Problem>& warnings) {
  const Style err = style_for(stderr);
  for (const auto& w : warnings)
    std::cerr << err.bad("sandboxio: warning: ") << w.describe() << "\n";
}

std::string printable(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
    text.pop_back();
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') c = '?';
  }
  return text;
}

std::optional<LocalReply> docker_local_get(const std::string& path, const std::string& socket) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket.size() >= sizeof addr.sun_path) {
    ::close(fd);
    return std::nullopt;
  }
  std::memcpy(addr.sun_path, socket.data(), socket.size());
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::optional<LocalReply> out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req =
        "GET " + path + " HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      std::string in;
      char buf[16384];
      ssize_t n = 0;
      while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0 && in.size() < (1u << 20))
        in.append(buf, static_cast<std::size_t>(n));
      const std::size_t head = in.find("\r\n\r\n");
      if (in.size() > 12 && head != std::string::npos) {
        LocalReply r;
        r.status = std::atoi(in.substr(9, 3).c_str());
        r.headers = in.substr(0, head);
        r.body = in.substr(head + 4);
        out = std::move(r);
      }
    }
  }
  ::close(fd);
  return out;
}

bool local_image_present(const std::string& image) {
  const auto r =
      docker_local_get("/v1.41/images/" + sandboxio::percent_encode(image, "/:") + "/json");
  return r && r->status == 200;
}

// Picks the backend demo, run and mcp use when none is given, and says why: SBX_BACKEND, then
// Docker when an engine with a python image answers, then local://. Never fake://, which runs
// no real code: that one is only ever asked for by name.
std::pair<std::string, std::string> choose_backend(const std::string& requested) {
  if (!requested.empty()) return {requested, "as asked"};
  if (const char* env = std::getenv("SBX_BACKEND"); env && *env) return {env, "SBX_BACKEND"};
  const char* host = std::getenv("DOCKER_HOST");
  if (host && *host && !std::string_view(host).starts_with("unix:///var/run/docker.sock"))
    return {"docker://python:3.12-slim", "DOCKER_HOST is set"};
  for (const char* image : {"python:3.12-slim", "sandboxio-test/python:bookworm"}) {
    if (local_image_present(image))
      return {std::string("docker://") + image, "a Docker engine answers and has this image"};
  }
  return {"local://",
          "no Docker engine with a python image answers on /var/run/docker.sock: a daemonless "
          "sandbox on this machine, in bubblewrap"};
}

}  // namespace sandboxio::cli
