// Fault injection on the real Docker engine: each fault ends in a coded error or a typed
// termination within its deadline, with no hang, no crash, no leaked container and no lost
// output that was already received. (A client killed by SIGKILL and a process that exhausts
// the sandbox's memory are in docker_test.cpp: DockerLease.* and DockerConfig.*; dockerd
// killed mid-exec is restart_test.cpp, which runs alone.)
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
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

// A TCP proxy in front of the engine's Unix socket that cuts connections as a network failure
// does: both ends are reset (SO_LINGER 0), so the client reads ECONNRESET, not an orderly end.
// The owner lease (the container's attached stdin) is spared: cutting it ends the sandbox by
// design (the owner is gone), which DockerLease.* tests.
class CuttingProxy {
 public:
  CuttingProxy() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 64) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      ADD_FAILURE() << "the proxy cannot listen";
    port_ = ntohs(a.sin_port);
    accepter_ = std::thread([this] { accept_loop(); });
  }
  ~CuttingProxy() {
    ::shutdown(fd_, SHUT_RDWR);
    accepter_.join();
    ::close(fd_);
    {
      std::lock_guard lock(mu_);
      for (auto& p : pairs_)
        p->cut(true);
    }
    for (auto& t : pumps_)
      t.join();
  }
  /// The daemon's exec path (agent=off), where every call is an HTTP exchange of its own that
  /// a cut can break. Through the agent every call travels on the owner lease, which the proxy
  /// spares: cutting it ends the sandbox (DockerLease.*).
  [[nodiscard]] std::string dsn() const {
    return kDsn + "?agent=off&host=tcp://127.0.0.1:" + std::to_string(port_);
  }
  /// Resets every connection open now except the owner lease; returns how many.
  int cut() {
    std::lock_guard lock(mu_);
    int n = 0;
    for (auto& p : pairs_)
      n += p->cut(false) ? 1 : 0;
    return n;
  }

 private:
  struct Pair {
    int client = -1, engine = -1, wake = -1;
    std::atomic<bool> lease{false}, done{false};
    bool cut(bool even_lease) {
      if (done || (lease && !even_lease)) return false;
      const std::uint64_t one = 1;
      return ::write(wake, &one, sizeof one) == sizeof one;
    }
  };

  void accept_loop() {
    while (true) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      const int e = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un u{};
      u.sun_family = AF_UNIX;
      std::strcpy(u.sun_path, "/var/run/docker.sock");
      if (::connect(e, reinterpret_cast<sockaddr*>(&u), sizeof u) != 0) {
        ::close(c);
        ::close(e);
        continue;
      }
      auto p = std::make_shared<Pair>();
      p->client = c;
      p->engine = e;
      p->wake = ::eventfd(0, EFD_CLOEXEC);
      std::lock_guard lock(mu_);
      pairs_.push_back(p);
      pumps_.emplace_back([p] { pump(*p); });
    }
  }

  static void pump(Pair& p) {
    pollfd f[3] = {{p.client, POLLIN, 0}, {p.engine, POLLIN, 0}, {p.wake, POLLIN, 0}};
    std::string buf(65536, '\0');
    bool reset = false;
    while (::poll(f, 3, -1) > 0) {
      if (f[2].revents != 0) {
        reset = true;
        break;
      }
      bool over = false;
      for (int i = 0; i < 2 && !over; ++i) {
        if (f[i].revents == 0) continue;
        const ssize_t n = ::read(f[i].fd, buf.data(), buf.size());
        if (n <= 0) {
          over = true;
          break;
        }
        if (i == 0 && std::string_view(buf.data(), static_cast<std::size_t>(n)).find("/attach?") !=
                          std::string_view::npos)
          p.lease = true;
        if (::send(f[1 - i].fd, buf.data(), static_cast<std::size_t>(n), MSG_NOSIGNAL) != n)
          over = true;
      }
      if (over) break;
    }
    p.done = true;
    if (reset) {
      const linger hard{1, 0};
      ::setsockopt(p.client, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
    }
    ::close(p.client);
    ::close(p.engine);
    ::close(p.wake);
  }

  int fd_ = -1;
  int port_ = 0;
  std::mutex mu_;
  std::vector<std::shared_ptr<Pair>> pairs_;
  std::vector<std::thread> pumps_;
  std::thread accepter_;
};

bool running_in(sandboxio::sync::Sandbox& sb, const std::string& marker) {
  return sb.run({"pgrep", "-f", "--", marker}).exit_code == 0;
}

/// The process carrying `marker` is gone within `bound` (a stop the library started may still
/// be on its way when the call that started it returned).
bool stops_within(sandboxio::sync::Sandbox& sb, const std::string& marker,
                  std::chrono::milliseconds bound) {
  const auto start = Clock::now();
  while (running_in(sb, marker)) {
    if (Clock::now() - start > bound) return false;
  }
  return true;
}

