// The host side of one egress proxy connection: the allow list decides on the request's head,
// an allowed request is relayed byte for byte with the host resolving the name, a refused one
// gets a 403 the client can read, learning mode refuses everything and remembers it, and what
// is recorded holds no path, query or header.
#include <gtest/gtest.h>

#include "sandboxio/backend/egress.hpp"

namespace {

using sandboxio::NetworkPolicy;
using sandboxio::backend::EgressTunnel;
using Phase = EgressTunnel::Phase;

const NetworkPolicy kPolicy = NetworkPolicy::allowing({"pypi.org:443", "canary.test"});

TEST(EgressTunnel, AnAllowedConnectOpensTheUpstreamThenRelaysBothWays) {
  EgressTunnel t(kPolicy, EgressTunnel::Mode::Enforce);
  const std::string head = "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n";
  auto s = t.from_client(head + "\x16\x03\x01hello");  // a client that does not wait
  EXPECT_EQ(s.used, head.size() + 8);
  ASSERT_TRUE(s.open.has_value());
  EXPECT_EQ(s.open->host, "pypi.org");
  EXPECT_EQ(s.open->port, 443);
  EXPECT_TRUE(s.to_client.empty()) << "nothing is promised before the upstream is up";
  EXPECT_EQ(t.phase(), Phase::Connecting);

  s = t.upstream_connected();
  EXPECT_EQ(s.to_client, "HTTP/1.1 200 Connection established\r\n\r\n");
  EXPECT_EQ(s.to_upstream, "\x16\x03\x01hello") << "held bytes go first, unchanged";

  s = t.from_upstream("server hello");
  EXPECT_EQ(s.to_client, "server hello");
  s = t.from_client("more");
  EXPECT_EQ(s.to_upstream, "more");
  s = t.client_closed();
  EXPECT_TRUE(s.end_upstream);
  s = t.upstream_closed();
  EXPECT_TRUE(s.end_client);
  EXPECT_EQ(t.phase(), Phase::Done);
  EXPECT_TRUE(t.attempt().allowed);
  EXPECT_EQ(t.attempt().bytes_out, 12u);
  EXPECT_EQ(t.attempt().bytes_in, 12u);
  EXPECT_TRUE(t.attempt().reason.empty());
}

TEST(EgressTunnel, AForwardedRequestGoesOutInOriginFormAndItsSecretsAreNotRecorded) {
  EgressTunnel t(kPolicy, EgressTunnel::Mode::Enforce);
  auto s = t.from_client(
      "GET http://canary.test/v1/data?token=s3cr3t-query HTTP/1.1\r\nHost: canary.test\r\n"
      "Authorization: Bearer s3cr3t-bearer\r\n\r\n");
  ASSERT_TRUE(s.open.has_value());
  EXPECT_EQ(s.open->port, 80);
  s = t.upstream_connected();
  EXPECT_EQ(
      s.to_upstream.rfind("GET /v1/data?token=s3cr3t-query HTTP/1.1\r\nHost: canary.test\r\n", 0),
      0u);
  EXPECT_TRUE(s.to_client.empty());
  const auto& a = t.attempt();
  for (const std::string& field : {a.host, a.method, a.reason}) {
    EXPECT_EQ(field.find("s3cr3t"), std::string::npos) << field;
    EXPECT_EQ(field.find("/v1"), std::string::npos) << field;
  }
  EXPECT_EQ(a.host, "canary.test");
  EXPECT_EQ(a.method, "GET");
}

TEST(EgressTunnel, AnUnlistedHostAPortNotNamedAndABareAddressAreRefusedWith403) {
  for (const char* head :
       {"CONNECT evil.test:443 HTTP/1.1\r\n\r\n", "CONNECT pypi.org:22 HTTP/1.1\r\n\r\n",
        "CONNECT 151.101.0.223:443 HTTP/1.1\r\n\r\n"}) {
    EgressTunnel t(kPolicy, EgressTunnel::Mode::Enforce);
    auto s = t.from_client(std::string(head) + "trailing");
    EXPECT_FALSE(s.open.has_value()) << head;
    EXPECT_EQ(s.to_client.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u) << head;
    EXPECT_NE(s.to_client.find("not in this sandbox's allow list"), std::string::npos);
    EXPECT_TRUE(s.end_client);
    EXPECT_EQ(t.phase(), Phase::Done);
    EXPECT_FALSE(t.attempt().allowed);
    EXPECT_FALSE(t.attempt().host.empty()) << "a refusal still says where it meant to go";
  }
}

TEST(EgressTunnel, LearningModeRefusesEvenAnAllowedHostAndRecordsIt) {
  EgressTunnel t(kPolicy, EgressTunnel::Mode::Learn);
  auto s = t.from_client("CONNECT pypi.org:443 HTTP/1.1\r\n\r\n");
  EXPECT_FALSE(s.open.has_value());
  EXPECT_NE(s.to_client.find("learning mode"), std::string::npos);
  EXPECT_EQ(t.attempt().host, "pypi.org");
  EXPECT_EQ(t.attempt().port, 443);
  EXPECT_FALSE(t.attempt().allowed);
}

TEST(EgressTunnel, AMalformedHeadGetsItsStatusAndAnUnreachableHostA502) {
  EgressTunnel bad(kPolicy, EgressTunnel::Mode::Enforce);
  auto s = bad.from_client("GET / HTTP/1.1\r\nHost: pypi.org\r\n\r\n");
  EXPECT_EQ(s.to_client.rfind("HTTP/1.1 400 ", 0), 0u);
  EXPECT_TRUE(s.end_client);

  EgressTunnel down(kPolicy, EgressTunnel::Mode::Enforce);
  (void)down.from_client("CONNECT pypi.org:443 HTTP/1.1\r\n\r\n");
  s = down.upstream_failed(sandboxio::Problem{sandboxio::errc::ConnectionFailed, "refused", {}});
  EXPECT_EQ(s.to_client.rfind("HTTP/1.1 502 Bad Gateway\r\n", 0), 0u);
  EXPECT_NE(down.attempt().reason.find("cannot reach pypi.org:443"), std::string::npos);
  EXPECT_TRUE(down.attempt().allowed) << "allowed, then failed: the record says both";
}

TEST(EgressTunnel, AClientThatFloodsBeforeTheUpstreamIsUpIsHeldBackNotBuffered) {
  EgressTunnel t(kPolicy, EgressTunnel::Mode::Enforce);
  (void)t.from_client("CONNECT pypi.org:443 HTTP/1.1\r\n\r\n");
  const std::string flood(1 << 20, 'x');
  std::size_t taken = 0;
  for (int i = 0; i < 4; ++i)
    taken += t.from_client(flood).used;
  EXPECT_EQ(taken, EgressTunnel::kMaxPending);
  auto s = t.upstream_connected();
  EXPECT_EQ(s.to_upstream.size(), EgressTunnel::kMaxPending);
  EXPECT_EQ(t.from_client(flood).used, flood.size()) << "once open, bytes flow";
}

}  // namespace
