// The egress proxy's request head and the policy it is checked against: what a curl, pip or
// npm in a sandbox sends to HTTP_PROXY is understood exactly, anything else is refused with a
// status the client can show, and an allow list grants no more than it names.
#include <gtest/gtest.h>

#include "sandboxio/codec/proxy.hpp"
#include "sandboxio/network_policy.hpp"

namespace {

using sandboxio::NetworkPolicy;
using sandboxio::proxy::HeadParser;
using sandboxio::proxy::Target;

/// Feeds `wire` a byte at a time (the worst split), returning the parser and what it left.
std::pair<HeadParser, std::string> parse(const std::string& wire) {
  HeadParser p;
  std::size_t at = 0;
  while (at < wire.size() && !p.done() && !p.error())
    at += p.feed(std::string_view(wire).substr(at, 1));
  return {std::move(p), wire.substr(at)};
}

TEST(ProxyHead, CurlsConnectNamesTheTunnelAndLeavesItsBytes) {
  auto [p, rest] = parse(
      "CONNECT PyPI.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\nUser-Agent: curl/7.88.1\r\n"
      "Proxy-Connection: Keep-Alive\r\n\r\n\x16\x03\x01");
  ASSERT_TRUE(p.done()) << (p.error() ? p.error()->detail : "");
  EXPECT_EQ(p.target().kind, Target::Kind::Connect);
  EXPECT_EQ(p.target().host, "pypi.org");
  EXPECT_EQ(p.target().port, 443);
  EXPECT_TRUE(p.target().upstream_head.empty());
  EXPECT_EQ(rest, "\x16\x03\x01");  // the TLS ClientHello is the tunnel's, untouched
}

TEST(ProxyHead, AbsoluteHttpIsForwardedInOriginFormWithoutProxyCredentials) {
  auto [p, rest] = parse(
      "POST http://Example.COM./simple/pkg?x=1#frag HTTP/1.1\r\nHost: elsewhere\r\n"
      "Proxy-Authorization: Basic c2VjcmV0\r\nConnection: keep-alive\r\nContent-Length: 5\r\n"
      "Authorization: Bearer tok\r\n\r\nhello");
  ASSERT_TRUE(p.done()) << (p.error() ? p.error()->detail : "");
  const Target& t = p.target();
  EXPECT_EQ(t.kind, Target::Kind::Forward);
  EXPECT_EQ(t.host, "example.com");
  EXPECT_EQ(t.port, 80);
  EXPECT_EQ(t.path, "/simple/pkg?x=1");
  EXPECT_EQ(t.upstream_head,
            "POST /simple/pkg?x=1 HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n"
            "Authorization: Bearer tok\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(rest, "hello");  // the body follows as it came
}

TEST(ProxyHead, PortsAndIpv6LiteralsKeepTheirShape) {
  auto [p, rest] = parse("GET http://[::1]:8080 HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(p.done());
  EXPECT_EQ(p.target().host, "::1");
  EXPECT_EQ(p.target().port, 8080);
  EXPECT_EQ(p.target().upstream_head,
            "GET / HTTP/1.0\r\nHost: [::1]:8080\r\nConnection: close\r\n\r\n");
}

TEST(ProxyHead, RefusesWhatItCannotRouteWithAStatusAndACode) {
  struct Bad {
    const char* wire;
    int status;
  };
  const Bad cases[] = {
      {"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400},                    // not a proxy request
      {"GET https://a.b/ HTTP/1.1\r\n\r\n", 400},                    // https without CONNECT
      {"GET http://user:pw@a.b/ HTTP/1.1\r\n\r\n", 400},             // credentials in the URL
      {"CONNECT a.b HTTP/1.1\r\n\r\n", 400},                         // no port
      {"CONNECT a.b:0 HTTP/1.1\r\n\r\n", 400},                       // port 0
      {"CONNECT a.b:65536 HTTP/1.1\r\n\r\n", 400},                   // port too large
      {"CONNECT a..b:443 HTTP/1.1\r\n\r\n", 400},                    // empty label
      {"CONNECT a b:443 HTTP/1.1\r\n\r\n", 400},                     // four words
      {"GET http://a.b/ HTTP/2.0\r\n\r\n", 505},                     // version
      {"GET http://a.b/ HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n", 400},  // obs-fold
      {"GET http://a.b/ HTTP/1.1\r\nX\x01: 1\r\n\r\n", 400},         // not a token
      {"GET http://a.b/ HTTP/1.1\r\nX: a\x7f\r\n\r\n", 400},         // control in a value
      {"GET http://a.b/ HTTP/1.1\r\nX: a\nY: b\r\n\r\n", 400},       // bare LF
      {"POST http://a.b/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
       400},  // smuggling shape
      {"POST http://a.b/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400},
  };
  for (const auto& c : cases) {
    auto [p, rest] = parse(c.wire);
    ASSERT_TRUE(p.error().has_value()) << c.wire;
    EXPECT_EQ(p.error_status(), c.status) << c.wire;
    EXPECT_EQ(p.error()->code, sandboxio::errc::RemoteProtocolViolation) << c.wire;
    EXPECT_EQ(p.feed("more"), 0u) << "errors are sticky";
  }
}

TEST(ProxyHead, OnlyCanonicalAddressesAreAddresses) {
  using sandboxio::proxy::normalise_host;
  EXPECT_EQ(normalise_host("[::1]"), "::1");
  EXPECT_EQ(normalise_host("[2001:db8::10.1.2.3]"), "2001:db8::10.1.2.3");
  EXPECT_EQ(normalise_host("PyPI.org."), "pypi.org");
  EXPECT_EQ(normalise_host("10.1.2.3"), "10.1.2.3");
  // Forms a resolver reads as addresses, and malformed literals: none is a host.
  for (const char* bad : {"::1", "[::.]", "[1::2::3]", "[12345::]", "[:1]", "01.2.3.4", "0x7f.1",
                          "2130706433", "1.2.3.4.", "1.2.3.256", "a..b", ""}) {
    EXPECT_EQ(normalise_host(bad), std::nullopt) << bad;
  }
}

TEST(ProxyHead, AnEndlessHeadIsCutAtTheLimitNotBuffered) {
  HeadParser p(sandboxio::proxy::Limits{.max_head_bytes = 1024, .max_headers = 8});
  std::size_t total = 0;
  const std::string chunk(100, 'a');
  for (int i = 0; i < 100 && !p.error(); ++i)
    total += p.feed(chunk);
  ASSERT_TRUE(p.error().has_value());
  EXPECT_EQ(p.error()->code, sandboxio::errc::MessageTooLarge);
  EXPECT_EQ(p.error_status(), 431);
  EXPECT_LE(total, 1024u);

  std::string many = "GET http://a.b/ HTTP/1.1\r\n";
  for (int i = 0; i < 9; ++i)
    many += "X-" + std::to_string(i) + ": 1\r\n";
  HeadParser q(sandboxio::proxy::Limits{.max_head_bytes = 1024, .max_headers = 8});
  (void)q.feed(many + "\r\n");
  ASSERT_TRUE(q.error().has_value());
  EXPECT_EQ(q.error()->code, sandboxio::errc::MessageTooLarge);
  EXPECT_EQ(q.error_status(), 431);
}

TEST(ProxyHead, RefusalIsOneReadableResponse) {
  const std::string r =
      sandboxio::proxy::refusal(403, "api.evil.test:443 is not in the allow list\r\nX-Injected: 1");
  EXPECT_EQ(r.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u);
  EXPECT_NE(r.find("X-Sandboxio-Egress: denied\r\n"), std::string::npos);
  EXPECT_EQ(r.find("\r\nX-Injected"), std::string::npos) << "the reason cannot add headers";
  const auto body = r.substr(r.find("\r\n\r\n") + 4);
  EXPECT_NE(body.find("not in the allow list"), std::string::npos);
  EXPECT_NE(r.find("Content-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos);
}

TEST(EgressPolicy, PortsWildcardsAndAddressesGrantNoMoreThanNamed) {
  const auto policy =
      NetworkPolicy::allowing({"pypi.org:443", "*.pythonhosted.org", "10.1.2.3", "*.0.0.1"});
  ASSERT_TRUE(policy.validate().ok());
  EXPECT_TRUE(policy.allows("pypi.org", 443));
  EXPECT_FALSE(policy.allows("pypi.org", 80)) << "the port is part of the entry";
  EXPECT_TRUE(policy.allows("files.pythonhosted.org", 443));
  EXPECT_TRUE(policy.allows("files.pythonhosted.org", 8443)) << "no port: any port";
  EXPECT_FALSE(policy.allows("pythonhosted.org", 443)) << "a wildcard names sub-domains only";
  EXPECT_TRUE(policy.allows("10.1.2.3", 22)) << "an address listed itself";
  EXPECT_FALSE(policy.allows("127.0.0.1", 80)) << "a wildcard never matches an address";
  EXPECT_FALSE(NetworkPolicy::deny_all().allows("pypi.org", 443));

  for (const char* bad : {"pypi.org:", "pypi.org:0", "pypi.org:65536", "pypi.org:44a", ":443"}) {
    EXPECT_FALSE(NetworkPolicy::allowing({bad}).validate().ok()) << bad;
  }
}

}  // namespace
