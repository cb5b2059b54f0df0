// The HTTP/2 codec against a real server: Node's http2 module (tests/http2/peer.mjs) over a
// loopback socket, one connection per test. Many streams share the connection; a slow reader
// of one stream holds back only that stream; a cancelled stream gives its window back; and
// every exchange, recorded as the server's bytes, replays to the same events at every split.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "../support/http2_wire.hpp"
#include "sandboxio/codec/grpc.hpp"
#include "sandboxio/codec/protobuf.hpp"

#if !defined(SBX_HTTP2_PEER) || !defined(SBX_GRPC_PEER)
#error "SBX_HTTP2_PEER and SBX_GRPC_PEER name tests/http2/peer.mjs and tests/grpc/peer.mjs"
#endif

namespace sandboxio {
namespace {

using test::h2::Log;

// A Node peer (a script printing {"port": N} first), started once for the whole binary; it
// exits when our end of its stdin closes.
class Peer {
 public:
  static Peer& http2() {
    static Peer peer(SBX_HTTP2_PEER);
    return peer;
  }
  static Peer& grpc() {
    static Peer peer(SBX_GRPC_PEER);
    return peer;
  }
  int port() const { return port_; }

 private:
  explicit Peer(const char* script) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      execlp("node", "node", script, static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    std::string line;
    char c = 0;
    while (read(out[0], &c, 1) == 1 && c != '\n')
      line += c;
    close(out[0]);
    const auto at = line.find("\"port\":");
    if (at != std::string::npos) port_ = std::atoi(line.c_str() + at + 7);
  }
  ~Peer() {
    if (stdin_ >= 0) close(stdin_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  pid_t pid_ = -1;
  int stdin_ = -1;
  int port_ = 0;
};

// One connection to the peer, driven by a blocking loop; every byte the server sent is kept.
struct Wire {
  explicit Wire(http2::Limits limits = {}, int port = Peer::http2().port()) : h2(limits) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) ADD_FAILURE() << "connect";
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Wire() { close(fd); }

  // Writes what the codec has, reads what comes, until `done` or 20 s pass (a failure).
  // Data of streams in `slow` is left unconsumed; everything else is consumed as it comes.
  void pump(const std::function<bool()>& done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      const std::string out = h2.take_output();
      for (std::size_t at = 0; at < out.size();) {
        const auto n = write(fd, out.data() + at, out.size() - at);
        ASSERT_GT(n, 0);
        at += static_cast<std::size_t>(n);
      }
      if (done() || h2.error()) return;
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "the exchange did not finish";
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[65536];
      const auto n = read(fd, buf, sizeof buf);
      ASSERT_GT(n, 0) << "the peer closed the connection";
      received.append(buf, static_cast<std::size_t>(n));
      EXPECT_EQ(h2.handle_bytes({buf, static_cast<std::size_t>(n)}), static_cast<std::size_t>(n));
      while (auto e = h2.poll_event()) {
        if (auto* d = std::get_if<http2::Data>(&*e); d != nullptr && !slow.contains(d->stream))
          h2.consume(d->stream, d->bytes.size());
        if (std::holds_alternative<http2::End>(*e) || std::holds_alternative<http2::Reset>(*e))
          ended.insert(std::visit(
              [](const auto& v) -> http2::StreamId {
                if constexpr (std::is_same_v<std::decay_t<decltype(v)>, http2::GoAway>)
                  return 0;
                else
                  return v.stream;
              },
              *e));
        if (hook) hook(*e);
        log.add(*e);
      }
    }
  }

