// The engine's byte codecs fed recorded exchanges at every split size: one byte at a time, two
// at a time, ..., whole. A parser that only works on whole messages fails here at once.
#include <gtest/gtest.h>

#include <set>

#include "sandboxio/codec/docker_stream.hpp"
#include "sandboxio/codec/http.hpp"

using namespace sandboxio;

namespace {

std::string frame(int type, const std::string& payload) {
  std::string h(8, '\0');
  h[0] = static_cast<char>(type);
  const auto n = static_cast<std::uint32_t>(payload.size());
  h[4] = static_cast<char>(n >> 24), h[5] = static_cast<char>(n >> 16),
  h[6] = static_cast<char>(n >> 8), h[7] = static_cast<char>(n);
  return h + payload;
}

// Split sizes: every size for small inputs; for large ones 1..16, powers of two, and whole.
std::vector<std::size_t> splits(std::size_t n) {
  std::set<std::size_t> s;
  for (std::size_t i = 1; i <= std::min<std::size_t>(n, n <= 512 ? n : 16); ++i)
    s.insert(i);
  for (std::size_t p = 32; p < n; p *= 2)
    s.insert(p);
  s.insert(n);
  return {s.begin(), s.end()};
}

// A docker exec start answered with 101, then multiplexed output (as seen on API 1.41).
const std::string kUpgradeHead =
    "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
    "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n";

std::string binary_payload() {
  std::string p(70000, '\0');
  for (std::size_t i = 0; i < p.size(); ++i)
    p[i] = static_cast<char>(i * 7 % 256);
  return p;
}

TEST(Codecs, ExecUpgradeThenFramesAtEverySplit) {
  const std::string big = binary_payload();
  const std::string stream =
      frame(1, "hello\n") + frame(2, "oops\n") + frame(1, big) + frame(1, "");
  const std::string wire = kUpgradeHead + stream;
  for (std::size_t split : splits(wire.size())) {
    http::ResponseParser head;
    docker::StreamDemux demux;
    std::string out, err;
    std::size_t pos = 0;
    while (pos < wire.size()) {
      const std::string_view piece = std::string_view(wire).substr(pos, split);
      std::string_view rest = piece;
      if (!head.upgraded()) {
        const std::size_t used = head.feed(rest);
        ASSERT_FALSE(head.error()) << head.error()->describe();
        rest.remove_prefix(used);
        if (!head.upgraded()) {
          ASSERT_EQ(used, piece.size()) << "split " << split;
          pos += piece.size();
          continue;
        }
      }
      ASSERT_TRUE(demux.feed(rest, [&](docker::FrameType t, std::string_view d) {
        (t == docker::FrameType::Stdout ? out : err).append(d);
      }));
      pos += piece.size();
    }
    ASSERT_TRUE(head.upgraded()) << split;
    EXPECT_EQ(head.status(), 101);
    EXPECT_EQ(head.header("content-type"), "application/vnd.docker.raw-stream");
    EXPECT_EQ(out, "hello\n" + big) << "split " << split;
    EXPECT_EQ(err, "oops\n") << "split " << split;
    EXPECT_TRUE(demux.at_frame_boundary());
  }
}

// A chunked JSON answer followed, on the same keep-alive connection, by a Content-Length one.
const std::string kKeepAlive =
    "HTTP/1.1 201 Created\r\nApi-Version: 1.41\r\nContent-Type: application/json\r\n"
    "Transfer-Encoding: chunked\r\n\r\n"
    "7\r\n{\"Id\":\"\r\n"
    "a\r\n0123456789\r\n"
    "11\r\n\",\"Warnings\":[]}\n\r\n"
    "0\r\n\r\n"
    "HTTP/1.1 204 No Content\r\nApi-Version: 1.41\r\n\r\n"
    "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 38\r\n\r\n"
    "{\"message\":\"No such container: abc12\"}";

TEST(Codecs, KeepAliveResponsesAtEverySplit) {
  for (std::size_t split : splits(kKeepAlive.size())) {
    http::ResponseParser p;
    std::vector<std::pair<int, std::string>> got;
    std::string body;
    std::size_t pos = 0;
    std::string pending;
    while (pos < kKeepAlive.size() || !pending.empty()) {
      if (pending.empty()) {
        pending = kKeepAlive.substr(pos, split);
        pos += pending.size();
      }
      const std::size_t used = p.feed(pending);
      ASSERT_FALSE(p.error()) << p.error()->describe();
      pending.erase(0, used);
      body += p.take_body();
      if (p.complete()) {
        got.emplace_back(p.status(), std::exchange(body, {}));
        EXPECT_TRUE(p.keep_alive());
        p.reset();
      } else {
        ASSERT_TRUE(pending.empty()) << "stalled at split " << split;
      }
    }
    ASSERT_EQ(got.size(), 3u) << "split " << split;
    EXPECT_EQ(got[0],
              (std::pair<int, std::string>{201, "{\"Id\":\"0123456789\",\"Warnings\":[]}\n"}));
    EXPECT_EQ(got[1], (std::pair<int, std::string>{204, ""}));
    EXPECT_EQ(got[2],
              (std::pair<int, std::string>{404, "{\"message\":\"No such container: abc12\"}"}));
  }
}

TEST(Codecs, NdjsonLinesSplitOnNewlinesNotChunks) {
  const std::string events =
      "{\"status\":\"create\",\"id\":\"a\"}\n{\"status\":\"start\",\"id\":\"a\"}\r\n{\"status\":"
      "\"die\",\"exitCode\":3}\n"
      "{\"partial\":tr";
  for (std::size_t split : splits(events.size())) {
    http::LineSplitter lines;
    std::vector<std::string> got;
    for (std::size_t pos = 0; pos < events.size(); pos += split) {
      lines.feed(std::string_view(events).substr(pos, split));
      while (auto line = lines.next_line())
        got.push_back(*line);
    }
    ASSERT_EQ(got.size(), 3u) << split;
    EXPECT_EQ(got[1], "{\"status\":\"start\",\"id\":\"a\"}");
    EXPECT_EQ(lines.finish(), "{\"partial\":tr");
  }
}

TEST(Codecs, BodyBackpressurePausesTheParser) {
  const std::string body(5000, 'x');
  const std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + body;
  http::ResponseParser p(http::ParserLimits{.max_head_bytes = 1024, .max_buffered_body = 1000});
  std::size_t pos = 0, rounds = 0;
  std::string got;
  bool first = true;
  while (!p.complete()) {
    // Reads of 512 bytes, as from a socket.
    pos += p.feed(std::string_view(wire).substr(pos, 512));
    const std::string chunk = p.take_body();
    EXPECT_LE(chunk.size(), first ? 1000u + 512u : 1000u) << "the parser buffered past its bound";
    first = false;
    got += chunk;
    ASSERT_LT(++rounds, 100u);
  }
  EXPECT_EQ(got, body);
  EXPECT_GE(rounds, 5u);
}

TEST(Codecs, HostileResponsesGetCodedErrors) {
  struct Bad {
    std::string wire;
    errc code;
  };
  const Bad cases[] = {
      {"HTTX/1.1 200 OK\r\n\r\n", errc::RemoteProtocolViolation},
      {"HTTP/1.1 2000 OK\r\n\r\n", errc::RemoteProtocolViolation},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
       errc::RemoteProtocolViolation},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
       errc::RemoteProtocolViolation},
      {"HTTP/1.1 200 OK\r\nX: " + std::string(70000, 'a') + "\r\n\r\n", errc::MessageTooLarge},
      {std::string("HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n", 26), errc::RemoteProtocolViolation},
  };
  for (const Bad& b : cases) {
    http::ResponseParser p;
    (void)p.feed(b.wire);
    ASSERT_TRUE(p.error().has_value()) << b.wire.substr(0, 60);
    EXPECT_EQ(p.error()->code, b.code) << p.error()->describe();
    EXPECT_EQ(p.feed("more"), 0u);  // sticky
  }
  http::ResponseParser cut;
  (void)cut.feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
  cut.feed_eof();
  ASSERT_TRUE(cut.error());
  EXPECT_EQ(cut.error()->code, errc::ConnectionLost);
  http::LineSplitter lines(16);
  lines.feed(std::string(40, 'x'));
  EXPECT_FALSE(lines.next_line());
  ASSERT_TRUE(lines.error());
  EXPECT_EQ(lines.error()->code, errc::MessageTooLarge);
}

