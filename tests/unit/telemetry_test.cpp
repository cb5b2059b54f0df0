// Tracing: W3C traceparent parsing, span ids, records that carry their span, TRACEPARENT for
// the programs a sandbox runs, the OTEL_* settings, the protobuf encoder, and an exporter that
// never holds an operation up (a dead endpoint drops and counts). The wire format is proven
// against the official OpenTelemetry definitions in tests/otel.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "../support/free_port.hpp"
#include "sandboxio/codec/protobuf.hpp"
#include "sandboxio/fake.hpp"
#include "sandboxio/sinks.hpp"
#include "sandboxio/sync.hpp"
#include "sandboxio/telemetry.hpp"
#include "sandboxio/trace.hpp"

using namespace std::chrono_literals;
using sandboxio::Operation;
using sandboxio::OperationRecord;
using sandboxio::Outcome;
using sandboxio::TraceContext;
namespace telemetry = sandboxio::telemetry;

namespace {

constexpr const char* kParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      if (value != nullptr) {
        ::setenv(name, value, 1);
      } else {
        ::unsetenv(name);
      }
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) {
      if (old) {
        ::setenv(name.c_str(), old->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

OperationRecord traced_record(std::uint64_t sequence) {
  OperationRecord r;
  r.sequence = sequence;
  r.backend = "fake";
  r.operation = Operation::Run;
  r.trace.assign("4bf92f3577b34da6a3ce929d0e0e4736", {}, {});
  r.trace.span = sandboxio::span_id_for(7, sequence);
  r.started = std::chrono::system_clock::now();
  r.closed = true;
  return r;
}

}  // namespace

TEST(TraceContext, ParsesTheW3cTraceparentAndRefusesWhatW3cRefuses) {
  auto ctx = TraceContext::from_traceparent(kParent);
  ASSERT_TRUE(ctx) << ctx.problem().describe();
  EXPECT_EQ(ctx.value().trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(ctx.value().parent_span_id, "00f067aa0ba902b7");
  EXPECT_TRUE(ctx.value().sampled);
  EXPECT_FALSE(
      TraceContext::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
          .value()
          .sampled);
  // A later version is read as 00 is, extra fields after a '-' included.
  EXPECT_TRUE(TraceContext::from_traceparent(
      "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next"));
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // no flags
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // uppercase
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero parent
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // 00 is 55 bytes
           "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",    // separators
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",    // not hex
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",   // extra without '-'
       }) {
    auto r = TraceContext::from_traceparent(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.problem().code, sandboxio::errc::InvalidOption) << bad;
    EXPECT_FALSE(r.problem().hint.empty());
  }
  EXPECT_EQ(ctx.value().traceparent("00000000000000aa"),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00000000000000aa-01");
}

TEST(TraceContext, SpanIdsOfOneSeedAreDistinctHexAndNeverZero) {
  std::set<std::string> seen;
  for (std::uint64_t seq = 0; seq < 20000; ++seq) {
    const auto raw = sandboxio::span_id_for(0x5eed, seq);
    const std::string id(raw.data(), raw.size());
    ASSERT_EQ(id.size(), 16u);
    ASSERT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    ASSERT_NE(id, "0000000000000000");
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 20000u);
  EXPECT_NE(sandboxio::span_id_for(1, 1), sandboxio::span_id_for(2, 1));
}

TEST(Tracing, EveryRecordIsASpanOfTheCallersTraceAndACommandSeesItsOwnSpan) {
  ScopedEnv env{{"TRACEPARENT", nullptr}, {"OTEL_EXPORTER_OTLP_ENDPOINT", nullptr}};
  auto world = sandboxio::fake::World::create();
  auto queue = std::make_shared<sandboxio::QueueSink>();
  sandboxio::CreateOptions o;
  o.audit.sink = queue;
  o.trace = TraceContext::from_traceparent(kParent).value();
  std::string seen;
  {
    auto sb = sandboxio::sync::Sandbox::create(world->dsn(), o);
    seen = sb.run({"sh", "-c", "echo $TRACEPARENT"}).stdout_bytes;
    // A TRACEPARENT of the caller's own is left alone.
    sandboxio::Command mine;
    mine.argv = {"sh", "-c", "echo $TRACEPARENT"};
    mine.env.set("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01");
    EXPECT_EQ(sb.run(mine).stdout_bytes,
              "00-11111111111111111111111111111111-2222222222222222-01\n");
  }
  const auto records = queue->drain();
  ASSERT_GE(records.size(), 4u);  // create, run, run, kill
  std::set<std::string> ids;
  for (const auto& r : records) {
    EXPECT_EQ(r.trace.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736") << to_string(r.operation);
    EXPECT_EQ(r.trace.parent_span_id(), "00f067aa0ba902b7") << to_string(r.operation);
    EXPECT_EQ(r.trace.span_id().size(), 16u);
    ids.insert(std::string(r.trace.span_id()));
    EXPECT_NE(
        sandboxio::to_json_line(r).find("\"span_id\":\"" + std::string(r.trace.span_id()) + "\""),
        std::string::npos);
  }
  EXPECT_EQ(ids.size(), records.size()) << "one span id per record";
  EXPECT_EQ(records[0].operation, Operation::Create);
  ASSERT_EQ(records[1].operation, Operation::Run);
  EXPECT_EQ(seen, "00-4bf92f3577b34da6a3ce929d0e0e4736-" + std::string(records[1].trace.span_id()) +
                      "-01\n");
}

TEST(Tracing, NothingIsTracedUnlessAskedAndABadTraceparentIsIgnoredWithAWarning) {
  auto world = sandboxio::fake::World::create();
  {
    ScopedEnv env{{"TRACEPARENT", nullptr}};
    auto queue = std::make_shared<sandboxio::QueueSink>();
    sandboxio::CreateOptions o;
    o.audit.sink = queue;
    auto sb = sandboxio::sync::Sandbox::create(world->dsn(), o);
    EXPECT_EQ(sb.run({"sh", "-c", "echo [$TRACEPARENT]"}).stdout_bytes, "[]\n");
    for (const auto& r : queue->drain())
      EXPECT_FALSE(r.trace.traced());
  }
  {
    ScopedEnv env{{"TRACEPARENT", kParent}};
    auto sb = sandboxio::sync::Sandbox::create(world->dsn());
    EXPECT_NE(sb.run({"sh", "-c", "echo $TRACEPARENT"})
                  .stdout_bytes.find("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
              std::string::npos)
        << "TRACEPARENT in the environment is the parent";
  }
  {
    ScopedEnv env{{"TRACEPARENT", "00-nonsense"}};
    auto sb = sandboxio::sync::Sandbox::create(world->dsn());
    EXPECT_EQ(sb.run({"sh", "-c", "echo [$TRACEPARENT]"}).stdout_bytes, "[]\n");
    bool warned = false;
    for (const auto& w : sb.warnings())
      warned = warned || (w.code == sandboxio::errc::InvalidEnvironment &&
                          w.detail.find("TRACEPARENT") != std::string::npos);
    EXPECT_TRUE(warned) << "an unusable TRACEPARENT is reported, not silently dropped";
  }
}

TEST(OtelSettings, FollowTheOpenTelemetryVariables) {
  const std::initializer_list<std::pair<const char*, const char*>> none = {
      {"OTEL_SDK_DISABLED", nullptr},
      {"OTEL_TRACES_EXPORTER", nullptr},
      {"OTEL_EXPORTER_OTLP_ENDPOINT", nullptr},
      {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", nullptr},
      {"OTEL_EXPORTER_OTLP_PROTOCOL", nullptr},
      {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", nullptr},
      {"OTEL_EXPORTER_OTLP_HEADERS", nullptr},
      {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", nullptr},
      {"OTEL_EXPORTER_OTLP_TIMEOUT", nullptr},
      {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", nullptr},
      {"OTEL_SERVICE_NAME", nullptr},
      {"OTEL_RESOURCE_ATTRIBUTES", nullptr},
      {"OTEL_BSP_SCHEDULE_DELAY", nullptr},
      {"OTEL_BSP_MAX_QUEUE_SIZE", nullptr},
      {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", nullptr}};
  ScopedEnv clean(none);
  EXPECT_FALSE(telemetry::settings_from_env().value()) << "off unless asked";
  {
    ScopedEnv e{{"OTEL_TRACES_EXPORTER", "otlp"}};
    EXPECT_EQ(telemetry::settings_from_env().value()->endpoint, "http://localhost:4318/v1/traces");
  }
  {
    ScopedEnv e{
        {"OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example:4318/base/"},
        {"OTEL_EXPORTER_OTLP_HEADERS", " api-key = a%2Cb%3Dc , x-team=agents"},
        {"OTEL_SERVICE_NAME", "my-agent"},
        {"OTEL_RESOURCE_ATTRIBUTES", "service.name=ignored,deployment.environment.name=prod"},
        {"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"}};
    auto s = telemetry::settings_from_env().value().value();
    EXPECT_EQ(s.endpoint, "https://collector.example:4318/base/v1/traces");
    EXPECT_EQ(s.timeout, 2500ms);
    ASSERT_EQ(s.headers.size(), 2u);
    EXPECT_EQ(s.headers[0], (std::pair<std::string, std::string>{"api-key", "a,b=c"}));
    auto resource = [&](const std::string& key) {
      for (const auto& [k, v] : s.resource)
        if (k == key) return v;
      return std::string("<none>");
    };
    EXPECT_EQ(resource("service.name"), "my-agent") << "OTEL_SERVICE_NAME wins";
    EXPECT_EQ(resource("deployment.environment.name"), "prod");
    EXPECT_EQ(resource("telemetry.sdk.name"), "sandboxio");
  }
  {
    // The signal's own endpoint is used as it is; it wins over the base one.
    ScopedEnv e{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"},
                {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:9999/custom"}};
    EXPECT_EQ(telemetry::settings_from_env().value()->endpoint, "http://traces:9999/custom");
  }
  for (auto off :
       {std::pair{"OTEL_TRACES_EXPORTER", "none"}, std::pair{"OTEL_SDK_DISABLED", "true"}}) {
    ScopedEnv e{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"}, off};
    EXPECT_FALSE(telemetry::settings_from_env().value()) << off.first;
  }
  for (auto bad :
       {std::pair{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
        std::pair{"OTEL_TRACES_EXPORTER", "zipkin"},
        std::pair{"OTEL_EXPORTER_OTLP_HEADERS", "novalue"},
        std::pair{"OTEL_EXPORTER_OTLP_HEADERS", "k=%zz"},
        std::pair{"OTEL_EXPORTER_OTLP_TIMEOUT", "ten"}, std::pair{"OTEL_BSP_MAX_QUEUE_SIZE", "0"},
        std::pair{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://x"},
        std::pair{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://x:99999/"}}) {
    ScopedEnv e{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"}, bad};
    auto r = telemetry::settings_from_env();
    ASSERT_FALSE(r) << bad.first << "=" << bad.second;
    EXPECT_EQ(r.problem().code, sandboxio::errc::InvalidEnvironment);
    EXPECT_NE(r.problem().detail.find(bad.first), std::string::npos) << r.problem().detail;
  }
}

TEST(OtelSettings, AnUnusableHeaderIsNamedButItsValueNeverPrinted) {
  ScopedEnv e{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"},
              {"OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=sk-live-secret%zz"},
              {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", nullptr}};
  auto r = telemetry::settings_from_env();
  ASSERT_FALSE(r);
  EXPECT_NE(r.problem().describe().find("x-api-key"), std::string::npos) << r.problem().describe();
  EXPECT_EQ(r.problem().describe().find("sk-live-secret"), std::string::npos)
      << r.problem().describe();
}

TEST(Protobuf, EncodesAsTheWireFormatSays) {
  sandboxio::protobuf::Writer w;
  w.varint(1, 150);  // the specification's own example: 08 96 01
  EXPECT_EQ(w.view(), std::string("\x08\x96\x01", 3));
  sandboxio::protobuf::Writer z;
  z.varint(1, 0);
  z.string(2, "");
  z.fixed64(3, 0);
  EXPECT_EQ(z.view(), "") << "proto3 defaults are omitted";
  z.varint_present(1, 0);
  EXPECT_EQ(z.view(), std::string("\x08\x00", 2)) << "a oneof member is written even at 0";
  sandboxio::protobuf::Writer n;
  n.int64(3, -1);
  EXPECT_EQ(n.view().size(), 11u) << "a negative int64 is ten varint bytes";
  sandboxio::protobuf::Writer f;
  f.fixed64(7, 0x0102030405060708ULL);
  EXPECT_EQ(f.view(), std::string("\x39\x08\x07\x06\x05\x04\x03\x02\x01", 9));
  sandboxio::protobuf::Writer outer, inner;
  inner.string(1, "testing");
  outer.message(3, inner);
  EXPECT_EQ(outer.view(), std::string("\x1a\x09\x0a\x07testing", 11));
}

TEST(Spans, MapOutcomesAndErrorsAsOpenTelemetryExpects) {
  OperationRecord ok = traced_record(1);
  ok.exit_code = 3;
  ok.termination = sandboxio::Termination::Exited;
  auto s = telemetry::to_span(ok);
  EXPECT_EQ(s.name, "execute_tool sandboxio.run");
  EXPECT_EQ(s.status, 0) << "a command that exited non-zero ran: not an error";
  ASSERT_NE(s.find("process.exit.code"), nullptr);
  EXPECT_EQ(std::get<std::int64_t>(s.find("process.exit.code")->value), 3);
  EXPECT_EQ(std::get<std::string>(s.find("gen_ai.operation.name")->value), "execute_tool");

  OperationRecord failed = traced_record(2);
  failed.operation = Operation::WriteFile;
  failed.outcome = Outcome::Failed;
  failed.error_code = static_cast<int>(sandboxio::errc::FilePermissionDenied);
  failed.error_detail = "cannot write /etc/x";
  s = telemetry::to_span(failed);
  EXPECT_EQ(s.name, "sandboxio.write_file");
  EXPECT_EQ(s.kind, 3);
  EXPECT_EQ(s.status, 2);
  EXPECT_EQ(s.status_message, "cannot write /etc/x");
  EXPECT_EQ(s.find("gen_ai.operation.name"), nullptr) << "only commands and code are tools";
  EXPECT_EQ(std::get<std::string>(s.find("error.type")->value),
            std::string(sandboxio::find_error(failed.error_code.value())->id));

  OperationRecord cancelled = traced_record(3);
  cancelled.outcome = Outcome::Cancelled;
  EXPECT_EQ(telemetry::to_span(cancelled).status, 0) << "the caller's choice is not an error";
}

TEST(OtlpExporter, ADeadEndpointDropsAndCountsAndNeverHoldsAnOperationUp) {
  telemetry::OtlpSettings s;
  s.endpoint =
      "http://127.0.0.1:" + std::to_string(sandboxio::testing::free_loopback_port()) + "/v1/traces";
  s.schedule_delay = 1h;  // only flush() sends
  s.max_queue = 8;
  telemetry::OtlpExporter exporter(s);
  for (std::uint64_t i = 1; i <= 20; ++i)
    ASSERT_TRUE(exporter.write(traced_record(i))) << "a full queue never fails an operation";
  EXPECT_EQ(exporter.stats().dropped, 12u) << "past the queue's bound, spans are dropped";
  EXPECT_TRUE(exporter.flush(10s));
  const auto stats = exporter.stats();
  EXPECT_EQ(stats.dropped, 20u) << "the queued 8 failed to export";
  EXPECT_EQ(stats.exported, 0u);
  EXPECT_GE(stats.failed_exports, 1u);
  EXPECT_NE(stats.last_error.find("refused"), std::string::npos) << stats.last_error;
}

TEST(OtlpExporter, AFakeSandboxRunsWithADeadEndpointAndItsSpansAreCounted) {
  telemetry::OtlpSettings s;
  s.endpoint =
      "http://127.0.0.1:" + std::to_string(sandboxio::testing::free_loopback_port()) + "/v1/traces";
  auto exporter = std::make_shared<telemetry::OtlpExporter>(s);
  auto world = sandboxio::fake::World::create();
  sandboxio::CreateOptions o;
  o.audit.sink = exporter;  // explicitly, as a sink: the sandbox's trace starts here
  {
    auto sb = sandboxio::sync::Sandbox::create(world->dsn(), o);
    for (int i = 0; i < 50; ++i)
      ASSERT_EQ(sb.run({"echo", "x"}).exit_code, 0);
  }
  EXPECT_TRUE(exporter->flush(10s));
  EXPECT_EQ(exporter->stats().dropped, 52u) << "create, 50 runs and kill: all counted";
}

namespace {

// W3C trace-flags: a caller whose traceparent says "not sampled" (flags 00) gets no span
// exported for the sandbox's operations, while its commands still see the trace (flag 00).
TEST(OtlpExporter, ACallerThatSaysNotSampledGetsNoSpansButItsCommandsSeeTheTrace) {
  telemetry::OtlpSettings s;
  s.endpoint =
      "http://127.0.0.1:" + std::to_string(sandboxio::testing::free_loopback_port()) + "/v1/traces";
  auto exporter = std::make_shared<telemetry::OtlpExporter>(s);
  auto world = sandboxio::fake::World::create();
  sandboxio::CreateOptions o;
  o.audit.sink = exporter;
  o.trace =
      TraceContext::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
          .value();
  std::string seen;
  {
    auto sb = sandboxio::sync::Sandbox::create(world->dsn(), o);
    seen = sb.run({"sh", "-c", "echo $TRACEPARENT"}).stdout_bytes;
  }
  EXPECT_TRUE(exporter->flush(10s));
  EXPECT_EQ(exporter->stats().dropped + exporter->stats().exported, 0u) << "nothing to export";
  EXPECT_EQ(seen.substr(0, 36), "00-4bf92f3577b34da6a3ce929d0e0e4736-");
  EXPECT_EQ(seen.substr(52), "-00\n");
}

}  // namespace