  int fd = -1;
  http2::Client h2;
  std::string received;
  Log log;
  std::set<http2::StreamId> slow, ended;
  std::function<void(const http2::Event&)> hook;  // sees every event first
};

http2::Request request(std::string method, std::string path) {
  return {std::move(method), "http", "127.0.0.1", std::move(path), {}};
}

std::string pattern(std::size_t n) {
  std::string s(n, 'a');
  for (std::size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>('a' + i % 26);
  return s;
}

// The server's recorded bytes, fed to a fresh client that made the same requests, at split
// sizes 1..64 and at powers of two past it: the same events every time.
void expect_replays_at_every_split(const std::string& received, const Log& live,
                                   const std::function<void(http2::Client&)>& requests,
                                   http2::Limits limits = {}) {
  std::vector<std::size_t> steps;
  for (std::size_t s = 1; s <= 64; ++s)
    steps.push_back(s);
  for (std::size_t s = 128; s < received.size(); s *= 2)
    steps.push_back(s);
  steps.push_back(received.size());
  for (const std::size_t step : steps) {
    http2::Client c(limits);
    requests(c);
    (void)c.take_output();
    Log log;
    for (std::size_t i = 0; i < received.size(); i += step) {
      const std::string_view piece = std::string_view(received).substr(i, step);
      ASSERT_EQ(c.handle_bytes(piece), piece.size()) << "step " << step;
      (void)c.take_output();
      test::h2::drain(c, log);
    }
    ASSERT_FALSE(c.error()) << "step " << step << ": " << c.error()->describe();
    ASSERT_EQ(log, live) << "step " << step;
  }
}

class Http2Peer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v node >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "*** SKIPPED: node is not installed (scripts/deps.sh installs it) ***";
    ASSERT_GT(Peer::http2().port(), 0) << "the Node HTTP/2 peer did not start";
  }
};

// Twenty downloads, an upload larger than the server's window (it must wait for the
// server's WINDOW_UPDATEs), a gRPC-shaped answer with trailers, 103 Early Hints, a 404 and a
// server-side reset: one connection, each stream its own result.
TEST_F(Http2Peer, ManyStreamsShareOneConnectionAndEachEndsAsTheServerEndedIt) {
  Wire w;
  std::vector<http2::StreamId> downloads;
  auto submit = [&](http2::Client& c) {
    downloads.clear();
    for (int i = 0; i < 20; ++i)
      downloads.push_back(
          c.submit_request(request("GET", "/bytes?n=" + std::to_string(3000 + i) + "&chunk=700"),
                           true)
              .value());
    const auto echo = c.submit_request(request("POST", "/echo"), false).value();
    c.submit_data(echo, pattern(200000), true);
    (void)c.submit_request(request("POST", "/grpc"), true).value();
    (void)c.submit_request(request("GET", "/interim"), true).value();
    (void)c.submit_request(request("GET", "/status/404"), true).value();
    (void)c.submit_request(request("GET", "/reset"), true).value();
  };
  submit(w.h2);
  EXPECT_EQ(w.h2.open_streams(), 25U);
  w.pump([&] { return w.ended.size() == 25; });
  ASSERT_FALSE(w.h2.error()) << w.h2.error()->describe();
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(w.log.bodies[downloads[i]], pattern(3000 + static_cast<std::size_t>(i))) << i;
  auto has = [&](const std::string& line) {
    return std::find(w.log.lines.begin(), w.log.lines.end(), line) != w.log.lines.end();
  };
  EXPECT_EQ(w.log.bodies[41].size(), 200000U);
  EXPECT_EQ(w.log.bodies[41], pattern(200000));
  EXPECT_TRUE(has("trailers 41 x-received=200000"));
  EXPECT_TRUE(has("trailers 43 grpc-status=0 grpc-message="));
  EXPECT_EQ(w.log.bodies[43], std::string("\0\0\0\0\5hello", 10));
  EXPECT_EQ(w.log.bodies[45], "after hints");
  EXPECT_EQ(w.log.bodies[47], "no such thing");
  EXPECT_TRUE(has("end 47"));
  EXPECT_TRUE(has("reset 49 2 RemoteProtocolViolation")) << [&] {
    std::string s;
    for (auto& l : w.log.lines)
      if (l.find(" 49") != std::string::npos) s += l + "\n";
    return s;
  }();
  EXPECT_EQ(w.h2.open_streams(), 0U);
  expect_replays_at_every_split(w.received, w.log, submit);
}

// A reader that does not keep up with one stream: that stream stops at its window, the
// other nineteen run to their end on the same connection; once read, it finishes too.
TEST_F(Http2Peer, ASlowReaderOfOneStreamDoesNotStallTheOthers) {
  http2::Limits limits;
  limits.stream_window = 64 * 1024;
  Wire w(limits);
  constexpr std::size_t kEach = 1 << 20;
  std::vector<http2::StreamId> ids;
  for (int i = 0; i < 20; ++i)
    ids.push_back(
        w.h2.submit_request(request("GET", "/bytes?n=" + std::to_string(kEach)), true).value());
  w.slow.insert(ids[0]);
  w.pump([&] { return w.ended.size() == 19; });
  ASSERT_FALSE(w.h2.error()) << w.h2.error()->describe();
  for (int i = 1; i < 20; ++i)
    EXPECT_EQ(w.log.bodies[ids[i]].size(), kEach) << i;
  EXPECT_FALSE(w.ended.contains(ids[0]));
  EXPECT_LE(w.log.bodies[ids[0]].size(), 64U * 1024U) << "the slow stream passed its window";
  EXPECT_GT(w.log.bodies[ids[0]].size(), 0U);
  // The reader catches up.
  w.slow.clear();
  w.h2.consume(ids[0], w.log.bodies[ids[0]].size());
  w.pump([&] { return w.ended.size() == 20; });
  EXPECT_EQ(w.log.bodies[ids[0]], pattern(kEach));
}

// A cancelled download frees what it held of the connection's window: with a connection
// window of one stream's worth, the next download still runs to its end.
TEST_F(Http2Peer, ACancelledStreamLeavesTheConnectionUsable) {
  http2::Limits limits;
  limits.stream_window = 256 * 1024;
  limits.connection_window = 256 * 1024;
  Wire w(limits);
  const auto big = w.h2.submit_request(request("GET", "/bytes?n=8388608"), true).value();
  w.slow.insert(big);
  w.pump([&] { return w.log.bodies[big].size() >= 200 * 1024; });
  w.h2.cancel(big);
  const auto next = w.h2.submit_request(request("GET", "/bytes?n=2097152"), true).value();
  w.pump([&] { return w.ended.contains(next); });
  ASSERT_FALSE(w.h2.error()) << w.h2.error()->describe();
  EXPECT_EQ(w.log.bodies[next], pattern(2097152));
  EXPECT_FALSE(w.ended.contains(big));  // nothing more was reported for it
}

// A header block past the bound resets that stream alone, with a coded error.
TEST_F(Http2Peer, AnOversizedHeaderBlockResetsOnlyItsStream) {
  http2::Limits limits;
  limits.max_header_list_bytes = 16 * 1024;
  Wire w(limits);
  const auto big = w.h2.submit_request(request("GET", "/headers?count=40"), true).value();
  const auto ok = w.h2.submit_request(request("GET", "/headers?count=4"), true).value();
  w.pump([&] { return w.ended.size() == 2; });
  ASSERT_FALSE(w.h2.error());
  EXPECT_NE(std::find(w.log.lines.begin(), w.log.lines.end(),
                      "reset " + std::to_string(big) + " 2 MessageTooLarge"),
            w.log.lines.end());
  EXPECT_EQ(w.log.bodies[ok], "headers sent");
}

// ---- gRPC on the codec, against Node's reference gRPC server (@grpc/grpc-js) ----

struct EchoRequest {
  std::string text{};
  int repeat = 0;
  int fail_code = 0;
  std::string fail_message{};
  std::string blob{};
  std::string bytes() const {
    protobuf::Writer w;
    w.string(1, text);
    w.varint(2, static_cast<std::uint64_t>(repeat));
    w.varint(3, static_cast<std::uint64_t>(fail_code));
    w.string(4, fail_message);
    w.string(5, blob);
    return std::move(w).bytes();
  }
};

struct EchoReply {
  std::string text, blob, authorization, timeout;
  int index = 0;
  static EchoReply parse(std::string_view wire) {
    EchoReply r;
    protobuf::Reader reader(wire);
    protobuf::Field f;
    while (reader.next(f)) {
      if (f.number == 1) r.text = f.bytes;
      if (f.number == 2) r.index = static_cast<int>(f.value);
      if (f.number == 3) r.blob = f.bytes;
      if (f.number == 4) r.authorization = f.bytes;
      if (f.number == 5) r.timeout = f.bytes;
    }
    EXPECT_FALSE(reader.failed());
    return r;
  }
};

// One call: its stream, its reader, the replies it gave.
struct Call {
  http2::StreamId stream = 0;
  grpc::CallReader reader;
  std::vector<EchoReply> replies;
  explicit Call(std::size_t max = 4 << 20) : reader(max) {}
};

class GrpcPeer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v node >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "*** SKIPPED: node is not installed (scripts/deps.sh installs it) ***";
    if (std::system("test -d " SBX_GRPC_NODE_MODULES "/@grpc/grpc-js") != 0)
      GTEST_SKIP() << "*** SKIPPED: @grpc/grpc-js is not installed (npm ci in tests/grpc) ***";
    ASSERT_GT(Peer::grpc().port(), 0) << "the gRPC peer did not start";
  }

  // Starts a call on `w` whose events go to `call`; `messages` are sent, and the request ends.
  static void start(Wire& w, Call& call, const std::string& method,
                    const std::vector<std::string>& messages,
                    std::vector<http::Header> metadata = {},
                    std::optional<std::chrono::milliseconds> timeout = {}) {
    auto id = w.h2.submit_request(grpc::request("127.0.0.1", "/sandboxio.test.Echo/" + method,
                                                std::move(metadata), timeout, "http"),
                                  false);
    ASSERT_TRUE(id) << id.problem().describe();
    call.stream = id.value();
    for (std::size_t i = 0; i < messages.size(); ++i)
      w.h2.submit_data(call.stream, grpc::frame(messages[i]), i + 1 == messages.size());
    if (messages.empty()) w.h2.submit_data(call.stream, "", true);
  }

  static void route(Wire& w, std::vector<Call*> calls) {
    w.hook = [calls](const http2::Event& e) {
      for (Call* c : calls) {
        const bool mine = std::visit(
            [&](const auto& v) {
              if constexpr (std::is_same_v<std::decay_t<decltype(v)>, http2::GoAway>)
                return false;
              else
                return v.stream == c->stream;
            },
            e);
        if (!mine) continue;
        c->reader.on(e);
        while (auto m = c->reader.next_message())
          c->replies.push_back(EchoReply::parse(*m));
      }
    };
    w.pump([&] {
      return std::all_of(calls.begin(), calls.end(), [](Call* c) { return c->reader.done(); });
    });
  }
};