TEST(Codecs, HostileFramesGetCodedErrors) {
  auto sink = [](docker::FrameType, std::string_view) {};
  docker::StreamDemux bad_type;
  EXPECT_FALSE(bad_type.feed(std::string("\x07\0\0\0\0\0\0\x01x", 9), sink));
  EXPECT_EQ(bad_type.error()->code, errc::RemoteProtocolViolation);
  docker::StreamDemux tty;  // a TTY stream is raw text, not frames
  EXPECT_FALSE(tty.feed("root@abc:/# ls\r\n", sink));
  docker::StreamDemux huge(1024);
  EXPECT_FALSE(huge.feed(std::string("\x01\0\0\0\x7f\xff\xff\xff", 8), sink));
  EXPECT_EQ(huge.error()->code, errc::MessageTooLarge);
}

TEST(Codecs, RequestsAreWrittenAndInjectionRefused) {
  http::Request r{
      "POST", "/v1.41/containers/create?name=sbx", {{"Content-Type", "application/json"}}, "{}"};
  EXPECT_EQ(http::write_request(r, "docker").value(),
            "POST /v1.41/containers/create?name=sbx HTTP/1.1\r\nHost: docker\r\nContent-Type: "
            "application/json\r\n"
            "Content-Length: 2\r\n\r\n{}");
  EXPECT_EQ(http::write_request({"GET", "/_ping", {}, {}}, "docker").value(),
            "GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n");
  EXPECT_FALSE(http::write_request({"GET", "/x\r\nEvil: 1", {}, {}}, "docker").ok());
  EXPECT_FALSE(http::write_request({"GET", "/x", {{"X", "a\r\nEvil: 1"}}, {}}, "docker").ok());
  EXPECT_FALSE(http::write_request({"GET", "relative", {}, {}}, "docker").ok());
}

}  // namespace
