// sandboxio-agent, driven over its stdin and stdout with the engine's protocol codec, the way
// a host drives it: on this machine as a child process (a subreaper, not PID 1), and as PID 1
// of containers through `docker run -i` (the python image, busybox, and an image holding
// nothing but the agent). Every wait here is for a frame, never a sleep.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../docker/docker_support.hpp"
#include "sandboxio/codec/agent.hpp"

namespace {

using namespace std::chrono_literals;
using sandboxio::agent::Frame;
using sandboxio::agent::Type;
namespace agent = sandboxio::agent;

std::string agent_path() {
  return SBX_AGENT;
}

/// One agent and a host-side conversation with it.
class Client {
 public:
  explicit Client(std::vector<std::string> argv) {
    int to[2], from[2];
    EXPECT_EQ(::pipe2(to, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(from, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(to[0], 0);
      ::dup2(from[1], 1);
      std::vector<char*> args;
      for (auto& a : argv)
        args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    ::close(to[0]);
    ::close(from[1]);
    in_ = to[1];
    out_ = from[0];
  }
  ~Client() {
    // The owner leaves: the agent ends the sandbox and everything in it, then exits. (Killing
    // the agent instead would leave its children behind on a host, where it is not PID 1.)
    close_input();
    if (pid_ > 0) (void)wait_exit(std::chrono::seconds(5));
    if (out_ >= 0) ::close(out_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  void send(Type type, std::uint32_t channel, std::string_view payload = {}) {
    const std::string wire = agent::frame(type, channel, payload);
    std::size_t done = 0;
    while (done < wire.size()) {
      const ssize_t n = ::write(in_, wire.data() + done, wire.size() - done);
      ASSERT_GT(n, 0) << "the agent stopped reading";
      done += static_cast<std::size_t>(n);
    }
  }
  void send_raw(std::string_view bytes) { (void)!::write(in_, bytes.data(), bytes.size()); }
  void close_input() {
    if (in_ >= 0) ::close(in_);
    in_ = -1;
  }
  /// SIGKILLs the agent: it gets no chance to end anything.
  void kill_agent() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  /// The next frame, or nullopt when the agent closed its stdout or `timeout` passed.
  std::optional<Frame> next(std::chrono::milliseconds timeout = 20s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (frames_.empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) return std::nullopt;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) return std::nullopt;
      reader_.feed(std::string_view(buf, static_cast<std::size_t>(n)),
                   [&](Frame f) { frames_.push_back(std::move(f)); });
      EXPECT_FALSE(reader_.error().has_value());
    }
    Frame f = std::move(frames_.front());
    frames_.pop_front();
    return f;
  }
  /// The next frame of `channel` that is not a Log or a Started.
  std::optional<Frame> next_on(std::uint32_t channel, std::chrono::milliseconds timeout = 20s) {
    for (;;) {
      auto f = next(timeout);
      if (f && f->type == Type::Started) {
        EXPECT_GT(agent::Started::decode(f->payload).value().pid, 0);
        continue;
      }
      if (!f || (f->channel == channel && f->type != Type::Log)) return f;
      if (f->type != Type::Log) others_.push_back(std::move(*f));
    }
  }

  agent::Welcome hello() {
    send(Type::Hello, 0, agent::Hello{}.encode());
    auto f = next_on(0);
    EXPECT_TRUE(f && f->type == Type::Welcome);
    return agent::Welcome::decode(f ? f->payload : "").value();
  }

  struct Ran {
    std::string out, err;
    std::optional<agent::Exit> exit;
  };
  /// Starts argv on `channel`, collects its output (granting credit as it comes) and its exit.
  Ran run(std::uint32_t channel, std::vector<std::string> argv, std::string stdin_data = {},
          std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin"}) {
    agent::Start s;
    s.argv = std::move(argv);
    s.env = std::move(env);
    s.stdin_open = !stdin_data.empty();
    send(Type::Start, channel, s.encode());
    if (!stdin_data.empty()) {
      send(Type::Stdin, channel, stdin_data);
      send(Type::StdinClose, channel);
    }
    return collect(channel);
  }
  Ran collect(std::uint32_t channel) {
    Ran r;
    for (;;) {
      auto f = next_on(channel);
      if (!f) return r;
      if (f->type == Type::Output) {
        auto o = agent::Output::decode(f->payload).value();
        (o.stream == agent::StreamId::Stdout ? r.out : r.err) += o.data;
        send(Type::Credit, channel,
             agent::Credit{static_cast<std::uint32_t>(o.data.size())}.encode());
      } else if (f->type == Type::Exit) {
        r.exit = agent::Exit::decode(f->payload).value();
        return r;
      }
    }
  }

  struct CellRan {
    std::string out, err;
    std::vector<agent::CodeEvent> events;
    std::optional<agent::CodeDone> done;
    std::optional<agent::Failure> failure;
  };
  /// Runs a cell in the context on `context` over `channel`; `on_output` may act mid-cell.
  CellRan code(std::uint32_t channel, std::uint32_t context, const std::string& source,
               std::function<void(const std::string& out)> on_output = {}) {
    agent::RunCode r;
    r.context = context;
    r.code = source;
    send(Type::RunCode, channel, r.encode());
    CellRan ran;
    for (;;) {
      auto f = next_on(channel);
      if (!f) return ran;
      if (f->type == Type::Output) {
        auto o = agent::Output::decode(f->payload).value();
        (o.stream == agent::StreamId::Stdout ? ran.out : ran.err) += o.data;
        send(Type::Credit, channel,
             agent::Credit{static_cast<std::uint32_t>(o.data.size())}.encode());
        if (on_output) on_output(ran.out);
      } else if (f->type == Type::CodeEvent) {
        auto e = agent::CodeEvent::decode(f->payload);
        EXPECT_TRUE(e) << "a malformed event from the bootstrap";
        if (e) ran.events.push_back(std::move(e).value());
      } else if (f->type == Type::CodeDone) {
        ran.done = agent::CodeDone::decode(f->payload).value();
        return ran;
      } else if (f->type == Type::Failure) {
        ran.failure = agent::Failure::decode(f->payload).value();
        return ran;
      } else {
        ADD_FAILURE() << "unexpected " << agent::to_string(f->type);
        return ran;
      }
    }
  }
  /// For code(): sends `signo` to the cell on `channel` once its stdout shows `marker`.
  std::function<void(const std::string&)> signal_when(std::uint32_t channel, std::string marker,
                                                      int signo) {
    return [this, channel, marker = std::move(marker), signo,
            sent = false](const std::string& out) mutable {
      if (sent || out.find(marker) == std::string::npos) return;
      sent = true;
      send(Type::Signal, channel, agent::Signal{true, signo}.encode());
    };
  }
  /// Starts a code context on `channel`; the Failure when it cannot.
  std::optional<agent::Failure> context(std::uint32_t channel) {
    agent::ContextStart cs;
    cs.env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
    send(Type::ContextStart, channel, cs.encode());
    auto f = next(20s);
    while (f && f->type == Type::Log)
      f = next(20s);
    EXPECT_TRUE(f && f->channel == channel);
    if (f && f->type == Type::Failure) return agent::Failure::decode(f->payload).value();
    EXPECT_TRUE(f && f->type == Type::Started);
    return std::nullopt;
  }

  /// Waits for the agent process to end; its exit status.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      // Its stdout closes when it exits: wait on that, then reap.
      if (!next(deadline - std::chrono::steady_clock::now() > 0ms
                    ? std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                    : 0ms)) {
        int status = 0;
        if (::waitpid(pid_, &status, 0) == pid_) {
          pid_ = -1;
          return status;
        }
      }
    }
    return std::nullopt;
  }

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  agent::FrameReader reader_{};
  std::deque<Frame> frames_{};
  std::vector<Frame> others_{};
};

std::string on_host_processes(const std::string& pattern) {
  return sandboxio::testing::capture("pgrep -f '" + pattern + "' || true");
}

// ---- where the agent runs ----

struct Where {
  std::string name;
  std::string image;  // empty: on this machine, as a child process
};

void PrintTo(const Where& w, std::ostream* os) {
  *os << w.name;
}

std::string PrintWhere(const ::testing::TestParamInfo<Where>& info) {
  return info.param.name;
}

class AgentTest : public ::testing::TestWithParam<Where> {
 protected:
  void SetUp() override {
    if (!GetParam().image.empty()) {
      SBX_REQUIRE_ENGINE();
      ensure_agent_only_image();
    }
  }
  std::unique_ptr<Client> launch(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv;
    if (GetParam().image.empty()) {
      argv = {agent_path()};
    } else {
      argv = {"docker",
              "run",
              "-i",
              "--rm",
              "--network=none",
              "--cap-drop=ALL",
              "--label",
              "io.sandboxio.test=agent",
              "-v",
              agent_path() + ":/.sandboxio/agent:ro",
              "--entrypoint",
              "/.sandboxio/agent",
              GetParam().image};
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = std::make_unique<Client>(argv);
    welcome_ = c->hello();
    return c;
  }
  bool in_container() const { return !GetParam().image.empty(); }
  bool has_shell() const { return GetParam().name != "nothing_but_the_agent"; }
  /// Processes matching `pattern` where the agent runs.
  std::string processes(std::unique_ptr<Client>& c, const std::string& pattern) {
    if (!in_container()) return on_host_processes(pattern);
    auto r =
        c->run(900, {"sh", "-c",
                     "for f in /proc/[0-9]*/cmdline; do tr '\\000' ' ' < $f 2>/dev/null; echo; "
                     "done | grep '" +
                         pattern + "' || true"});
    return r.out;
  }
  static void ensure_agent_only_image() {
    static bool made = false;
    if (made) return;
    // An image with no shell and no libraries: one static binary, the agent itself.
    int status = 0;
    // Tests run in parallel processes: the image is replaced only when it holds another
    // build's agent (its label says which), never removed under a test that uses it; the
    // replaced one is pruned once no container uses it.
    sandboxio::testing::capture(
        "set -e; img=sandboxio-test/agent-only:latest; "
        "sum=$(sha256sum " +
            agent_path() +
            " | cut -c1-16); "
            "have=$(docker image inspect -f '{{index .Config.Labels \"io.sandboxio.agent-sha\"}}' "
            "$img 2>/dev/null || true); "
            "if [ \"$have\" != \"$sum\" ]; then "
            "d=$(mktemp -d); mkdir -p $d/.sandboxio; cp " +
            agent_path() +
            " $d/.sandboxio/agent; "
            "tar -C $d -c . | docker import --change \"LABEL io.sandboxio.agent-sha=$sum\" - $img "
            ">/dev/null; rm -rf $d; "
            "docker image prune -f --filter label=io.sandboxio.agent-sha >/dev/null 2>&1 || true; "
            "fi",
        &status);
    made = status == 0;
  }
  agent::Welcome welcome_{};
};

TEST_P(AgentTest, HandshakeSaysVersionAndWhatTheImageHas) {
  auto c = launch();
  EXPECT_EQ(welcome_.version, agent::kVersion);
  EXPECT_EQ(welcome_.agent, "sandboxio-agent 0.1.0");
  if (in_container()) {
    EXPECT_EQ(welcome_.pid, 1u) << "the agent is the container's init";
  }
  const bool python = GetParam().name == "python_image" || !in_container();
  EXPECT_EQ((welcome_.features & agent::kPython3) != 0, python) << welcome_.python;
  c->send(Type::Ping, 0, agent::Ping{42}.encode());
  auto pong = c->next_on(0);
  ASSERT_TRUE(pong && pong->type == Type::Pong);
  EXPECT_EQ(agent::Ping::decode(pong->payload).value().nonce, 42u);
}

int connect_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

TEST_P(AgentTest, TunnelsRelayBytesBothWaysUnderCreditAndEndCleanly) {
  if (in_container())
    GTEST_SKIP() << "the proxy listens on the container's own loopback: the contract suite's "
                    "network.allow_list reaches it from inside";
  auto c = launch();
  const std::uint16_t port = sandboxio::testing::free_loopback_port();
  c->send(Type::EgressListen, 9, agent::EgressListen{port}.encode());
  auto listening = c->next_on(9);
  ASSERT_TRUE(listening && listening->type == Type::Done);

  // One connection: a tunnel on an agent channel, bytes both ways, each end passed on.
  const int s = connect_loopback(port);
  auto open = c->next();
  ASSERT_TRUE(open && open->type == Type::TunnelOpen);
  const std::uint32_t ch = open->channel;
  EXPECT_NE(ch & agent::kAgentChannel, 0u);
  const std::string head = "CONNECT x:1 HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::write(s, head.data(), head.size()), static_cast<ssize_t>(head.size()));
  std::string up;
  while (up.size() < head.size()) {
    auto d = c->next_on(ch);
    ASSERT_TRUE(d && d->type == Type::TunnelData);
    up += d->payload;
  }
  EXPECT_EQ(up, head);  // relayed as it came, never parsed
  c->send(Type::TunnelData, ch, "reply");
  char buf[64];
  ASSERT_EQ(::read(s, buf, sizeof buf), 5);
  auto credit = c->next_on(ch);
  ASSERT_TRUE(credit && credit->type == Type::Credit) << "written bytes are credited back";
  EXPECT_EQ(agent::Credit::decode(credit->payload).value().bytes, 5u);
  ::shutdown(s, SHUT_WR);
  auto end = c->next_on(ch);
  ASSERT_TRUE(end && end->type == Type::TunnelEnd);
  c->send(Type::TunnelEnd, ch);
  EXPECT_EQ(::read(s, buf, sizeof buf), 0) << "the host's end is the program's EOF";
  ::close(s);

  // The agent reads a program's bytes only as far as the host's credit goes.
  const int flood = connect_loopback(port);
  auto open2 = c->next();
  ASSERT_TRUE(open2 && open2->type == Type::TunnelOpen);
  const std::uint32_t ch2 = open2->channel;
  ::fcntl(flood, F_SETFL, O_NONBLOCK);
  const std::string block(1 << 20, 'f');
  std::size_t written = 0;
  for (int i = 0; i < 64; ++i) {
    const ssize_t n = ::write(flood, block.data(), block.size());
    if (n > 0) written += static_cast<std::size_t>(n);
  }
  ASSERT_GT(written, std::size_t{agent::kTunnelWindow});
  std::size_t relayed = 0;
  while (relayed < agent::kTunnelWindow) {
    auto d = c->next_on(ch2, 5s);
    ASSERT_TRUE(d && d->type == Type::TunnelData);
    relayed += d->payload.size();
  }
  EXPECT_EQ(relayed, std::size_t{agent::kTunnelWindow});
  EXPECT_FALSE(c->next_on(ch2, 300ms).has_value()) << "more than the credit was relayed";
  c->send(Type::Credit, ch2, agent::Credit{4096}.encode());
  auto more = c->next_on(ch2);
  ASSERT_TRUE(more && more->type == Type::TunnelData);
  EXPECT_LE(more->payload.size(), 4096u);

  ::close(flood);
}

TEST_P(AgentTest, ExitCodesAndSignalsAreWhatWaitpidSaid) {
  if (!has_shell()) GTEST_SKIP() << "no shell in this image";
  auto c = launch();
  auto r = c->run(1, {"sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  ASSERT_TRUE(r.exit);
  EXPECT_EQ(r.exit->how, agent::Exit::How::Exited);
  EXPECT_EQ(r.exit->value, 3);
  // Above 128 is still an exit code, not a signal.
  r = c->run(2, {"sh", "-c", "exit 200"});
  EXPECT_EQ(r.exit->how, agent::Exit::How::Exited);
  EXPECT_EQ(r.exit->value, 200);
  r = c->run(3, {"sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(r.exit->how, agent::Exit::How::Signalled);
  EXPECT_EQ(r.exit->value, SIGTERM);
  r = c->run(4, {"/no/such/program"});
  EXPECT_EQ(r.exit->how, agent::Exit::How::StartFailed);
  EXPECT_EQ(r.exit->value, ENOENT);
}

TEST_P(AgentTest, CommandsCannotReachIntoTheAgent) {
  if (!in_container() || !has_shell()) GTEST_SKIP() << "needs a sandbox with a shell";
  auto c = launch();
  // Root in the container like the agent, but without CAP_SYS_PTRACE: the agent is not
  // dumpable, so its descriptors, memory and environment are out of reach, and init ignores
  // signals it has no handler for.
  auto r = c->run(1, {"sh", "-c",
                      "readlink /proc/1/fd/0 >/dev/null 2>&1 && echo fd; "
                      "cat /proc/1/environ >/dev/null 2>&1 && echo environ; "
                      "head -c1 /proc/1/mem >/dev/null 2>&1 && echo mem; "
                      "{ echo hi > /proc/1/fd/1; } 2>/dev/null && echo wrote; "
                      "kill -KILL 1 2>/dev/null; kill -STOP 1 2>/dev/null; echo end"});
  ASSERT_TRUE(r.exit);
  EXPECT_EQ(r.out, "end\n");
  c->send(Type::Ping, 0, agent::Ping{7}.encode());
  auto pong = c->next_on(0);
  ASSERT_TRUE(pong && pong->type == Type::Pong) << "the agent survived its commands";
}

TEST_P(AgentTest, StdinReachesTheProcessAndItsEndIsSeen) {
  if (!has_shell()) GTEST_SKIP() << "no shell in this image";
  auto c = launch();
  auto r = c->run(1, {"cat"}, std::string("line one\nline two\0three", 23));
  EXPECT_EQ(r.out, std::string("line one\nline two\0three", 23));
  EXPECT_EQ(r.exit->value, 0);
}

TEST_P(AgentTest, OutputWaitsForCreditSoASlowHostSlowsTheProcess) {
  if (!has_shell()) GTEST_SKIP() << "no shell in this image";
  auto c = launch();
  agent::Start s;
  s.argv = {"sh", "-c", "head -c 3000000 /dev/zero"};
  s.env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  s.window = 100000;
  c->send(Type::Start, 1, s.encode());
  std::size_t got = 0;
  // Without credit the agent sends at most the window, however long we wait for more.
  for (;;) {
    auto f = c->next_on(1, got >= s.window ? 300ms : 20s);
    if (!f) break;
    ASSERT_EQ(f->type, Type::Output) << agent::to_string(f->type);
    got += agent::Output::decode(f->payload).value().data.size();
    ASSERT_LE(got, s.window);
  }
  EXPECT_EQ(got, s.window);
  c->send(Type::Credit, 1, agent::Credit{3000000}.encode());
  auto rest = c->collect(1);
  EXPECT_EQ(got + rest.out.size(), 3000000u);
  ASSERT_TRUE(rest.exit);
  EXPECT_EQ(rest.exit->value, 0);
}

TEST_P(AgentTest, KillingATreeReachesSetsidDoubleForkAndClearedEnvironments) {
  if (!has_shell()) GTEST_SKIP() << "no shell in this image";
  auto c = launch();
  agent::Start s;
  s.argv = {"sh", "-c",
            "setsid sleep 1001 & (sleep 1002 &) ; env -i sleep 1003 & "
            "nohup sleep 1004 >/dev/null 2>&1 & echo ready; sleep 1005"};
  s.env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  c->send(Type::Start, 1, s.encode());
  std::string out;
  while (out.find("ready") == std::string::npos) {
    auto f = c->next_on(1);
    ASSERT_TRUE(f);
    if (f->type == Type::Output) out += agent::Output::decode(f->payload).value().data;
  }
  c->send(Type::Signal, 1, agent::Signal{true, SIGKILL}.encode());
  auto r = c->collect(1);
  ASSERT_TRUE(r.exit);
  EXPECT_EQ(r.exit->how, agent::Exit::How::Signalled);
  EXPECT_EQ(r.exit->value, SIGKILL);
  EXPECT_EQ(processes(c, "sleep 100[1-5]"), "") << "a process escaped the kill";
  // The next command works.
  EXPECT_EQ(c->run(2, {"echo", "next"}).out, "next\n");
}

TEST_P(AgentTest, FilesRoundTripInChunksAndFailuresAreCoded) {
  auto c = launch();
  std::string data(3'000'000, '\0');
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<char>((i * 7919) >> 3);
  agent::PathRequest w;
  w.path = "/tmp/sbx-agent-test/deep/file.bin";
  w.flags = agent::PathRequest::kParents;
  w.mode = 0640;
  c->send(Type::WriteFile, 1, w.encode());
  for (std::size_t off = 0; off < data.size(); off += agent::kChunk)
    c->send(Type::FileData, 1, std::string_view(data).substr(off, agent::kChunk));
  c->send(Type::FileEnd, 1);
  auto done = c->next_on(1);
  ASSERT_TRUE(done);
  ASSERT_EQ(done->type, Type::Done) << agent::Failure::decode(done->payload).value().message;
  EXPECT_EQ(agent::Done::decode(done->payload).value().size, data.size());

  agent::PathRequest r;
  r.path = w.path;
  r.window = 200000;
  c->send(Type::ReadFile, 2, r.encode());
  auto opened = c->next_on(2);  // the size comes first, so the host allocates once
  ASSERT_TRUE(opened && opened->type == Type::Entries);
  EXPECT_EQ(agent::Entries::decode(opened->payload).value().entries.at(0).size, data.size());
  std::string back;
  for (;;) {
    auto f = c->next_on(2);
    ASSERT_TRUE(f);
    if (f->type == Type::FileEnd) break;
    ASSERT_EQ(f->type, Type::FileData);
    back += f->payload;
    c->send(Type::Credit, 2, agent::Credit{static_cast<std::uint32_t>(f->payload.size())}.encode());
  }
  EXPECT_TRUE(back == data) << "read back " << back.size() << " bytes";

  agent::PathRequest l;
  l.path = "/tmp/sbx-agent-test/deep";
  c->send(Type::ListDir, 3, l.encode());
  auto entries = c->next_on(3);
  ASSERT_TRUE(entries && entries->type == Type::Entries);
  auto list = agent::Entries::decode(entries->payload).value();
  ASSERT_EQ(list.entries.size(), 1u);
  EXPECT_EQ(list.entries[0].name, "file.bin");
  EXPECT_EQ(list.entries[0].size, data.size());
  EXPECT_EQ(list.entries[0].mode, 0640u);
  EXPECT_EQ(c->next_on(3)->type, Type::Done);

  auto failure = [&](Type type, std::uint32_t ch, const std::string& path) {
    agent::PathRequest p;
    p.path = path;
    c->send(type, ch, p.encode());
    auto f = c->next_on(ch);
    EXPECT_TRUE(f && f->type == Type::Failure);
    return agent::Failure::decode(f ? f->payload : "").value().problem(path).code;
  };
  EXPECT_EQ(failure(Type::ReadFile, 4, "/tmp/sbx-agent-test/missing"),
            sandboxio::errc::FileNotFound);
  EXPECT_EQ(failure(Type::ReadFile, 5, "/tmp/sbx-agent-test"), sandboxio::errc::IsADirectory);
  EXPECT_EQ(failure(Type::ListDir, 6, w.path), sandboxio::errc::NotADirectory);

  // A Signal cancels a transfer: the read stops and its channel is free again; the write
  // leaves neither the target nor its temporary file.
  agent::PathRequest slow = r;
  slow.window = 1000;
  c->send(Type::ReadFile, 9, slow.encode());
  ASSERT_EQ(c->next_on(9)->type, Type::Entries);
  ASSERT_EQ(c->next_on(9)->payload.size(), 1000u);
  c->send(Type::Signal, 9, agent::Signal{false, 0}.encode());
  c->send(Type::ReadFile, 9, slow.encode());
  auto again = c->next_on(9);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->type, Type::Entries) << "the cancelled read still holds its channel";
  c->send(Type::Signal, 9, agent::Signal{false, 0}.encode());
  agent::PathRequest partial;
  partial.path = "/tmp/sbx-agent-test/deep/partial.bin";
  c->send(Type::WriteFile, 10, partial.encode());
  c->send(Type::FileData, 10, "half of it");
  c->send(Type::Signal, 10, agent::Signal{false, 0}.encode());
  EXPECT_EQ(failure(Type::Stat, 11, partial.path), sandboxio::errc::FileNotFound);
  EXPECT_EQ(failure(Type::Stat, 12, "/tmp/sbx-agent-test/deep/.sandboxio-upload-10"),
            sandboxio::errc::FileNotFound);

  agent::PathRequest rm;
  rm.path = "/tmp/sbx-agent-test";
  rm.flags = agent::PathRequest::kRecursive;
  c->send(Type::Remove, 7, rm.encode());
  EXPECT_EQ(c->next_on(7)->type, Type::Done);
  EXPECT_EQ(failure(Type::Stat, 8, "/tmp/sbx-agent-test"), sandboxio::errc::FileNotFound);
}

TEST_P(AgentTest, TheOwnerLeavingEndsTheSandboxAndEverythingInIt) {
  if (!has_shell()) GTEST_SKIP() << "no shell in this image";
  auto c = launch();
  agent::Start s;
  s.argv = {"sh", "-c", "setsid sleep 1011 & echo ready; sleep 1012"};
  s.env = {"PATH=/usr/bin:/bin"};
  c->send(Type::Start, 1, s.encode());
  auto f = c->next_on(1);
  ASSERT_TRUE(f && f->type == Type::Output);
  c->close_input();  // the owner's end of the stream closes
  auto status = c->wait_exit(10s);
  ASSERT_TRUE(status) << "the agent did not end when its owner left";
  EXPECT_TRUE(WIFEXITED(*status)) << *status;
  if (!in_container()) {
    EXPECT_EQ(on_host_processes("sleep 101[12]"), "");
  }
}

TEST_P(AgentTest, TheLifetimeEndsTheSandbox) {
  auto c = launch({"--lifetime", "1"});
  auto status = c->wait_exit(10s);
  ASSERT_TRUE(status) << "the agent outlived its lifetime";
}

TEST_P(AgentTest, AMalformedFrameEndsTheSessionWithAFailure) {
  auto c = launch();
  // A header announcing a 16 MiB payload: refused before anything is allocated for it.
  c->send_raw(std::string("\x01\x00\x00\x00\x02\x00\x00\x00\x01", 9));
  auto f = c->next_on(0);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, Type::Failure);
  EXPECT_TRUE(c->wait_exit(10s)) << "the agent kept running after a malformed frame";
}

// ---- code contexts ----

bool has_python(const Where& w) {
  return w.image.empty() || w.name == "python_image";
}

TEST_P(AgentTest, ACodeContextKeepsItsNamespaceAndReportsValuesAndExceptions) {
  auto c = launch();
  if (!has_python(GetParam())) {
    auto failure = c->context(1);
    ASSERT_TRUE(failure) << "a context started without python3";
    EXPECT_EQ(failure->error, ENOENT);
    EXPECT_EQ(c->code(2, 1, "1").failure->error, ENOENT) << "a cell ran in no context";
    return;
  }
  ASSERT_FALSE(c->context(1));
  auto r = c->code(2, 1, "x = 41\nprint('set')");
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.done->how, agent::CodeDone::How::Finished);
  EXPECT_EQ(r.out, "set\n");
  EXPECT_TRUE(r.events.empty());

  r = c->code(3, 1, "import os\nos.system('echo from-a-child; echo oops >&2')\nx + 1");
  EXPECT_EQ(r.out, "from-a-child\n") << "a subprocess's output belongs to its cell";
  EXPECT_EQ(r.err, "oops\n");
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].kind, agent::CodeEvent::Kind::Result);
  ASSERT_FALSE(r.events[0].bundle.empty());
  EXPECT_EQ(r.events[0].bundle[0], std::make_pair(std::string("text/plain"), std::string("42")));

