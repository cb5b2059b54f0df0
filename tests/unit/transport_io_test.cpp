// The transports' connection paths, exercised by a tiny machine that speaks a line protocol:
// create() opens a connection, sends "ping\n" and completes when "pong\n" came back. The same
// machine runs over the simulated link (split reads, delays, drops), the POSIX link and the
// Asio transport against a real Unix socket server.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <deque>
#include <thread>

#include "sandboxio/async.hpp"
#include "sandboxio/config.hpp"
#include "sandboxio/sim.hpp"
#include "sandboxio/sync.hpp"

using namespace sandboxio;

namespace {

class EchoMachine final : public Machine {
 public:
  explicit EchoMachine(Endpoint ep) : ep_(std::move(ep)) {}
  std::string_view scheme() const noexcept override { return "echo"; }
  CapabilitySet capabilities() const noexcept override { return {Capability::NetworkPolicy}; }
  IsolationTier tier() const noexcept override { return IsolationTier::Container; }

  void handle_connected(ConnId, Instant) override {
    requests_.push_back(request::Send{1, "ping\n"});
  }
  void handle_connect_failed(ConnId, Problem p, Instant) override { finish_failed(std::move(p)); }
  std::size_t handle_bytes(ConnId, std::string_view data, Instant) override {
    got_ += data;
    if (got_ == "pong\n") {
      requests_.push_back(request::Close{1});
      events_.push_back(event::Done{
          create_,
          SandboxInfo{
              "echo", "pong", IsolationTier::Container, {}, {}, SandboxState::Running, {}}});
      create_ = 0;
    } else if (got_.size() >= 5) {
      finish_failed(Problem{errc::RemoteProtocolViolation, "expected pong, got " + got_, {}});
    }
    return data.size();
  }
  void handle_eof(ConnId, Instant) override {
    if (create_ != 0)
      finish_failed(Problem{
          errc::ConnectionLost, "closed after " + std::to_string(got_.size()) + " bytes", {}});
  }
  void handle_timeout(Instant) override {}
  void handle_consumed(OpId, std::size_t, Instant) override {}
  OpId submit_create(const CreateOptions&, Instant) override {
    create_ = ++next_;
    requests_.push_back(request::Open{1, ep_});
    return create_;
  }
  OpId submit_kill(Instant) override {
    events_.push_back(event::Done{++next_, std::monostate{}});
    return next_;
  }
  OpId submit_connect(std::string, const CreateOptions&, Instant) override { return refuse(); }
  OpId submit_info(Instant) override { return refuse(); }
  OpId submit_list_managed(std::map<std::string, std::string>, Instant) override {
    return refuse();
  }
  OpId submit_remove_managed(std::string, Instant) override { return refuse(); }
  OpId submit_run(Command, Instant) override { return refuse(); }
  OpId submit_stream(Command, Instant) override { return refuse(); }
  OpId submit_run_code(CodeRequest, Instant) override { return refuse(); }
  OpId submit_create_context(std::string, Instant) override { return refuse(); }
  OpId submit_write_file(std::string, Bytes, Instant) override { return refuse(); }
  OpId submit_read_file(std::string, Instant) override { return refuse(); }
  OpId submit_list_files(std::string, Instant) override { return refuse(); }
  OpId submit_remove_file(std::string, Instant) override { return refuse(); }
  void submit_cancel(OpId, Instant) override {}
  std::optional<Request> poll_request() override { return pop(requests_); }
  std::optional<Event> poll_event() override { return pop(events_); }
  std::optional<Instant> poll_deadline() const override { return std::nullopt; }

