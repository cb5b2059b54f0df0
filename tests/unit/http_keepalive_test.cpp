// Keep-alive in the HTTP exchanges (backend/http_exchanges.hpp), byte by byte with no socket:
// a clean reply leaves its connection for the next request to the same endpoint; the pool is
// bounded and idles out (at the peer's Keep-Alive timeout less a second); a connection that
// is not clean (Connection: close, stray bytes, an error) is closed; a stale reused connection
// repeats a request only when that is safe.
#include <gtest/gtest.h>

#include "sandboxio/backend/http_exchanges.hpp"

namespace sandboxio::backend {
namespace {

using namespace std::chrono_literals;

constexpr std::string_view kOk = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

struct Wire {
  std::vector<ConnId> opened, closed;
  std::vector<std::pair<ConnId, Bytes>> sent;
};

class KeepAlive : public ::testing::Test {
 protected:
  Outbox out;
  Exchanges http{out, "the peer"};
  Endpoint api{Endpoint::Kind::Tcp, "api.example", 443, true};
  Endpoint envd{Endpoint::Kind::Tcp, "envd.example", 443, true};
  std::vector<Result<Reply>> replies;

  void SetUp() override { http.keep_alive(4, 4s); }

  ConnId start(const Endpoint& to, std::string what = "GET /x") {
    return http.start(
        1, to, {what + " HTTP/1.1\r\n\r\n"},
        [this](Result<Reply> r, Instant) { replies.push_back(std::move(r)); }, what);
  }
  Wire drain() {
    Wire w;
    while (auto r = out.poll_request()) {
      if (auto* o = std::get_if<request::Open>(&*r)) w.opened.push_back(o->conn);
      if (auto* c = std::get_if<request::Close>(&*r)) w.closed.push_back(c->conn);
      if (auto* s = std::get_if<request::Send>(&*r)) w.sent.emplace_back(s->conn, s->data);
    }
    return w;
  }
  // One whole exchange on `to`: its connection, and what went over the wire.
  std::pair<ConnId, Wire> round(const Endpoint& to, std::string_view reply = kOk,
                                Instant now = Instant{}) {
    const ConnId c = start(to);
    Wire w = drain();
    if (!w.opened.empty()) http.connected(c);
    (void)http.feed(c, reply, now);
    Wire after = drain();
    w.sent.insert(w.sent.end(), after.sent.begin(), after.sent.end());
    w.closed.insert(w.closed.end(), after.closed.begin(), after.closed.end());
    return {c, w};
  }
};

TEST_F(KeepAlive, SequentialRequestsToOneEndpointShareOneConnection) {
  const auto [first, w1] = round(api);
  EXPECT_EQ(w1.opened.size(), 1u);
  EXPECT_TRUE(w1.closed.empty());
  for (int i = 0; i < 99; ++i) {
    const auto [c, w] = round(api);
    EXPECT_EQ(c, first);
    EXPECT_TRUE(w.opened.empty());
    EXPECT_TRUE(w.closed.empty());
    ASSERT_EQ(w.sent.size(), 1u);  // the request went out at once, on the open connection
  }
  EXPECT_EQ(http.opened(), 1u);
  ASSERT_EQ(replies.size(), 100u);
  for (const auto& r : replies) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r.value().body, "ok");
  }
  EXPECT_TRUE(http.empty());  // idle connections are no work in flight (busy() stays false)
}

TEST_F(KeepAlive, EndpointsDoNotShareConnections) {
  const auto [a, wa] = round(api);
  const auto [e, we] = round(envd);
  EXPECT_NE(a, e);
  EXPECT_EQ(we.opened.size(), 1u);
  EXPECT_EQ(round(api).first, a);
  EXPECT_EQ(round(envd).first, e);
}