  r = c->code(4, 1,
              "class Table:\n"
              "    def _repr_html_(self): return '<table></table>'\n"
              "    def _repr_png_(self): return b'\\x89PNG'\n"
              "    def _repr_json_(self): return {'a': [1, 'b\"']}\n"
              "    def __repr__(self): return 'Table()'\n"
              "display(Table())\n"
              "print('between')\n"
              "Table()");
  EXPECT_EQ(r.out, "between\n");
  ASSERT_EQ(r.events.size(), 2u) << "display() and the last expression";
  using Bundle = std::vector<std::pair<std::string, std::string>>;
  const Bundle want = {{"text/plain", "Table()"},
                       {"text/html", "<table></table>"},
                       {"image/png", "iVBORw=="},
                       {"application/json", R"({"a":[1,"b\""]})"}};
  EXPECT_EQ(r.events[0].bundle, want);
  EXPECT_EQ(r.events[1].bundle, want);

  r = c->code(5, 1, "def f():\n    raise ValueError('boom')\nf()");
  ASSERT_EQ(r.events.size(), 1u);
  const auto& e = r.events[0];
  EXPECT_EQ(e.kind, agent::CodeEvent::Kind::Error);
  EXPECT_EQ(e.name, "ValueError");
  EXPECT_EQ(e.value, "boom");
  EXPECT_NE(e.traceback.find("raise ValueError('boom')"), std::string::npos) << e.traceback;
  EXPECT_NE(e.traceback.find("ValueError: boom"), std::string::npos) << e.traceback;
  EXPECT_EQ(e.traceback.find("<string>"), std::string::npos) << "the bootstrap's own frames";
  EXPECT_EQ(e.traceback.find("<sandboxio>"), std::string::npos) << "the bootstrap's own frames";
  EXPECT_EQ(processes(c, "mime_bundl[e]"), "") << "the bootstrap's text is on a command line";
  EXPECT_EQ(r.done->how, agent::CodeDone::How::Finished);

