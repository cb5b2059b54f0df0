// Fault injection on the real Docker engine: each fault ends in a coded error or a typed
// termination within its deadline, with no hang, no crash, no leaked container and no lost
// output that was already received. (A client killed by SIGKILL and a process that exhausts
// the sandbox's memory are in docker_test.cpp: DockerLease.* and DockerConfig.*.)
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "docker_support.hpp"
#include "sandboxio/sync.hpp"

namespace {

using namespace std::chrono_literals;
using sandboxio::errc;
using sandboxio::Termination;
using sandboxio::testing::kPythonImage;
using Clock = std::chrono::steady_clock;

const std::string kDsn = std::string("docker://") + kPythonImage;

// A Unix-socket proxy in front of the engine's socket that can cut every connection at once.
class CuttingProxy {
 public:
  CuttingProxy() : path_("/tmp/sbx-proxy-" + std::to_string(::getpid()) + ".sock") {
    ::unlink(path_.c_str());
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, path_.c_str());
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 64) != 0)
      ADD_FAILURE() << "cannot listen on " << path_;
    accepter_ = std::thread([this] {
      while (true) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        const int up = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un e{};
        e.sun_family = AF_UNIX;
        std::strcpy(e.sun_path, "/var/run/docker.sock");
        if (::connect(up, reinterpret_cast<sockaddr*>(&e), sizeof e) != 0) {
          ::close(c);
          ::close(up);
          continue;
        }
        std::lock_guard lock(mu_);
        pairs_.emplace_back(c, up);
        pumps_.emplace_back([c, up] { pump(c, up); });
      }
    });
  }
  ~CuttingProxy() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    accepter_.join();
    cut();
    for (auto& t : pumps_)
      t.join();
    ::unlink(path_.c_str());
  }
  [[nodiscard]] std::string dsn() const { return kDsn + "?host=unix://" + path_; }
  /// Cuts every connection open now (both directions), as a network failure would.
  void cut() {
    std::lock_guard lock(mu_);
    for (auto [a, b] : pairs_) {
      ::shutdown(a, SHUT_RDWR);
      ::shutdown(b, SHUT_RDWR);
    }
    pairs_.clear();
  }

 private:
  static void pump(int a, int b) {
    pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    char buf[65536];
    while (::poll(p, 2, -1) > 0) {
      bool done = false;
      for (int i = 0; i < 2 && !done; ++i) {
        if (p[i].revents == 0) continue;
        const ssize_t n = ::read(p[i].fd, buf, sizeof buf);
        if (n <= 0 || ::send(p[1 - i].fd, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n)
          done = true;
      }
      if (done) break;
    }
    ::close(a);
    ::close(b);
  }
  std::string path_;
  int fd_ = -1;
  std::mutex mu_;
  std::vector<std::pair<int, int>> pairs_;
  std::vector<std::thread> pumps_;
  std::thread accepter_;
};

bool running_in(sandboxio::sync::Sandbox& sb, const std::string& marker) {
  return sb.run({"pgrep", "-f", "--", marker}).exit_code == 0;
}

class DockerFault : public ::testing::Test {
 protected:
  void SetUp() override { SBX_REQUIRE_ENGINE(); }
  void TearDown() override {
    EXPECT_TRUE(sandboxio::testing::none_left_within(10s)) << "a container was left behind";
  }
};

TEST_F(DockerFault, ConnectionCutMidStreamKeepsWhatArrivedAndEndsByTheDeadline) {
  CuttingProxy proxy;
  auto sb = sandboxio::sync::Sandbox::create(proxy.dsn());
  sandboxio::Command c;
  c.argv = {"sh", "-c", "echo first; sleep 3171"};
  c.timeout = 3s;
  auto p = sb.stream(c);
  auto chunk = p.next();
  ASSERT_TRUE(chunk.has_value());
  EXPECT_EQ(chunk->data, "first\n");
  const auto cut_at = Clock::now();
  proxy.cut();
  std::string rest;
  while (auto more = p.next())
    rest += more->data;
  const auto r = p.wait();
  EXPECT_LT(Clock::now() - cut_at, c.timeout + 5s) << "the stream outlived its deadline";
  EXPECT_EQ(r.termination, Termination::Timeout);
  EXPECT_TRUE(rest.empty()) << rest;
  EXPECT_FALSE(running_in(sb, "sleep 3171")) << "the command survived the cut and its timeout";
}

