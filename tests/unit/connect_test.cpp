// The Connect envelope codec, base64 and shell quoting: what the e2b:// machine relies on to
// read envd's streams and to run argument lists through envd's shell.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "sandboxio/codec/base64.hpp"
#include "sandboxio/codec/connect.hpp"
#include "sandboxio/codec/shell.hpp"
#include "sandboxio/e2b.hpp"

namespace {

using sandboxio::errc;
namespace connect = sandboxio::connect;

std::string unhex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::strtol(hex.substr(i, 2).c_str(), nullptr, 16)));
  return out;
}

// The Start stream envd sent for `echo hi; echo err 1>&2; exit 3`, as recorded from the official
// SDK's exchange (../shared/e2b-protocol/wire-capture-e2b-js-2.51.0.txt).
const std::string kRecordedStart = unhex(
    "00000000207b226576656e74223a7b227374617274223a7b22706964223a343234327d7d7d"
    "00000000247b226576656e74223a7b2264617461223a7b227374646f7574223a2261476b4b227d7d7d"
    "00000000287b226576656e74223a7b2264617461223a7b22737464657272223a225a584a7943673d3d227d7d7d"
    "000000005f7b226576656e74223a7b22656e64223a7b2265786974436f6465223a332c22657869746564223a"
    "747275652c22737461747573223a2265786974207374617475732033222c226572726f72223a22657869742073"
    "74617475732033227d7d7d"
    "02000000027b7d");

std::vector<connect::Envelope> read_all(const std::string& bytes, std::size_t split) {
  connect::EnvelopeReader r;
  std::vector<connect::Envelope> out;
  for (std::size_t i = 0; i < bytes.size(); i += split) {
    r.feed(std::string_view(bytes).substr(i, split));
    while (auto e = r.next())
      out.push_back(std::move(*e));
  }
  r.finish();
  EXPECT_FALSE(r.error().has_value()) << r.error()->detail;
  return out;
}

TEST(Connect, RecordedStartStreamAtEverySplitSize) {
  for (std::size_t split = 1; split <= kRecordedStart.size(); ++split) {
    const auto all = read_all(kRecordedStart, split);
    ASSERT_EQ(all.size(), 5u) << "split " << split;
    EXPECT_EQ(all[0].message, R"({"event":{"start":{"pid":4242}}})");
    auto data = sandboxio::json::parse(all[1].message);
    ASSERT_TRUE(data.ok());
    const auto* event = data.value().find("event");
    ASSERT_NE(event, nullptr);
    EXPECT_EQ(sandboxio::base64_decode(event->find("data")->string_at("stdout").value()), "hi\n");
    EXPECT_TRUE(all[4].end_stream());
    EXPECT_FALSE(all[3].end_stream());
  }
}

TEST(Connect, EnvelopeRoundTrip) {
  const auto wire = connect::envelope(R"({"a":1})");
  EXPECT_EQ(wire, std::string("\0\0\0\0\x07{\"a\":1}", 12));
  EXPECT_EQ(connect::envelope("{}", connect::kEndStream), std::string("\x02\0\0\0\x02{}", 7));
}

TEST(Connect, EndStreamErrorIsRead) {
  const std::string body =
      R"({"error":{"code":"invalid_argument","message":"error starting process"}})";
  auto doc = sandboxio::json::parse(body);
  ASSERT_TRUE(doc.ok());
  const auto e = connect::error_of(doc.value());
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "invalid_argument");
  EXPECT_EQ(e->message, "error starting process");
  auto plain = sandboxio::json::parse(R"({"code":"not_found","message":"no such file"})");
  EXPECT_EQ(connect::error_of(plain.value())->code, "not_found");
  auto none = sandboxio::json::parse("{}");
  EXPECT_FALSE(connect::error_of(none.value()).has_value());
}

TEST(Connect, BadStreamsAreCodedErrors) {
  {  // compressed, though the client asked for none
    connect::EnvelopeReader r;
    r.feed(std::string("\x01\0\0\0\x02{}", 7));
    EXPECT_FALSE(r.next().has_value());
    ASSERT_TRUE(r.error().has_value());
    EXPECT_EQ(r.error()->code, errc::RemoteProtocolViolation);
  }
  {  // larger than the bound: refused before it is buffered
    connect::EnvelopeReader r(1024);
    r.feed(std::string("\0\x7f\xff\xff\xff", 5));
    EXPECT_FALSE(r.next().has_value());
    EXPECT_EQ(r.error()->code, errc::MessageTooLarge);
  }
  {  // cut inside an envelope
    connect::EnvelopeReader r;
    r.feed(std::string("\0\0\0\0\x05{}", 7));
    EXPECT_FALSE(r.next().has_value());
    r.finish();
    EXPECT_EQ(r.error()->code, errc::ConnectionLost);
  }
  {  // no end-stream envelope
    connect::EnvelopeReader r;
    r.feed(connect::envelope("{}"));
    EXPECT_TRUE(r.next().has_value());
    r.finish();
    EXPECT_EQ(r.error()->code, errc::ConnectionLost);
  }
  {  // bytes after the end
    connect::EnvelopeReader r;
    r.feed(connect::envelope("{}", connect::kEndStream) + connect::envelope("{}"));
    EXPECT_TRUE(r.next().has_value());
    EXPECT_EQ(r.error()->code, errc::RemoteProtocolViolation);
  }
  {  // unknown flags
    connect::EnvelopeReader r;
    r.feed(std::string("\x80\0\0\0\x02{}", 7));
    EXPECT_FALSE(r.next().has_value());
    EXPECT_EQ(r.error()->code, errc::RemoteProtocolViolation);
  }
}