  r = c->code(6, 1, "print(x)");
  EXPECT_EQ(r.out, "41\n") << "the namespace survived an exception";

  // A second context has a namespace of its own.
  ASSERT_FALSE(c->context(7));
  r = c->code(8, 7, "print('x' in dir())");
  EXPECT_EQ(r.out, "False\n");
  c->send(Type::ContextEnd, 7);
  EXPECT_EQ(c->next_on(7)->type, Type::Done);
  EXPECT_EQ(c->code(9, 7, "1").failure->error, ENOENT);
}

// Where the agent is not its PID namespace's init (on a host, under a supervisor), a SIGKILL
// leaves it no time to end what it started: its processes still go with it (PR_SET_PDEATHSIG)
// instead of living on as orphans. (A context's python3 left so used to spin at full CPU on
// its closed pipe, for ever.)
TEST_P(AgentTest, AnAgentKilledOnAHostTakesItsProcessesAndContextsAlong) {
  if (in_container()) GTEST_SKIP() << "in a container the agent is PID 1: its end is everyone's";
  auto c = launch();
  std::vector<pid_t> pids;
  agent::Start s;
  s.argv = {"sh", "-c", "echo $$; exec sleep 3171"};
  s.env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  c->send(Type::Start, 1, s.encode());
  while (pids.empty()) {
    auto f = c->next_on(1);
    ASSERT_TRUE(f) << "the command said nothing";
    if (f->type == Type::Output)
      pids.push_back(std::stoi(agent::Output::decode(f->payload).value().data));
  }
  if (has_python(GetParam())) {
    ASSERT_FALSE(c->context(2));
    const auto r = c->code(3, 2, "import os\nprint(os.getpid())");
    ASSERT_TRUE(r.done) << r.err;
    pids.push_back(std::stoi(r.out));
  }
  c->kill_agent();
  for (const pid_t pid : pids) {
    bool gone = false;
    for (int i = 0; i < 500 && !gone; ++i) {  // up to 5 s; a zombie awaiting its reaper is gone
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      std::string line;
      gone = !std::getline(stat, line) || line.find(") Z ") != std::string::npos;
      if (!gone) std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(gone) << "process " << pid << " outlived the agent";
  }
}

TEST_P(AgentTest, AnInterruptKillsWhatTheCellStartedAndKeepsTheContext) {
  if (!has_python(GetParam())) GTEST_SKIP() << "no python3 in this image";
  auto c = launch();
  ASSERT_FALSE(c->context(1));
  ASSERT_TRUE(
      c->code(2, 1, "import subprocess, time\nkept = subprocess.Popen(['sleep', '1021'])").done);
  auto r = c->code(3, 1,
                   "y = 5\n"
                   "subprocess.Popen(['sh', '-c', 'setsid sleep 1022 & env -i sleep 1023'])\n"
                   "print('ready', flush=True)\n"
                   "time.sleep(600)",
                   c->signal_when(3, "ready", SIGINT));
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.done->how, agent::CodeDone::How::Finished);
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].name, "KeyboardInterrupt");
  EXPECT_EQ(c->code(4, 1, "print(y)").out, "5\n") << "the context did not survive";
  EXPECT_EQ(processes(c, "sleep 102[23]"), "") << "a process of the interrupted cell survived";
  EXPECT_NE(processes(c, "sleep 1021"), "") << "an earlier cell's process was killed";
  c->code(5, 1, "kept.kill(); kept.wait()");
}

