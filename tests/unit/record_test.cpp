#include <gtest/gtest.h>

#include <simdjson.h>

#include "sandboxio/codec/json_writer.hpp"
#include "sandboxio/record.hpp"

namespace {

simdjson::dom::element parse(simdjson::dom::parser& parser, const std::string& text) {
  auto result = parser.parse(text);
  EXPECT_FALSE(result.error()) << simdjson::error_message(result.error()) << " in " << text;
  return result.value_unsafe();
}

sandboxio::OperationRecord sample() {
  sandboxio::OperationRecord r;
  r.sequence = 7;
  r.backend = "fake";
  r.sandbox_id = "sb-1";
  r.operation = sandboxio::Operation::Run;
  r.command = "curl -H 'Authorization: Bearer tok123' https://u:pw@h/ && echo $OPENAI_API_KEY";
  r.started = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'000'123));
  r.error_code = 1302;
  r.error_detail = "timed out; env had sk-live-SECRET";
  r.network_policy = "deny-all";
  r.tier = sandboxio::IsolationTier::Container;
  r.exit_code = 137;
  r.termination = sandboxio::Termination::Timeout;
  return r;
}

}  // namespace

TEST(OperationRecord, RedactedOnceAtClose) {
  sandboxio::Redactor redactor;
  redactor.add_secret("sk-live-SECRET");
  auto r = sample();
  sandboxio::close_record(r, sandboxio::Outcome::Timeout, std::chrono::milliseconds(1500),
                          redactor);
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.outcome, sandboxio::Outcome::Timeout);
  EXPECT_EQ(r.command.value().find("tok123"), std::string::npos);
  EXPECT_EQ(r.command.value().find("pw@"), std::string::npos);
  EXPECT_EQ(r.error_detail, "timed out; env had ***");
  // A second close changes nothing: no double redaction, no new outcome.
  const auto closed = r;
  sandboxio::close_record(r, sandboxio::Outcome::Ok, std::chrono::seconds(9), redactor);
  EXPECT_EQ(r, closed);
}

TEST(OperationRecord, JsonLineIsValidJsonWithStableKeys) {
  auto r = sample();
  sandboxio::close_record(r, sandboxio::Outcome::Timeout, std::chrono::milliseconds(1500), {});
  const std::string line = sandboxio::to_json_line(r);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  simdjson::dom::parser parser;
  auto doc = parse(parser, line);
  EXPECT_EQ(std::string_view(doc["backend"]), "fake");
  EXPECT_EQ(std::string_view(doc["operation"]), "run");
  EXPECT_EQ(std::string_view(doc["outcome"]), "timeout");
  EXPECT_EQ(std::string_view(doc["error_code"]), "SBX_E1302");
  EXPECT_EQ(int64_t(doc["exit_code"]), 137);
  EXPECT_EQ(std::string_view(doc["termination"]), "timeout");
  EXPECT_EQ(std::string_view(doc["isolation"]), "container");
  EXPECT_EQ(int64_t(doc["started_unix_ms"]), 1'700'000'000'123);
  EXPECT_DOUBLE_EQ(double(doc["duration_ms"]), 1500.0);
}

TEST(OperationRecord, CommandOnlyWhenCaptured) {
  auto r = sample();
  r.command.reset();
  const std::string line = sandboxio::to_json_line(r);
  EXPECT_EQ(line.find("\"command\""), std::string::npos);
}

TEST(JsonWriter, EscapesEverythingHostile) {
  sandboxio::JsonWriter w;
  const std::string hostile =
      std::string("q\"b\\n\n\t\x01\x7f\0end", 13) + "\xff\xc3\x28" + "\xe2\x9c\x93";
  w.begin_object().key("k\"ey").value(hostile).key("n").value(-3).key("d").value(0.5);
  w.key("inf").value(1.0 / 0.0).key("b").value(true).key("z").null();
  w.key("a").begin_array().value(1).value("x").end_array().end_object();
  simdjson::dom::parser parser;
  auto doc = parse(parser, w.str());
  const std::string_view back = doc["k\"ey"];
  EXPECT_EQ(back.substr(0, 13), std::string_view(hostile).substr(0, 13));
  EXPECT_NE(back.find("\xEF\xBF\xBD"), std::string_view::npos);  // invalid bytes -> U+FFFD
  EXPECT_NE(back.find("\xe2\x9c\x93"), std::string_view::npos);  // valid UTF-8 kept
  EXPECT_TRUE(doc["inf"].is_null());
  EXPECT_EQ(int64_t(doc["a"].at(0)), 1);
}