// Unary, server-streaming and client-streaming calls, side by side on one connection, with
// metadata and a deadline the server sees.
TEST_F(GrpcPeer, UnaryServerStreamingAndClientStreamingCallsShareOneConnection) {
  Wire w({}, Peer::grpc().port());
  Call unary, stream, collect;
  start(w, unary, "Unary", {EchoRequest{"hello", 0, 0, "", std::string(300000, 'b')}.bytes()},
        {{"Authorization", "Bearer t0ken"}}, std::chrono::seconds(5));
  start(w, stream, "Stream", {EchoRequest{"tick", 50}.bytes()});
  std::vector<std::string> parts;
  for (int i = 0; i < 10; ++i)
    parts.push_back(EchoRequest{"a" + std::to_string(i)}.bytes());
  start(w, collect, "Collect", parts, {{"authorization", "Bearer c"}});
  route(w, {&unary, &stream, &collect});
  ASSERT_FALSE(w.h2.error());

  ASSERT_TRUE(unary.reader.status().ok()) << unary.reader.status().message;
  ASSERT_EQ(unary.replies.size(), 1U);
  EXPECT_EQ(unary.replies[0].text, "hello");
  EXPECT_EQ(unary.replies[0].blob, std::string(300000, 'b'));
  EXPECT_EQ(unary.replies[0].authorization, "Bearer t0ken");
  EXPECT_EQ(unary.replies[0].timeout, "5s");  // grpc-timeout: 5000m, as the server's deadline

  ASSERT_TRUE(stream.reader.status().ok());
  ASSERT_EQ(stream.replies.size(), 50U);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(stream.replies[i].text, "tick " + std::to_string(i));

  ASSERT_TRUE(collect.reader.status().ok());
  ASSERT_EQ(collect.replies.size(), 1U);
  EXPECT_EQ(collect.replies[0].text, "a0,a1,a2,a3,a4,a5,a6,a7,a8,a9");
  EXPECT_EQ(collect.replies[0].index, 10);
}

