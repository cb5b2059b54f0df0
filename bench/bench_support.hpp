// What the end-to-end benchmarks share: timing, medians, peer processes (Node clients that
// answer one JSON line per command), and the samples file scripts/bench-report reads.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandboxio/async.hpp"
#include "sandboxio/sync.hpp"

namespace sandboxio::bench {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline int run_shell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

inline std::string shell_output(const std::string& cmd) {
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
      out.append(buf, n);
    ::pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return out;
}

inline long peak_rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

/// The number after `"key":` in a one-line JSON answer, or nullopt.
inline std::optional<double> number_in(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nullopt;
  return std::strtod(line.c_str() + at + key.size() + 3, nullptr);
}

/// A long-lived peer process (a Node client) that answers one JSON line per command.
class NodePeer {
 public:
  static std::unique_ptr<NodePeer> start(const std::vector<std::string>& argv) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return nullptr;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      std::vector<char*> args;
      for (const auto& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    auto p = std::unique_ptr<NodePeer>(new NodePeer);
    p->pid_ = pid;
    p->to_ = in[1];
    p->from_ = ::fdopen(out[0], "r");
    return p;
  }
  ~NodePeer() {
    ::close(to_);
    if (from_) std::fclose(from_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  /// One command, one answer line ("" when the peer died).
  std::string call(const std::string& json) {
    send_all_fd(json + "\n");
    std::string line;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, from_)) {
      line += buf;
      if (!line.empty() && line.back() == '\n') break;
    }
    if (line.find("\"error\"") != std::string::npos) std::cerr << "peer: " << line;
    return line;
  }

 private:
  NodePeer() = default;
  void send_all_fd(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::write(to_, s.data() + off, s.size() - off);
      if (n <= 0) return;
      off += static_cast<std::size_t>(n);
    }
  }
  pid_t pid_ = -1;
  int to_ = -1;
  FILE* from_ = nullptr;
};

/// Samples per scenario and peer: {"latency_ms": {"sandboxio": [...], "docker CLI": [...]}}.
using Samples = std::map<std::string, std::map<std::string, std::vector<double>>>;

/// One file round trip of `mib` MiB (write then read, in milliseconds), as MiB/s samples.
inline void add_file_sample(Samples& samples, const std::string& peer, double mib, double write_ms,
                            double read_ms) {
  samples["file_write_mib_s"][peer].push_back(mib / (write_ms / 1000.0));
  samples["file_read_mib_s"][peer].push_back(mib / (read_ms / 1000.0));
}

/// A Node peer's answer to {"op":"file",...}: {write ms, read ms}, or nullopt.
inline std::optional<std::pair<double, double>> file_times_in(const std::string& line) {
  auto w = number_in(line, "write_ms");
  auto r = number_in(line, "read_ms");
  if (!w || !r) return std::nullopt;
  return std::pair{*w, *r};
}

/// sandboxio's side of the file scenario: `content` written to /tmp/bench.bin, then read
/// back; {write ms, read ms}.
inline std::pair<double, double> sandboxio_file(sandboxio::sync::Sandbox& sb,
                                                const std::string& content) {
  auto t = Clock::now();
  sb.write_file("/tmp/bench.bin", content);
  const double write_ms = ms_since(t);
  t = Clock::now();
  if (sb.read_file("/tmp/bench.bin").size() != content.size())
    std::cerr << "sandboxio: short file read\n";
  return {write_ms, ms_since(t)};
}

/// sandboxio's side of the first-output scenario: a sandbox created from nothing, `echo
/// ready` streamed, milliseconds to its first chunk (the removal after is not timed).
inline double sandboxio_first_output(const std::string& dsn) {
  const auto t = Clock::now();
  auto fresh = sandboxio::sync::Sandbox::create(dsn);
  auto p = fresh.stream({"echo", "ready"});
  (void)p.next();
  const double ms = ms_since(t);
  (void)p.wait();
  return ms;
}

/// The concurrent scenario's Asio side: `n` sandboxes at once from this one thread, each
/// created, running `argv` and torn down when its last handler drops the handle. Returns how
/// many printed exactly "ready\n".
inline int concurrent_asio(int n, const std::string& dsn, const std::vector<std::string>& argv) {
  using sandboxio::async::Sandbox;
  int ok = 0;
  asio::io_context io;  // run by this one thread
  for (int i = 0; i < n; ++i) {
    Sandbox::async_create(io.get_executor(), dsn, {}, [&](std::error_code ec, Sandbox sb) {
      if (ec) {
        std::cerr << "asio: create: " << ec.message() << "\n";
        return;
      }
      auto held = std::make_shared<Sandbox>(std::move(sb));
      sandboxio::Command c;
      c.argv = argv;
      held->async_run(std::move(c), [&, held](std::error_code e, sandboxio::ExecResult r) {
        if (!e && r.stdout_bytes == "ready\n") ++ok;
        if (e) std::cerr << "asio: run: " << e.message() << "\n";
      });  // the handle goes with the last handler: its teardown removes the sandbox
    });
  }
  io.run();
  return ok;
}

/// What a measured child process printed: {"wall_ms":N,"peak_rss_kib":N,...}.
struct Measured {
  double wall_ms = 0;
  double peak_mib = 0;
};

inline std::optional<Measured> measure_child(const std::string& cmd) {
  const std::string line = shell_output(cmd);
  auto wall = number_in(line, "wall_ms");
  auto rss = number_in(line, "peak_rss_kib");
  if (!wall || !rss) {
    std::cerr << "concurrent: no measurement from: " << cmd << "\n" << line << "\n";
    return std::nullopt;
  }
  return Measured{*wall, *rss / 1024.0};
}

/// Writes {"params": {...}, "versions": {...}, "samples": {...}}; `params` values are JSON.
inline void write_json(const std::string& path, const std::map<std::string, std::string>& params,
                       const std::map<std::string, std::string>& versions, const Samples& samples) {
  std::ofstream f(path);
  auto object = [&f](const std::map<std::string, std::string>& m, bool quote) {
    f << "{";
    bool first = true;
    for (const auto& [k, v] : m) {
      f << (first ? "" : ",") << "\"" << k << "\":" << (quote ? "\"" + v + "\"" : v);
      first = false;
    }
    f << "}";
  };
  f << "{\"params\":";
  object(params, false);
  f << ",\"versions\":";
  object(versions, true);
  f << ",\"samples\":{";
  bool s1 = true;
  for (const auto& [scenario, peers] : samples) {
    f << (s1 ? "" : ",") << "\"" << scenario << "\":{";
    s1 = false;
    bool p1 = true;
    for (const auto& [peer, v] : peers) {
      f << (p1 ? "" : ",") << "\"" << peer << "\":[";
      p1 = false;
      for (std::size_t i = 0; i < v.size(); ++i)
        f << (i ? "," : "") << v[i];
      f << "]";
    }
    f << "}";
  }
  f << "}}\n";
}

/// Prints each scenario's medians, with sandboxio's ratio to every other peer.
inline void print_medians(const std::string& title, const Samples& samples) {
  std::printf("%s (medians)\n", title.c_str());
  for (const auto& [scenario, peers] : samples) {
    std::printf("  %s\n", scenario.c_str());
    const double ours = peers.count("sandboxio") ? median(peers.at("sandboxio")) : 0;
    for (const auto& [peer, v] : peers) {
      std::printf("    %-30s %10.2f", peer.c_str(), median(v));
      if (ours > 0 && peer != "sandboxio") std::printf("   sandboxio/this %.3f", ours / median(v));
      std::printf("\n");
    }
  }
}

}  // namespace sandboxio::bench