TEST_F(DockerFault, ConnectionCutDuringACallIsConnectionLost) {
  CuttingProxy proxy;
  auto sb = sandboxio::sync::Sandbox::create(proxy.dsn());
  std::atomic<bool> stop{false};
  std::thread cutter([&] {  // cut whatever is open, over and over, while a big read runs
    while (!stop) {
      std::this_thread::sleep_for(3ms);
      proxy.cut();
    }
  });
  int coded = 0, succeeded = 0;
  const auto start = Clock::now();
  for (int i = 0; i < 20; ++i) {
    try {
      (void)sb.run({"head", "-c", "20000000", "/dev/zero"});
      ++succeeded;
    } catch (const sandboxio::Error& e) {
      EXPECT_TRUE(e.code() == errc::ConnectionLost || e.code() == errc::BackendUnavailable ||
                  e.code() == errc::RemoteProtocolViolation)
          << e.what();
      ++coded;
    }
  }
  stop = true;
  cutter.join();
  EXPECT_LT(Clock::now() - start, 120s);
  EXPECT_GT(coded, 0) << "no call was cut: the fault was not injected";
  std::printf("cut calls: %d coded errors, %d completed\n", coded, succeeded);
}

TEST_F(DockerFault, ACommandThatClosesStdoutButRunsEndsAtItsTimeout) {
  auto sb = sandboxio::sync::Sandbox::create(kDsn);
  sandboxio::Command c;
  c.argv = {"sh", "-c", "echo before; exec >&- 2>&-; sleep 3172"};
  c.timeout = 1500ms;
  const auto start = Clock::now();
  const auto r = sb.run(c);
  EXPECT_EQ(r.termination, Termination::Timeout);
  EXPECT_EQ(r.stdout_bytes, "before\n");
  EXPECT_LT(Clock::now() - start, 8s);
  EXPECT_FALSE(running_in(sb, "sleep 3172"));
}

TEST_F(DockerFault, OutputWithoutNewlinesStreamsAsItComes) {
  auto sb = sandboxio::sync::Sandbox::create(kDsn);
  auto p = sb.stream({"sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' x; sleep 1; printf y"});
  std::size_t total = 0, chunks = 0;
  bool all_x = true;
  std::size_t before_end = 0;
  while (auto c = p.next()) {
    ++chunks;
    if (c->data == "y") {
      before_end = total;
      continue;
    }
    all_x = all_x && c->data.find_first_not_of('x') == std::string::npos;
    total += c->data.size();
  }
  EXPECT_TRUE(p.wait().ok());
  EXPECT_EQ(total, 20000000u);
  EXPECT_EQ(before_end, 20000000u) << "the output without newlines did not arrive before the end";
  EXPECT_TRUE(all_x);
  EXPECT_GT(chunks, 10u);
}

TEST_F(DockerFault, AFullDiskIsAnExitCodeOrACodedError) {
  auto sb = sandboxio::sync::Sandbox::create(kDsn + "?tmpfs=/work");
  // /dev/shm is Docker's 64 MiB tmpfs: filling it is ENOSPC inside the sandbox.
  const auto r = sb.run({"sh", "-c", "head -c 100000000 /dev/zero > /dev/shm/fill"});
  EXPECT_EQ(r.termination, Termination::Exited);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.stderr_bytes.find("No space left"), std::string::npos) << r.stderr_bytes;
  try {
    sb.write_file("/dev/shm/more", std::string(1 << 20, 'z'));
    ADD_FAILURE() << "a write to a full disk succeeded";
  } catch (const sandboxio::Error& e) {
    EXPECT_TRUE(e.code() == errc::FilesystemError || e.code() == errc::FilePermissionDenied)
        << e.what();
  }
  EXPECT_TRUE(sb.run({"true"}).ok()) << "the sandbox does not work after its disk filled";
}

// An audit sink that never returns: with the default Warn policy the operation goes on after
// the sink's timeout, with a warning; nothing hangs.
class BlockingSink final : public sandboxio::AuditSink {
 public:
  sandboxio::Result<void> write(const sandboxio::OperationRecord&) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return released_; });
    return {};
  }
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
};

TEST_F(DockerFault, ABlockingAuditSinkDelaysNothingPastItsTimeout) {
  auto sink = std::make_shared<BlockingSink>();
  sandboxio::CreateOptions o;
  o.audit.sink = sink;
  o.audit.sink_timeout = 300ms;
  {
    const auto start = Clock::now();
    auto sb = sandboxio::sync::Sandbox::create(kDsn, o);
    const auto r = sb.run({"sh", "-c", "echo through"});
    EXPECT_EQ(r.stdout_bytes, "through\n");
    EXPECT_LT(Clock::now() - start, 15s);
    const auto& w = sb.warnings();
    EXPECT_TRUE(std::any_of(w.begin(), w.end(), [](const auto& p) {
      return p.code == errc::AuditSinkTimeout;
    })) << "no AuditSinkTimeout warning";
    sink->release();  // before the sandbox's own teardown, whose record goes to the sink too
  }
}

}  // namespace