TEST_P(AgentTest, ARestartOrADeathGivesAFreshContextAndSaysSo) {
  if (!has_python(GetParam())) GTEST_SKIP() << "no python3 in this image";
  auto c = launch();
  ASSERT_FALSE(c->context(1));
  ASSERT_TRUE(c->code(2, 1, "z = 1").done);
  auto r = c->code(3, 1,
                   "import signal, time\n"
                   "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                   "print('deaf', flush=True)\n"
                   "time.sleep(600)",
                   c->signal_when(3, "deaf", SIGKILL));
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.done->how, agent::CodeDone::How::Restarted);
  EXPECT_EQ(c->code(4, 1, "print('z' in dir())").out, "False\n");

  r = c->code(5, 1, "import os\nprint('last words', flush=True)\nos._exit(7)");
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.out, "last words\n");
  EXPECT_EQ(r.done->how, agent::CodeDone::How::Died);
  EXPECT_FALSE(r.done->signalled);
  EXPECT_EQ(r.done->value, 7);
  EXPECT_EQ(c->code(6, 1, "print(6 * 7)").out, "42\n") << "no fresh context after a death";

  // Code that writes garbage over the bootstrap's event pipe gets a fresh context, not a
  // confused agent.
  r = c->code(7, 1,
              "import os\nos.write(4, b'\\xff\\xff\\xff\\xff')\nimport time\ntime.sleep(600)");
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.done->how, agent::CodeDone::How::Died);
  EXPECT_NE(r.done->message.find("malformed"), std::string::npos) << r.done->message;
  EXPECT_EQ(c->code(8, 1, "print('alive')").out, "alive\n");
}

