// Helpers for the tests that run against the real Docker engine: whether one answers, the
// test images, and what the engine holds (asked through the docker CLI, independently of the
// code under test).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netinet/in.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../support/free_port.hpp"
#include "lease_holder.hpp"

extern char** environ;

namespace sandboxio::testing {

inline constexpr const char* kPythonImage = "sandboxio-test/python:bookworm";
inline constexpr const char* kBusyboxImage = "sandboxio-test/busybox:latest";

/// Runs a shell command; returns its stdout (stderr goes to the test's stderr).
inline std::string capture(const std::string& command, int* status = nullptr) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0)
    out.append(buf.data(), n);
  const int rc = ::pclose(p);
  if (status) *status = rc;
  return out;
}

inline bool engine_answers() {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, "/var/run/docker.sock");
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

/// Skips the test loudly when no engine answers, unless SBX_REQUIRE_DOCKER=1 (CI), where a
/// missing engine is a failure.
#define SBX_REQUIRE_ENGINE()                                                                   \
  do {                                                                                         \
    if (!::sandboxio::testing::engine_answers()) {                                             \
      const char* req = std::getenv("SBX_REQUIRE_DOCKER");                                     \
      if (req && std::string(req) == "1") FAIL() << "no Docker engine answers (CI needs one)"; \
      std::fprintf(stderr,                                                                     \
                   "\n*** SKIPPED: no Docker engine at /var/run/docker.sock. Run "             \
                   "scripts/docker-env to start one. ***\n\n");                                \
      GTEST_SKIP() << "no Docker engine";                                                      \
    }                                                                                          \
  } while (0)

/// A registry that accepts connections on loopback and never answers: pulling an image from it
/// makes create() slow for as long as the test wants (the create timeout and cancellation
/// cases). dockerd treats 127.0.0.0/8 registries as insecure, so it connects without TLS setup.
class StallingRegistry {
 public:
  StallingRegistry() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 64) != 0)
      return;
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) break;
        held_.push_back(c);  // held open, never answered
      }
    });
  }
  ~StallingRegistry() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    if (thread_.joinable()) thread_.join();
    for (int c : held_)
      ::close(c);
  }
  StallingRegistry(const StallingRegistry&) = delete;
  StallingRegistry& operator=(const StallingRegistry&) = delete;
  /// An image reference whose pull never completes.
  [[nodiscard]] std::string image() const {
    return "127.0.0.1:" + std::to_string(port_) + "/sandboxio-stall:latest";
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<int> held_;
  std::thread thread_;
};

inline bool container_exists(const std::string& id) {
  int status = 0;
  (void)capture("docker inspect --format '{{.Id}}' " + id + " >/dev/null 2>&1", &status);
  return status == 0;
}

inline std::string trim_text(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

#ifdef SBX_LEASE_HOLDER
/// Starts the lease holder (tests/docker/lease_holder.cpp) on `dsn`, waits until its command
/// runs in the sandbox, SIGKILLs it and expects the container gone within 2 s (the owner
/// lease, whichever path serves it: the daemon's attach stream or the agent's).
inline void expect_sigkilled_owner_ends_sandbox(const std::string& dsn) {
  const LeaseHolder holder = start_lease_holder(dsn);
  const pid_t pid = holder.pid;
  const std::string& id = holder.sandbox_id;
  ASSERT_FALSE(id.empty());
  // Wait until the holder's command runs in the sandbox: the exec is in flight when it dies.
  const auto started = std::chrono::steady_clock::now();
  while (trim_text(capture("docker exec " + id + " pgrep -x sleep")).empty()) {
    ASSERT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20))
        << "the holder's command never ran";
  }
  ASSERT_TRUE(container_exists(id));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const auto killed = std::chrono::steady_clock::now();
  while (container_exists(id) &&
         std::chrono::steady_clock::now() - killed < std::chrono::seconds(10)) {
  }
  const auto took = std::chrono::steady_clock::now() - killed;
  EXPECT_FALSE(container_exists(id)) << "the container outlived its SIGKILLed owner by 10 s";
  EXPECT_LT(took, std::chrono::seconds(2))
      << "the container took "
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
      << " ms to go after its owner was SIGKILLed";
}
#endif  // SBX_LEASE_HOLDER

/// Ids of the containers carrying the sandboxio labels and this process as owner.
inline std::vector<std::string> my_containers() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string owner = std::string(host) + ":" + std::to_string(::getpid());
  const std::string out = capture(
      "docker ps -aq --no-trunc --filter label=io.sandboxio.owner=" + owner + " 2>/dev/null");
  std::vector<std::string> ids;
  std::size_t pos = 0;
  while (pos < out.size()) {
    std::size_t nl = out.find('\n', pos);
    if (nl == std::string::npos) nl = out.size();
    // What the engine can still inspect: after a restart, dockerd 20.10 may keep a listing
    // entry for a container it removed while restoring ("No such object" on inspect).
    if (nl > pos && container_exists(out.substr(pos, nl - pos)))
      ids.push_back(out.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return ids;
}

/// True once none of this process's containers remain, within `bound`: an async handle's
/// teardown completes after its destructor returned, so the check gives it its time.
inline bool none_left_within(std::chrono::milliseconds bound = std::chrono::seconds(5)) {
  const auto start = std::chrono::steady_clock::now();
  while (!my_containers().empty()) {
    if (std::chrono::steady_clock::now() - start > bound) return false;
  }
  return true;
}

}  // namespace sandboxio::testing
