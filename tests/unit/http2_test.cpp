// The HTTP/2 client codec against a peer played by hand: what a well-behaved server sends
// gives the events a caller relies on, at every split size; what a hostile one sends ends in
// a coded error, a reset stream or a bound, never in memory that grows.
#include <gtest/gtest.h>

#include "../support/http2_wire.hpp"
#include "sandboxio/codec/http2.hpp"

namespace sandboxio {
namespace {

using namespace test::h2;

http2::Request get(std::string path) {
  return http2::Request{"GET", "http", "peer:80", std::move(path), {}};
}

// The client's first bytes: the preface, then its SETTINGS.
TEST(Http2, TheClientOpensWithThePrefaceAndItsSettings) {
  http2::Client c;
  const std::string out = c.take_output();
  ASSERT_GE(out.size(), http2::kClientPreface.size() + 9);
  EXPECT_EQ(out.substr(0, http2::kClientPreface.size()), http2::kClientPreface);
  EXPECT_EQ(out[http2::kClientPreface.size() + 3], char(kSettings));
}

// A response with a body in two DATA frames and trailers, and a second stream's 404, read at
// every split size: the same events, the same bytes.
TEST(Http2, AnExchangeGivesTheSameEventsAtEverySplitSize) {
  const std::string wire =
      server_settings() + frame(kSettings, kAck, 0, "") +
      frame(kHeaders, kEndHeaders, 1, fields(200, {{"content-type", "application/grpc"}})) +
      frame(kData, 0, 1, "hello ") + frame(kHeaders, kEndHeaders, 3, fields(404)) +
      frame(kData, 0, 1, "world") + frame(kData, kEndStream, 3, "no such thing") +
      frame(kHeaders, kEndHeaders | kEndStream, 1, fields(0, {{"grpc-status", "0"}}));
  auto run = [&](std::size_t step) {
    http2::Client c;
    EXPECT_EQ(c.submit_request(get("/a"), true).value(), 1);
    EXPECT_EQ(c.submit_request(get("/b"), true).value(), 3);
    (void)c.take_output();
    Log log;
    for (std::size_t i = 0; i < wire.size(); i += step) {
      const std::string_view piece = std::string_view(wire).substr(i, step);
      EXPECT_EQ(c.handle_bytes(piece), piece.size());
      drain(c, log);
    }
    EXPECT_FALSE(c.error());
    return log;
  };
  const Log whole = run(wire.size());
  const std::vector<std::string> expected = {"response 1 200 content-type=application/grpc",
                                             "data 1",
                                             "response 3 404",
                                             "data 1",
                                             "data 3",
                                             "end 3",
                                             "trailers 1 grpc-status=0",
                                             "end 1"};
  EXPECT_EQ(whole.lines, expected);
  EXPECT_EQ(whole.bodies.at(1), "hello world");
  EXPECT_EQ(whole.bodies.at(3), "no such thing");
  for (std::size_t step = 1; step < wire.size(); ++step)
    EXPECT_EQ(run(step), whole) << step;
}

TEST(Http2, AnInterimHeadIsSkippedForTheFinalOne) {
  http2::Client c;
  ASSERT_TRUE(c.submit_request(get("/"), true));
  (void)c.take_output();
  c.handle_bytes(server_settings() + frame(kHeaders, kEndHeaders, 1, fields(103, {{"link", "x"}})) +
                 frame(kHeaders, kEndHeaders, 1, fields(200)) + frame(kData, kEndStream, 1, "ok"));
  Log log;
  drain(c, log);
  EXPECT_EQ(log.lines, (std::vector<std::string>{"response 1 200", "data 1", "end 1"}));
}

// A request body larger than the peer's window waits for its WINDOW_UPDATE: it is never sent
// past what the peer allowed.
TEST(Http2, ARequestBodyWaitsForThePeersWindow) {
  http2::Client c;
  const auto id = c.submit_request({"POST", "http", "peer", "/echo", {}}, false).value();
  c.submit_data(id, std::string(100000, 'x'), true);
  std::string out = c.take_output();
  c.handle_bytes(server_settings());
  out += c.take_output();
  EXPECT_EQ(c.pending_data(id), 100000U - 65535U);  // the default initial window
  c.handle_bytes(frame(kWindowUpdate, 0, 0, u32(50000)) + frame(kWindowUpdate, 0, 1, u32(50000)));
  (void)c.take_output();
  EXPECT_EQ(c.pending_data(id), 0U);
}

TEST(Http2, ForbiddenRequestFieldsAreRefused) {
  http2::Client c;
  for (const char* name : {"Connection", "transfer-encoding", "Host", ":path", "upgrade"}) {
    auto r = c.submit_request({"GET", "http", "peer", "/", {{name, "x"}}}, true);
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.problem().code, errc::ConfigurationError);
  }
  auto crlf = c.submit_request({"GET", "http", "peer", "/", {{"x-a", "b\r\nx-evil: 1"}}}, true);
  EXPECT_FALSE(crlf);
  EXPECT_EQ(c.open_streams(), 0U);
}

TEST(Http2, StreamsPastTheBoundAreRefusedWithQueueFull) {
  http2::Limits limits;
  limits.max_concurrent_streams = 3;
  http2::Client c(limits);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(c.submit_request(get("/"), true));
  auto fourth = c.submit_request(get("/"), true);
  ASSERT_FALSE(fourth);
  EXPECT_EQ(fourth.problem().code, errc::QueueFull);
  // The peer's own lower bound counts too.
  http2::Client d;
  d.handle_bytes(frame(kSettings, 0, 0, std::string("\x00\x03", 2) + u32(1)));
  ASSERT_TRUE(d.submit_request(get("/"), true));
  EXPECT_FALSE(d.can_open_stream());
}

// A slow reader: what it has not consumed is all the peer may send on its stream.
TEST(Http2, DataPastTheStreamWindowIsAProtocolErrorNotMemory) {
  http2::Limits limits;
  limits.stream_window = 16384;
  http2::Client c(limits);
  ASSERT_TRUE(c.submit_request(get("/"), true));
  (void)c.take_output();
  // Once the peer has acknowledged our SETTINGS (before it, RFC 9113's 65535 holds).
  std::string wire = server_settings() + frame(kSettings, kAck, 0, "") +
                     frame(kHeaders, kEndHeaders, 1, fields(200)) +
                     frame(kData, 0, 1, std::string(16384, 'a')) +
                     frame(kData, 0, 1, "one too many");
  c.handle_bytes(wire);
  std::size_t got = 0;
  bool reset = false;
  while (auto e = c.poll_event()) {
    if (auto* d = std::get_if<http2::Data>(&*e)) got += d->bytes.size();
    if (auto* r = std::get_if<http2::Reset>(&*e)) {
      reset = true;
      EXPECT_EQ(r->problem.code, errc::RemoteProtocolViolation);
      EXPECT_NE(r->problem.detail.find("sandboxio reset"), std::string::npos) << r->problem.detail;
      EXPECT_EQ(r->error_code, 3U);  // FLOW_CONTROL_ERROR
    }
  }
  EXPECT_LE(got, 16384U + 16384U);  // the window, and at most the one frame that passed it
  EXPECT_TRUE(reset || c.error());
}

TEST(Http2, AHeaderBlockPastItsBoundResetsThatStreamWithMessageTooLarge) {
  http2::Limits limits;
  limits.max_header_list_bytes = 1024;
  http2::Client c(limits);
  ASSERT_TRUE(c.submit_request(get("/big"), true));
  ASSERT_TRUE(c.submit_request(get("/small"), true));
  (void)c.take_output();
  std::vector<std::pair<std::string, std::string>> many;
  for (int i = 0; i < 12; ++i)
    many.push_back({"x-filler-" + std::to_string(i), std::string(100, 'f')});
  c.handle_bytes(server_settings() + frame(kHeaders, kEndHeaders, 1, fields(200, many)) +
                 frame(kHeaders, kEndHeaders | kEndStream, 3, fields(200)));
  Log log;
  drain(c, log);
  ASSERT_FALSE(c.error());
  EXPECT_EQ(log.lines,
            (std::vector<std::string>{"reset 1 2 MessageTooLarge", "response 3 200", "end 3"}));
  EXPECT_NE(c.take_output().find(frame(kRstStream, 0, 1, u32(2))), std::string::npos);
}

TEST(Http2, GarbageFromThePeerIsAStickyCodedErrorAndAGoAway) {
  http2::Client c;
  ASSERT_TRUE(c.submit_request(get("/"), true));
  (void)c.take_output();
  c.handle_bytes("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
  ASSERT_TRUE(c.error());
  EXPECT_EQ(c.error()->code, errc::RemoteProtocolViolation);
  EXPECT_FALSE(c.alive());
  auto again = c.submit_request(get("/"), true);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.problem().code, errc::RemoteProtocolViolation);
  EXPECT_EQ(c.handle_bytes(server_settings()), 0U);  // sticky: no more work
}

TEST(Http2, APushPromiseIsRefusedBecausePushIsOff) {
  http2::Client c;
  ASSERT_TRUE(c.submit_request(get("/"), true));
  (void)c.take_output();
  c.handle_bytes(server_settings() + frame(kSettings, kAck, 0, "") +
                 frame(kPushPromise, kEndHeaders, 1, u32(2) + fields(0, {{":path", "/x"}})));
  ASSERT_TRUE(c.error());
  EXPECT_EQ(c.error()->code, errc::RemoteProtocolViolation);
  EXPECT_NE(c.take_output().find(char(kGoAway)), std::string::npos);
}

// A peer that sends PINGs without reading the answers: the queued acks are bounded.
TEST(Http2, APingFloodEndsTheConnectionInsteadOfQueueingAcks) {
  http2::Client c;
  std::string flood = server_settings();
  for (int i = 0; i < 1200; ++i)
    flood += frame(kPing, 0, 0, std::string(8, 'p'));
  c.handle_bytes(flood);
  ASSERT_TRUE(c.error());
  EXPECT_NE(c.error()->detail.find("flooded"), std::string::npos) << c.error()->detail;
}

// GOAWAY: streams above its last one were not processed and may be repeated elsewhere; those
// up to it finish; no new stream opens.
TEST(Http2, AGoAwayRefusesLaterStreamsAsRetryableAndLetsEarlierOnesFinish) {
  http2::Client c;
  ASSERT_TRUE(c.submit_request(get("/one"), true));
  ASSERT_TRUE(c.submit_request(get("/three"), true));
  (void)c.take_output();
  c.handle_bytes(server_settings() + frame(kGoAway, 0, 0, u32(1) + u32(0)) +
                 frame(kHeaders, kEndHeaders | kEndStream, 1, fields(200)));
  Log log;
  drain(c, log);
  EXPECT_EQ(log.lines, (std::vector<std::string>{"goaway 1 0", "reset 3 7 retryable ConnectionLost",
                                                 "response 1 200", "end 1"}));
  auto later = c.submit_request(get("/"), true);
  ASSERT_FALSE(later);
  EXPECT_EQ(later.problem().code, errc::ConnectionLost);
}

TEST(Http2, APeerResetIsReportedWithItsCode) {
  http2::Client c;
  ASSERT_TRUE(c.submit_request(get("/"), true));
  (void)c.take_output();
  c.handle_bytes(server_settings() + frame(kHeaders, kEndHeaders, 1, fields(200)) +
                 frame(kData, 0, 1, "partial") + frame(kRstStream, 0, 1, u32(2)));
  Log log;
  drain(c, log);
  EXPECT_EQ(log.lines, (std::vector<std::string>{"response 1 200", "data 1",
                                                 "reset 1 2 RemoteProtocolViolation"}));
  EXPECT_EQ(c.open_streams(), 0U);
}

// cancel(): nothing more is reported for the stream, RST_STREAM(CANCEL) goes out, and the
// data it held no longer counts against the connection's window.
TEST(Http2, ACancelledStreamGivesItsWindowBack) {
  http2::Limits limits;
  limits.connection_window = 65535;
  limits.stream_window = 65535;
  http2::Client c(limits);
  const auto a = c.submit_request(get("/a"), true).value();
  const auto b = c.submit_request(get("/b"), true).value();
  (void)c.take_output();
  c.handle_bytes(
      server_settings() + frame(kHeaders, kEndHeaders, a, fields(200)) +
      frame(kData, 0, a, std::string(16384, 'a')) + frame(kData, 0, a, std::string(16384, 'a')) +
      frame(kData, 0, a, std::string(16384, 'a')) + frame(kData, 0, a, std::string(16383, 'a')));
  ASSERT_FALSE(c.error());
  (void)c.poll_event();  // the head; its data is left unread
  c.cancel(a);
  EXPECT_FALSE(c.poll_event());
  const std::string out = c.take_output();
  EXPECT_NE(out.find(frame(kRstStream, 0, a, u32(8))), std::string::npos);
  // The connection's window is open again: the peer may send b a full window's worth.
  c.handle_bytes(
      frame(kHeaders, kEndHeaders, b, fields(200)) + frame(kData, 0, b, std::string(16384, 'b')) +
      frame(kData, 0, b, std::string(16384, 'b')) + frame(kData, 0, b, std::string(16384, 'b')) +
      frame(kData, kEndStream, b, std::string(16383, 'b')));
  ASSERT_FALSE(c.error()) << c.error()->detail;
  Log log;
  drain(c, log);
  EXPECT_EQ(log.bodies[b].size(), 65535U);
  EXPECT_EQ(log.lines.back(), "end " + std::to_string(b));
}

}  // namespace
}  // namespace sandboxio