// Bridge sessions, on this machine: with --socket the agent takes sessions from
// `sandboxio-agent --bridge`, each with channels of its own; what a session started ends with
// it; a malformed bridge ends only itself; with --outlive the owner may leave and a bridge
// still reaches the agent. (In containers: DockerAgent.* in tests/docker.)
TEST(AgentBridge, SessionsShareTheAgentButNotTheirChannelsAndEndWhatTheyStarted) {
  if (::geteuid() != 0) GTEST_SKIP() << "bridge sessions need the agent to run as root";
  char dir[] = "/tmp/sbx-bridge-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string sock = std::string(dir) + "/run/agent.sock";
  const std::vector<std::string> bridge_argv = {agent_path(), "--bridge", "--socket", sock};
  const std::vector<std::string> path = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  auto owner = std::make_unique<Client>(
      std::vector<std::string>{agent_path(), "--outlive", "--socket", sock});
  const auto welcome = owner->hello();

  // The owner holds channel 1 with a command waiting for its stdin, while a bridge uses
  // channel 1 too.
  agent::Start waiting;
  waiting.argv = {"sh", "-c", "read x; echo owner-$x"};
  waiting.env = path;
  waiting.stdin_open = true;
  owner->send(Type::Start, 1, waiting.encode());
  auto bridge = std::make_unique<Client>(bridge_argv);
  EXPECT_EQ(bridge->hello().pid, welcome.pid) << "the bridge reached the same agent";
  EXPECT_EQ(bridge->run(1, {"sh", "-c", "echo bridge"}, {}, path).out, "bridge\n");
  owner->send(Type::Stdin, 1, "a\n");
  owner->send(Type::StdinClose, 1);
  EXPECT_EQ(owner->collect(1).out, "owner-a\n");

  // A command of the bridge's ends with its session.
  agent::Start held;
  held.argv = {"sh", "-c", "echo up; exec sleep 4401"};
  held.env = path;
  bridge->send(Type::Start, 2, held.encode());
  auto up = bridge->next_on(2);
  ASSERT_TRUE(up && up->type == Type::Output);
  EXPECT_NE(on_host_processes("sleep 440[1]"), "");
  bridge.reset();  // the bridge's stdin closes: it ends the session and exits
  const auto gone = owner->run(
      3, {"sh", "-c", "while pgrep -f 'sleep 440[1]' >/dev/null; do :; done; echo gone"}, {}, path);
  EXPECT_EQ(gone.out, "gone\n");

  // Garbage on a bridge ends that session, not the agent.
  {
    Client bad(bridge_argv);
    bad.send_raw(std::string("\xff\xff\xff\xff\x01 not a frame", 16));
    auto f = bad.next();
    ASSERT_TRUE(f);
    EXPECT_EQ(f->type, Type::Failure);
    EXPECT_FALSE(bad.next(5s)) << "the malformed session was not ended";
  }
  owner->send(Type::Ping, 0, agent::Ping{9}.encode());
  auto pong = owner->next_on(0);
  ASSERT_TRUE(pong && pong->type == Type::Pong);

  // --outlive: the owner leaves, a bridge still reaches the agent, and may end it. The
  // bridge connects first and runs its command once the owner's session is gone (its stdout
  // closed): the agent's descriptors 0 and 1 are free then, and a command's pipes must not
  // land on them and close at exec.
  {
    Client later(bridge_argv);
    EXPECT_EQ(later.hello().pid, welcome.pid);
    owner->close_input();
    EXPECT_FALSE(owner->next(10s)) << "the owner's session did not end";
    EXPECT_EQ(later.run(1, {"sh", "-c", "echo still"}, {}, path).out, "still\n");
    EXPECT_EQ(later.run(2, {"sh", "-c", "echo again >&2"}, {}, path).err, "again\n");
    later.send(Type::Shutdown, 0);
    EXPECT_TRUE(later.wait_exit(10s)) << "the bridge did not end with the agent";
  }
  const auto status = owner->wait_exit(10s);
  ASSERT_TRUE(status) << "the agent did not end on Shutdown";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  sandboxio::testing::capture(std::string("rm -rf ") + dir);
}

INSTANTIATE_TEST_SUITE_P(
    Agent, AgentTest,
    ::testing::Values(Where{"on_this_machine", ""},
                      Where{"python_image", sandboxio::testing::kPythonImage},
                      Where{"busybox_image", sandboxio::testing::kBusyboxImage},
                      Where{"nothing_but_the_agent", "sandboxio-test/agent-only:latest"}),
    PrintWhere);

}  // namespace