// A status from the server: before any message (grpc-js answers Trailers-Only), after some
// messages (trailers), its message percent-decoded and its trailers kept; and a method the
// server does not have.
TEST_F(GrpcPeer, StatusesArriveWithTheirMessageAndTrailers) {
  Wire w({}, Peer::grpc().port());
  Call early, late, missing;
  start(w, early, "Unary",
        {EchoRequest{"x", 0, 5, "no such sandbox: sb-1 (50% gone, \xc3\xa9t\xc3\xa9)"}.bytes()});
  start(w, late, "Stream", {EchoRequest{"tick", 3, 14, "the router went away"}.bytes()});
  start(w, missing, "Nope", {EchoRequest{"x"}.bytes()});
  route(w, {&early, &late, &missing});
  EXPECT_EQ(early.reader.status().code, grpc::Code::NotFound);
  EXPECT_EQ(early.reader.status().message, "no such sandbox: sb-1 (50% gone, \xc3\xa9t\xc3\xa9)");
  EXPECT_FALSE(early.reader.status().synthesized);
  EXPECT_TRUE(early.replies.empty());
  bool warned = false;
  for (const auto& h : early.reader.status().trailers)
    warned |= h.name == "x-peer-warning" && h.value == "as asked";
  EXPECT_TRUE(warned);

  EXPECT_EQ(late.replies.size(), 3U);
  EXPECT_EQ(late.reader.status().code, grpc::Code::Unavailable);
  EXPECT_EQ(late.reader.status().message, "the router went away");

  EXPECT_EQ(missing.reader.status().code, grpc::Code::Unimplemented);
  EXPECT_EQ(grpc::code_name(missing.reader.status().code), "UNIMPLEMENTED");
  expect_replays_at_every_split(w.received, w.log, [](http2::Client& c) {
    for (const char* m : {"Unary", "Stream", "Nope"})
      (void)c.submit_request(
          grpc::request("127.0.0.1", std::string("/sandboxio.test.Echo/") + m, {}, {}, "http"),
          false);
  });
}

// A message over the reader's bound ends the call with RESOURCE_EXHAUSTED before it is held.
TEST_F(GrpcPeer, AMessageOverTheBoundEndsTheCallWithoutBeingHeld) {
  Wire w({}, Peer::grpc().port());
  Call big(1 << 20);
  start(w, big, "Unary", {EchoRequest{"big", 0, 0, "", std::string(3 << 20, 'z')}.bytes()});
  std::size_t most = 0;
  w.hook = [&](const http2::Event& e) {
    big.reader.on(e);
    most = std::max(most, big.reader.buffered());
  };
  w.pump([&] { return big.reader.done(); });
  EXPECT_EQ(big.reader.status().code, grpc::Code::ResourceExhausted);
  ASSERT_TRUE(big.reader.problem());
  EXPECT_EQ(big.reader.problem()->code, errc::MessageTooLarge);
  EXPECT_LT(most, std::size_t{2} << 20) << "the reader held more than its bound and one window";
  w.h2.cancel(big.stream);
}

}  // namespace
}  // namespace sandboxio