TEST_F(KeepAlive, TheIdlePoolIsBoundedPerEndpoint) {
  std::vector<ConnId> conns;
  for (int i = 0; i < 6; ++i) {  // six at once: six connections
    conns.push_back(start(api));
    (void)drain();
    http.connected(conns.back());
  }
  (void)drain();
  for (ConnId c : conns)
    (void)http.feed(c, kOk, Instant{});
  const Wire w = drain();
  EXPECT_EQ(w.closed.size(), 2u);  // four stay idle
  EXPECT_EQ(http.idle_count(), 4u);
}

TEST_F(KeepAlive, IdleConnectionsCloseAtTheirLimitOrThePeersKeepAliveTimeout) {
  (void)round(api);  // no Keep-Alive header: 4 s
  ASSERT_EQ(http.idle_deadline(), Instant{} + 4s);
  http.expire_idle(Instant{} + 3s);
  EXPECT_EQ(http.idle_count(), 1u);
  http.expire_idle(Instant{} + 4s);
  EXPECT_EQ(http.idle_count(), 0u);
  EXPECT_EQ(drain().closed.size(), 1u);
  // Node says "Keep-Alive: timeout=5" and closes after 5 s: we stop using it after 4 s.
  (void)round(envd, "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=3\r\nContent-Length: 2\r\n\r\nok");
  EXPECT_EQ(http.idle_deadline(), Instant{} + 2s);
  // A request after the limit opens a new connection (MachineCore::open expires first).
  http.expire_idle(Instant{} + 2s);
  EXPECT_EQ(round(envd).second.opened.size(), 1u);
}

TEST_F(KeepAlive, OnlyACleanReplyLeavesItsConnectionOpen) {
  const auto close =
      round(api, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok").second;
  EXPECT_EQ(close.closed.size(), 1u);
  const auto stray = round(api, std::string(kOk) + "HTTP/1.1 200 OK\r\n").second;
  EXPECT_EQ(stray.closed.size(), 1u);
  const auto [c, until_eof] = round(api, "HTTP/1.0 200 OK\r\n\r\nok");  // ends at EOF
  EXPECT_TRUE(until_eof.closed.empty());
  http.eof(c, Instant{});
  EXPECT_EQ(drain().closed, std::vector<ConnId>{c});
  EXPECT_EQ(http.idle_count(), 0u);
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies.back().value().body, "ok");
}

TEST_F(KeepAlive, BytesOrAnEndOnAnIdleConnectionRetireIt) {
  const ConnId a = round(api).first;
  (void)http.feed(a, "HTTP/1.1 408 Request Timeout\r\n\r\n", Instant{});
  EXPECT_EQ(drain().closed, std::vector<ConnId>{a});
  const ConnId b = round(api).first;
  EXPECT_NE(a, b);
  http.eof(b, Instant{});
  EXPECT_EQ(drain().closed, std::vector<ConnId>{b});
  EXPECT_EQ(http.idle_count(), 0u);
  EXPECT_EQ(round(api).second.opened.size(), 1u);
}

TEST_F(KeepAlive, AStaleConnectionRepeatsARequestOnlyWhenThatIsSafe) {
  const ConnId a = round(api).first;
  const std::size_t before = replies.size();
  // The peer closed the idle connection as a GET went out: the GET goes again, once.
  ASSERT_EQ(start(api, "GET /sandboxes/1"), a);
  (void)drain();
  http.eof(a, Instant{});
  Wire w = drain();
  ASSERT_EQ(w.opened.size(), 1u);
  EXPECT_EQ(w.closed, std::vector<ConnId>{a});
  const ConnId fresh = w.opened[0];
  http.connected(fresh);
  w = drain();
  ASSERT_EQ(w.sent.size(), 1u);
  EXPECT_EQ(w.sent[0].second, "GET /sandboxes/1 HTTP/1.1\r\n\r\n");
  (void)http.feed(fresh, kOk, Instant{});
  ASSERT_EQ(replies.size(), before + 1);
  EXPECT_TRUE(replies.back());
  // A POST on a stale connection is not repeated: the peer may have acted on it.
  ASSERT_EQ(start(api, "POST /sandboxes"), fresh);
  (void)drain();
  http.eof(fresh, Instant{});
  EXPECT_TRUE(drain().opened.empty());
  ASSERT_EQ(replies.size(), before + 2);
  ASSERT_FALSE(replies.back());
  EXPECT_EQ(replies.back().problem().code, errc::ConnectionLost);
  // Nor is a request that got part of a reply.
  const ConnId c = round(api).first;
  ASSERT_EQ(start(api, "GET /y"), c);
  (void)drain();
  (void)http.feed(c, "HTTP/1.1 200 OK\r\n", Instant{});
  http.eof(c, Instant{});
  EXPECT_TRUE(drain().opened.empty());
  EXPECT_FALSE(replies.back());
}