 private:
  template <class T>
  static std::optional<T> pop(std::deque<T>& q) {
    if (q.empty()) return std::nullopt;
    T v = std::move(q.front());
    q.pop_front();
    return v;
  }
  OpId refuse() {
    events_.push_back(
        event::Failed{++next_, Problem{errc::CapabilityNotSupported, "echo only creates", {}}});
    return next_;
  }
  void finish_failed(Problem p) {
    if (create_ == 0) return;
    events_.push_back(event::Failed{create_, std::move(p)});
    create_ = 0;
  }
  Endpoint ep_;
  std::deque<Request> requests_;
  std::deque<Event> events_;
  std::string got_;
  OpId create_ = 0;
  OpId next_ = 0;
};

// echo:///path/to/socket (a Unix socket) or echo://sim (a simulated peer).
const bool registered = [] {
  return registry()
      .add({"echo",
            "test machine",
            [](const Dsn& dsn) -> Result<std::unique_ptr<Machine>> {
              Endpoint ep{Endpoint::Kind::Unix, dsn.target, 0, false, {}};
              // ?peer=PID: only that process may be the listener (Endpoint::peer_pid).
              if (const std::string* pid = dsn.option("peer")) ep.peer_pid = std::stoi(*pid);
              return std::unique_ptr<Machine>(std::make_unique<EchoMachine>(ep));
            },
            {},
            {}})
      .ok();
}();

class Pong final : public sim::Peer {
 public:
  void on_bytes(std::string_view data, std::string& reply, bool&) override {
    if (data == "ping\n") reply = "pong\n";
  }
};

sim::Config with_peer(sim::Config c) {
  c.peers = [](const Endpoint&) { return std::make_unique<Pong>(); };
  return c;
}

TEST(TransportIo, SimulatedPeerAtEverySplitSizeAndDelay) {
  ASSERT_TRUE(registered);
  for (std::size_t max_read = 1; max_read <= 5; ++max_read) {
    for (std::uint64_t seed = 1; seed <= 10; ++seed) {
      sim::Config c{.seed = seed, .max_read = max_read, .max_delay = std::chrono::milliseconds(5)};
      auto sb = sync::Sandbox::create("echo://sim", {}, sim::make_link(with_peer(c)));
      EXPECT_EQ(sb.id(), "pong") << "max_read " << max_read << " seed " << seed;
    }
  }
}

TEST(TransportIo, SimulatedRefusalIsConnectionFailed) {
  try {
    (void)sync::Sandbox::create("echo://sim", {}, sim::make_link({}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::ConnectionFailed);
  }
}

TEST(TransportIo, SimulatedDropIsConnectionLost) {
  sim::Config c{.seed = 9, .max_read = 1, .drop_probability = 1.0};
  try {
    (void)sync::Sandbox::create("echo://sim", {}, sim::make_link(with_peer(c)));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::ConnectionLost);
  }
}

// A real Unix socket server answering one "ping" per connection. With `reset`, it reads only
// "ping" of "ping\n", answers "po" and closes with the "\n" unread: the kernel resets the
// connection (the client reads ECONNRESET), as a peer that crashes mid-reply does.
class UnixServer {
 public:
  explicit UnixServer(bool reset = false)
      : path_("/tmp/sbx-echo-" + std::to_string(::getpid()) + ".sock") {
    ::unlink(path_.c_str());
    fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path_.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    thread_ = std::thread([this, reset] {
      for (int i = 0; i < 4; ++i) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[16];
        std::string got;
        if (reset) {
          while (got.size() < 4) {
            const ssize_t n = ::read(c, buf, 4 - got.size());
            if (n <= 0) break;
            got.append(buf, static_cast<std::size_t>(n));
          }
          (void)!::write(c, "po", 2);
          ::close(c);
          continue;
        }
        while (got.size() < 5) {
          const ssize_t n = ::read(c, buf, sizeof buf);
          if (n <= 0) break;
          got.append(buf, static_cast<std::size_t>(n));
        }
        if (got == "ping\n") (void)!::write(c, "pong\n", 5);
        ::close(c);
      }
    });
  }
  ~UnixServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    ::unlink(path_.c_str());
  }
  std::string dsn() const { return "echo://" + path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::thread thread_;
};

TEST(TransportIo, PosixAndAsioOverARealUnixSocket) {
  UnixServer server;
  {
    auto sb = sync::Sandbox::create(server.dsn());
    EXPECT_EQ(sb.id(), "pong");
  }
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  {
    auto sb =
        async::Sandbox::async_create(io.get_executor(), server.dsn(), {}, asio::use_future).get();
    EXPECT_EQ(sb.id(), "pong");
    sb.async_kill(asio::use_future).get();
  }
  work.reset();
  runner.join();
}

TEST(TransportIo, PosixAndAsioTellAResetFromAnEnd) {
  // A reset is handle_connect_failed (ConnectionLost, "reset"), never handle_eof: a reply cut
  // by a reset must not pass for a complete one.
  UnixServer server(/*reset=*/true);
  try {
    (void)sync::Sandbox::create(server.dsn());
    FAIL() << "a reset connection gave a sandbox";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::ConnectionLost);
    EXPECT_NE(std::string(e.what()).find("reset"), std::string::npos) << e.what();
  }
  asio::io_context io;
  std::error_code got;
  async::Sandbox::async_create(io.get_executor(), server.dsn(), {},
                               [&](std::error_code ec, async::Sandbox) { got = ec; });
  io.run();
  EXPECT_EQ(got, errc::ConnectionLost);
}

// Endpoint::peer_pid: the transport sends nothing until SO_PEERCRED names that process as the
// listener (the docker backend's direct socket to the agent relies on it). The server listens
// in this process: its pid passes, any other (the parent's) is refused before the ping goes.
TEST(TransportIo, PosixAndAsioTalkOnlyToTheListenerTheyExpect) {
  UnixServer server;
  const std::string mine = server.dsn() + "?peer=" + std::to_string(::getpid());
  const std::string other = server.dsn() + "?peer=" + std::to_string(::getppid());
  try {
    (void)sync::Sandbox::create(other);
    FAIL() << "a listener that is not the expected process was trusted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::ConnectionFailed);
    EXPECT_NE(std::string(e.what()).find("not the expected " + std::to_string(::getppid())),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(sync::Sandbox::create(mine).id(), "pong");
  asio::io_context io;
  std::error_code refused, trusted;
  async::Sandbox::async_create(io.get_executor(), other, {},
                               [&](std::error_code ec, async::Sandbox) { refused = ec; });
  io.run();
  EXPECT_EQ(refused, errc::ConnectionFailed);
  io.restart();
  async::Sandbox::async_create(io.get_executor(), mine, {},
                               [&](std::error_code ec, async::Sandbox) { trusted = ec; });
  io.run();
  EXPECT_FALSE(trusted) << trusted.message();
}

TEST(TransportIo, PosixAndAsioReportARefusedConnection) {
  try {
    (void)sync::Sandbox::create("echo:///tmp/sbx-no-such-socket");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::ConnectionFailed);
  }
  asio::io_context io;
  std::error_code got;
  async::Sandbox::async_create(io.get_executor(), "echo:///tmp/sbx-no-such-socket", {},
                               [&](std::error_code ec, async::Sandbox) { got = ec; });
  io.run();
  EXPECT_EQ(got, errc::ConnectionFailed);
}

}  // namespace