TEST(Base64, RoundTripsEveryLengthAndByte) {
  std::string all;
  for (int i = 0; i < 256; ++i)
    all.push_back(static_cast<char>(i));
  for (std::size_t n = 0; n <= all.size(); ++n) {
    const std::string part = all.substr(0, n);
    const std::string enc = sandboxio::base64_encode(part);
    EXPECT_EQ(enc.size() % 4, 0u);
    EXPECT_EQ(sandboxio::base64_decode(enc), part) << n;
  }
  EXPECT_EQ(sandboxio::base64_encode("hi\n"), "aGkK");
  EXPECT_EQ(sandboxio::base64_decode("ZXJyCg"), "err\n");  // padding left out
  EXPECT_EQ(sandboxio::base64_decode("-_-_"), sandboxio::base64_decode("+/+/"));
  EXPECT_FALSE(sandboxio::base64_decode("a").has_value());
  EXPECT_FALSE(sandboxio::base64_decode("ab$d").has_value());
}

TEST(Shell, QuotingKeepsEveryArgumentWhole) {
  EXPECT_EQ(sandboxio::shell_join({"echo", "plain", "a-b_c.d/e:f=g"}), "echo plain a-b_c.d/e:f=g");
  EXPECT_EQ(sandboxio::shell_join({"printf", "%s\\n", "it's"}), "printf '%s\\n' 'it'\\''s'");
  EXPECT_EQ(sandboxio::shell_quote(""), "''");
  for (const char* special : {"$HOME", "a b", "~", "#x", "*", "{a,b}", "`id`", "a;b", "!x", "[a]"})
    EXPECT_EQ(sandboxio::shell_quote(special), std::string("'") + special + "'") << special;
}

TEST(E2bConfig, OriginsAndTheirHostHeaders) {
  auto a = sandboxio::e2b::parse_origin("https://api.e2b.app", "");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a.value().endpoint.tls);
  EXPECT_EQ(a.value().endpoint.port, 443);
  EXPECT_EQ(a.value().host, "api.e2b.app");
  EXPECT_EQ(a.value().endpoint.server_name, "api.e2b.app");
  auto b = sandboxio::e2b::parse_origin("http://127.0.0.1:3000/", "");
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b.value().endpoint.tls);
  EXPECT_EQ(b.value().host, "127.0.0.1:3000");
  auto c = sandboxio::e2b::parse_origin("https://[::1]:8443", "/ca.pem");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().endpoint.address, "::1");
  EXPECT_EQ(c.value().host, "[::1]:8443");
  EXPECT_EQ(c.value().endpoint.ca_file, "/ca.pem");
  for (const char* bad :
       {"ftp://x", "https://", "https://h/path", "http://h:99999", "https://u@h"}) {
    auto r = sandboxio::e2b::parse_origin(bad, "");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.problem().code, errc::InvalidOption) << bad;
  }
}

TEST(E2bConfig, VariablesAndDsnOptions) {
  ::setenv("E2B_API_KEY", "e2b_key", 1);
  ::setenv("E2B_DOMAIN", "example.dev", 1);
  ::unsetenv("E2B_API_URL");
  ::unsetenv("E2B_SANDBOX_URL");
  auto c = sandboxio::e2b::config_for(sandboxio::parse_dsn("e2b://base").value());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().api_key, "e2b_key");
  EXPECT_EQ(c.value().api.host, "api.example.dev");
  EXPECT_FALSE(c.value().sandbox.has_value());
  EXPECT_EQ(c.value().template_id, "base");
  ::setenv("E2B_SANDBOX_URL", "http://127.0.0.1:49983", 1);
  auto d = sandboxio::e2b::config_for(
      sandboxio::parse_dsn("e2b://base?api_url=http://127.0.0.1:3000&domain=x.dev").value());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().api.host, "127.0.0.1:3000");
  EXPECT_EQ(d.value().domain, "x.dev");
  ASSERT_TRUE(d.value().sandbox.has_value());
  EXPECT_EQ(d.value().sandbox->host, "127.0.0.1:49983");
  auto bad = sandboxio::e2b::config_for(sandboxio::parse_dsn("e2b://base?colour=red").value());
  EXPECT_FALSE(bad.ok());
  ::unsetenv("E2B_SANDBOX_URL");
  ::unsetenv("E2B_DOMAIN");
  ::unsetenv("E2B_API_KEY");
}

}  // namespace
