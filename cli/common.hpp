// Shared pieces of the sandboxio command line.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sandboxio/result.hpp"

namespace sandboxio::cli {

/// Set by SIGINT/SIGTERM; commands stop and exit 130.
extern volatile std::sig_atomic_t g_interrupted;

/// Colour on a terminal unless NO_COLOR is set; plain text in pipes.
struct Style {
  bool color = false;
  std::string wrap(const char* code, const std::string& text) const {
    return color ? std::string("\033[") + code + "m" + text + "\033[0m" : text;
  }
  std::string ok(const std::string& t) const { return wrap("32", t); }
  std::string bad(const std::string& t) const { return wrap("31", t); }
  std::string dim(const std::string& t) const { return wrap("2", t); }
};
Style style_for(FILE* stream);
/// True when `stream` is a terminal (progress is shown only there).
bool is_terminal(FILE* stream);

/// One line of text without trailing newlines and with control characters replaced.
std::string printable(std::string text);
/// Prints a sandbox's warnings on stderr ("sandboxio: warning: ..."): the library never does.
void print_warnings(const std::vector<sandboxio::Problem>& warnings);

/// Measures steps one after another.
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

/// A GET on the local Docker socket: the status and the body, or nullopt when it cannot be
/// reached. For quick checks (doctor, demo) without a sandbox.
struct LocalReply {
  int status = 0;
  std::string headers;
  std::string body;
};
std::optional<LocalReply> docker_local_get(const std::string& path,
                                           const std::string& socket = "/var/run/docker.sock");
bool local_image_present(const std::string& image);

/// The backend to use when none is given, and why: the one asked for, SBX_BACKEND, Docker when
/// an engine with a python image answers, else local://. Never fake:// on its own.
std::pair<std::string, std::string> choose_backend(const std::string& requested);

// The subcommands.
int demo(const std::string& requested);

}  // namespace sandboxio::cli