// Across machines: an ended sandbox offers its idle connections to the driver for the rest of
// their idle time, and a connection the driver hands over (handle_reused) is treated as a
// kept-alive one: its stale GET goes again, on a new connection the driver may not substitute.
TEST_F(KeepAlive, IdleConnectionsAreOfferedForReuseAndAReusedOneIsTreatedAsKeptAlive) {
  const ConnId a = round(api, kOk, Instant{}).first;
  Outbox* box = &out;
  http.close_idle(Instant{} + 1s);
  std::optional<request::Close> offered;
  while (auto r = box->poll_request())
    if (auto* c = std::get_if<request::Close>(&*r)) offered = *c;
  ASSERT_TRUE(offered);
  EXPECT_EQ(offered->conn, a);
  EXPECT_EQ(offered->reusable_for, 3s) << "what is left of its 4 s idle limit";
  http.close_idle();  // nothing idle now; and without a time nothing would be offered
  EXPECT_TRUE(drain().closed.empty());

  // A fresh machine's first request may take a kept connection...
  Outbox box2;
  Exchanges other{box2, "the peer"};
  other.keep_alive(4, 4s);
  const ConnId c = other.start(
      1, api, {"GET /sandboxes/2 HTTP/1.1\r\n\r\n"},
      [this](Result<Reply> r, Instant) { replies.push_back(std::move(r)); }, "GET /sandboxes/2");
  auto open = box2.poll_request();
  ASSERT_TRUE(open && std::holds_alternative<request::Open>(*open));
  EXPECT_TRUE(std::get<request::Open>(*open).may_reuse);
  // ...and when it was one that had gone stale, the GET goes once more on a new connection.
  other.reused(c);
  other.connected(c);
  while (box2.poll_request()) {
  }
  other.eof(c, Instant{});
  std::optional<request::Open> again;
  while (auto r = box2.poll_request())
    if (auto* o = std::get_if<request::Open>(&*r)) again = *o;
  ASSERT_TRUE(again) << "a stale reused connection's GET is repeated";
  EXPECT_FALSE(again->may_reuse) << "on a new connection";
  // Connections that are not plain HTTP exchanges (a process, an egress upstream) never are.
  Exchanges plain{box2, "the peer"};
  const ConnId p = plain.start(
      1, api, {"GET / HTTP/1.1\r\n\r\n"}, [](Result<Reply>, Instant) {}, "GET /");
  (void)p;
  std::optional<request::Open> unpooled;
  while (auto r = box2.poll_request())
    if (auto* o = std::get_if<request::Open>(&*r)) unpooled = *o;
  ASSERT_TRUE(unpooled);
  EXPECT_FALSE(unpooled->may_reuse) << "keep-alive off: no reuse across machines either";
}

TEST_F(KeepAlive, OffByDefaultAndWhenTurnedOff) {
  Outbox box;
  Exchanges plain{box, "the peer"};
  const ConnId c = plain.start(
      1, api, {"GET / HTTP/1.1\r\n\r\n"}, [](Result<Reply>, Instant) {}, "GET /");
  plain.connected(c);
  (void)plain.feed(c, kOk, Instant{});
  EXPECT_EQ(plain.idle_count(), 0u);
  (void)round(api);
  EXPECT_EQ(http.idle_count(), 1u);
  http.keep_alive(0, 4s);
  EXPECT_EQ(http.idle_count(), 0u);
}

}  // namespace
}  // namespace sandboxio::backend
