// The gRPC codec on hand-made HTTP/2 events: what each kind of answer becomes (messages, a
// status from trailers or a Trailers-Only head, an HTTP error, a reset), and the bounds.
#include <gtest/gtest.h>

#include "sandboxio/codec/grpc.hpp"

namespace sandboxio {
namespace {

using namespace std::chrono_literals;

http2::Response ok_head(std::vector<http::Header> extra = {}) {
  http2::Response r{1, 200, {{"content-type", "application/grpc+proto"}}};
  for (auto& h : extra)
    r.headers.push_back(std::move(h));
  return r;
}

TEST(Grpc, TheRequestHeadCarriesTheProtocolsFieldsAndTheDeadline) {
  const auto r = grpc::request("api.modal.com:443", "/modal.client.ModalClient/AppGetOrCreate",
                               {{"X-Modal-Token-Id", "ak-1"}}, 2500ms);
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.scheme, "https");
  EXPECT_EQ(r.path, "/modal.client.ModalClient/AppGetOrCreate");
  EXPECT_EQ(r.headers, (std::vector<http::Header>{{"content-type", "application/grpc"},
                                                  {"te", "trailers"},
                                                  {"grpc-timeout", "2500m"},
                                                  {"x-modal-token-id", "ak-1"}}));
}

TEST(Grpc, TimeoutsKeepToEightDigitsInTheSmallestUnitThatFits) {
  EXPECT_EQ(grpc::timeout_value(0ms), "0m");
  EXPECT_EQ(grpc::timeout_value(99'999'999ms), "99999999m");
  EXPECT_EQ(grpc::timeout_value(100'000'000ms), "100000S");
  EXPECT_EQ(grpc::timeout_value(100'000'001ms), "100001S");  // rounded up, never shorter
  EXPECT_EQ(grpc::timeout_value(std::chrono::hours(24 * 365 * 5000)), "43800000H");
}

TEST(Grpc, MessagesAreFramedAndReadBackAtEverySplit) {
  const std::string wire =
      grpc::frame("one") + grpc::frame("") + grpc::frame(std::string(70000, 'x'));
  EXPECT_EQ(wire.substr(0, 5), std::string("\0\0\0\0\3", 5));
  for (std::size_t step = 1; step <= wire.size(); step += (step < 40 ? 1 : 997)) {
    grpc::CallReader c;
    c.on(ok_head());
    std::vector<std::string> got;
    for (std::size_t i = 0; i < wire.size(); i += step) {
      c.on(http2::Data{1, wire.substr(i, step)});
      while (auto m = c.next_message())
        got.push_back(*m);
    }
    c.on(http2::Trailers{1, {{"grpc-status", "0"}}});
    ASSERT_TRUE(c.done());
    EXPECT_TRUE(c.status().ok());
    ASSERT_EQ(got.size(), 3U) << step;
    EXPECT_EQ(got[0], "one");
    EXPECT_EQ(got[1], "");
    EXPECT_EQ(got[2].size(), 70000U);
  }
}

TEST(Grpc, ATrailersOnlyAnswerIsAStatus) {
  grpc::CallReader c;
  c.on(ok_head({{"grpc-status", "16"}, {"grpc-message", "token%20expired"}}));
  c.on(http2::End{1});
  ASSERT_TRUE(c.done());
  EXPECT_EQ(c.status().code, grpc::Code::Unauthenticated);
  EXPECT_EQ(c.status().message, "token expired");
  EXPECT_FALSE(c.status().synthesized);
}

TEST(Grpc, GrpcMessageIsPercentDecodedAndAMalformedEscapeKept) {
  grpc::CallReader c;
  c.on(ok_head());
  c.on(http2::Trailers{1, {{"grpc-status", "3"}, {"grpc-message", "50%25 %C3%A9 %zz %4"}}});
  EXPECT_EQ(c.status().code, grpc::Code::InvalidArgument);
  EXPECT_EQ(c.status().message, "50% \xC3\xA9 %zz %4");
}

TEST(Grpc, AnswersThatAreNotGrpcBecomeTheStatusTheProtocolNames) {
  struct Case {
    std::vector<http2::Event> events;
    grpc::Code code;
  };
  const std::vector<Case> cases = {
      {{http2::Response{1, 503, {}}}, grpc::Code::Unavailable},
      {{http2::Response{1, 401, {}}}, grpc::Code::Unauthenticated},
      {{http2::Response{1, 404, {}}}, grpc::Code::Unimplemented},
      {{http2::Response{1, 500, {}}}, grpc::Code::Unknown},
      {{http2::Response{1, 200, {{"content-type", "text/html"}}}}, grpc::Code::Unknown},
      {{ok_head(), http2::End{1}}, grpc::Code::Internal},
      {{ok_head(), http2::Trailers{1, {{"grpc-message", "x"}}}}, grpc::Code::Internal},
      {{ok_head(), http2::Trailers{1, {{"grpc-status", "abc"}}}}, grpc::Code::Internal},
      {{ok_head(), http2::Data{1, std::string("\1\0\0\0\1z", 6)}}, grpc::Code::Internal},
      {{ok_head(), http2::Data{1, std::string("\0\0\0\0\5ab", 7)},
        http2::Trailers{1, {{"grpc-status", "0"}}}},
       grpc::Code::Internal},  // ended inside a message
      {{http2::Data{1, "early"}}, grpc::Code::Internal},
      {{ok_head(), http2::Reset{1, 8, false, Problem{errc::RemoteProtocolViolation, "reset", {}}}},
       grpc::Code::Cancelled},
      {{ok_head(), http2::Reset{1, 7, true, Problem{errc::ConnectionLost, "refused", {}}}},
       grpc::Code::Unavailable},
      {{ok_head(), http2::Reset{1, 2, false, Problem{errc::RemoteProtocolViolation, "reset", {}}}},
       grpc::Code::Internal},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    grpc::CallReader c;
    for (const auto& e : cases[i].events)
      c.on(e);
    ASSERT_TRUE(c.done()) << i;
    EXPECT_EQ(c.status().code, cases[i].code) << i << ": " << c.status().message;
    EXPECT_TRUE(c.status().synthesized) << i;
    ASSERT_TRUE(c.problem()) << i;
    EXPECT_FALSE(c.status().message.empty()) << i;
  }
}

TEST(Grpc, AMessageOverTheBoundIsRefusedFromItsPrefix) {
  grpc::CallReader c(1024);
  c.on(ok_head());
  c.on(http2::Data{1, std::string("\0\0\0\x04\x01", 5)});  // 1025 bytes announced
  ASSERT_TRUE(c.done());
  EXPECT_EQ(c.status().code, grpc::Code::ResourceExhausted);
  EXPECT_EQ(c.problem()->code, errc::MessageTooLarge);
  EXPECT_EQ(c.buffered(), 0U);
  c.on(http2::Trailers{1, {{"grpc-status", "0"}}});  // nothing changes after done()
  EXPECT_EQ(c.status().code, grpc::Code::ResourceExhausted);
}

TEST(Grpc, MessagesBeforeAStatusAreStillGiven) {
  grpc::CallReader c;
  c.on(ok_head());
  c.on(http2::Data{1, grpc::frame("a") + grpc::frame("b")});
  c.on(http2::Trailers{1, {{"grpc-status", "14"}, {"grpc-message", "bye"}}});
  EXPECT_EQ(c.next_message(), "a");
  EXPECT_EQ(c.next_message(), "b");
  EXPECT_EQ(c.next_message(), std::nullopt);
  EXPECT_EQ(c.status().code, grpc::Code::Unavailable);
  EXPECT_EQ(grpc::code_name(c.status().code), "UNAVAILABLE");
  EXPECT_EQ(grpc::code_name(static_cast<grpc::Code>(40)), "CODE_40");
}

}  // namespace
}  // namespace sandboxio