class DockerFault : public ::testing::Test {
 protected:
  void SetUp() override { SBX_REQUIRE_ENGINE(); }
  void TearDown() override {
    EXPECT_TRUE(sandboxio::testing::none_left_within(10s)) << "a container was left behind";
  }
};

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

TEST_F(DockerFault, ConnectionCutMidStreamKeepsWhatArrivedAndStopsTheCommand) {
  CuttingProxy proxy;
  auto sb = sandboxio::sync::Sandbox::create(proxy.dsn());
  sandboxio::Command c;
  c.argv = {"sh", "-c", "echo first; sleep 3171"};
  c.timeout = 60s;
  auto p = sb.stream(c);
  auto chunk = p.next();
  ASSERT_TRUE(chunk.has_value());
  EXPECT_EQ(chunk->data, "first\n");
  const auto cut_at = Clock::now();
  ASSERT_GT(proxy.cut(), 0);
  std::string rest;
  while (auto more = p.next())
    rest += more->data;
  EXPECT_TRUE(rest.empty()) << rest;
  try {
    (void)p.wait();
    ADD_FAILURE() << "a stream whose connection broke ended as if complete";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::ConnectionLost) << e.what();
  }
  EXPECT_LT(Clock::now() - cut_at, 10s) << "the broken stream was noticed only at the deadline";
  EXPECT_TRUE(stops_within(sb, "sleep 3171", 10s)) << "the command ran on, unseen, after the cut";
  EXPECT_TRUE(sb.run({"true"}).ok()) << "the sandbox does not work after the cut";
}

TEST_F(DockerFault, ConnectionsCutDuringCallsAreCodedErrorsNeverTruncatedResults) {
  CuttingProxy proxy;
  auto sb = sandboxio::sync::Sandbox::create(proxy.dsn());
  std::atomic<bool> stop{false};
  std::thread cutter([&] {  // cut whatever is open, over and over, while big reads run
    for (int k = 0; !stop; ++k) {
      // The fault's rhythm (3 to 300 ms apart), not a synchronisation: some calls complete.
      std::this_thread::sleep_for(std::chrono::milliseconds(3 + (k * 97) % 298));
      proxy.cut();
    }
  });
  int coded = 0, complete = 0, other = 0;
  const auto start = Clock::now();
  for (int i = 0; i < 20; ++i) {
    try {
      const auto r = sb.run({"head", "-c", "4000000", "/dev/zero"});
      if (r.ok()) {
        EXPECT_EQ(r.stdout_bytes.size(), 4000000u) << "a cut call returned a truncated success";
        ++complete;
      } else {
        ++other;  // a typed ending (the command saw its pipe close): honest, not a success
      }
    } catch (const sandboxio::Error& e) {
      EXPECT_TRUE(e.code() == errc::ConnectionLost || e.code() == errc::BackendUnavailable)
          << e.what();
      if (std::getenv("SBX_DEBUG_CUTS")) std::printf("%s\n", e.what());
      ++coded;
    }
  }
  stop = true;
  cutter.join();
  EXPECT_LT(Clock::now() - start, 120s);
  EXPECT_GT(coded, 0) << "no call was cut: the fault was not injected";
  std::printf("cut calls: %d coded errors, %d complete, %d typed endings\n", coded, complete,
              other);
  EXPECT_TRUE(sb.run({"true"}).ok()) << "the sandbox does not work after the cuts";
}

TEST_F(DockerFault, AFullDiskIsAnExitCodeOrACodedError) {
  auto sb = sandboxio::sync::Sandbox::create(kDsn);
  // /dev/shm is the runtime's 64 MiB tmpfs: filling it is ENOSPC inside the sandbox. Files
  // there go through the agent (on the exec path, an exec: the archive API would write beneath
  // the mount and succeed).
  sb.write_file("/dev/shm/note", "seen");
  EXPECT_EQ(sb.run({"cat", "/dev/shm/note"}).stdout_bytes, "seen");
  const auto r = sb.run({"sh", "-c", "head -c 100000000 /dev/zero > /dev/shm/fill"});
  EXPECT_EQ(r.termination, Termination::Exited);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.stderr_bytes.find("No space left"), std::string::npos) << r.stderr_bytes;
  try {
    sb.write_file("/dev/shm/more", std::string(1 << 20, 'z'));
    ADD_FAILURE() << "a write to a full disk succeeded";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::FilesystemError) << e.what();
    std::string what = e.what();
    std::transform(what.begin(), what.end(), what.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    EXPECT_NE(what.find("no space left"), std::string::npos) << e.what();
    EXPECT_EQ(what.find("/dev/shm/more: /dev/shm/more"), std::string::npos) << "said twice";
  }
  EXPECT_EQ(sb.read_file("/dev/shm/note"), "seen") << "the full disk lost a file";
  EXPECT_TRUE(sb.run({"true"}).ok()) << "the sandbox does not work after its disk filled";
}

// An audit sink that never returns: with the default Warn policy each operation goes on after
// the sink's timeout and the sandbox says so in its warnings(); nothing hangs.
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
