#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <latch>

#include "sandboxio/config.hpp"
#include "sandboxio/sinks.hpp"

using namespace std::chrono_literals;

namespace {

sandboxio::OperationRecord record(std::uint64_t seq) {
  sandboxio::OperationRecord r;
  r.sequence = seq;
  r.backend = "fake";
  r.closed = true;
  return r;
}

// A sink that blocks until the test releases it: a stuck audit backend.
class BlockingSink final : public sandboxio::AuditSink {
 public:
  sandboxio::Result<void> write(const sandboxio::OperationRecord&) override {
    release_.get_future().wait();
    return {};
  }
  void release() { release_.set_value(); }

 private:
  std::promise<void> release_;
};

class FailingSink final : public sandboxio::AuditSink {
 public:
  sandboxio::Result<void> write(const sandboxio::OperationRecord&) override {
    return sandboxio::Problem{sandboxio::errc::AuditSinkFailed, "disk full", ""};
  }
};

}  // namespace

TEST(QueueSink, KeepsOrderAndIsBounded) {
  sandboxio::QueueSink q(2);
  EXPECT_TRUE(q.write(record(1)).ok());
  EXPECT_TRUE(q.write(record(2)).ok());
  auto full = q.write(record(3));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.problem().code, sandboxio::errc::QueueFull);
  auto got = q.drain();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].sequence, 1u);
  EXPECT_EQ(got[1].sequence, 2u);
  EXPECT_EQ(q.size(), 0u);
}

TEST(JsonLinesFileSink, AppendsOneLinePerRecordWithPrivateMode) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("sbx-sink-" + std::to_string(::getpid()) + ".jsonl");
  std::filesystem::remove(path);
  {
    sandboxio::JsonLinesFileSink sink(path.string());
    ASSERT_TRUE(sink.write(record(1)).ok());
    ASSERT_TRUE(sink.write(record(2)).ok());
  }
  std::ifstream in(path);
  std::string l1, l2, l3;
  ASSERT_TRUE(std::getline(in, l1));
  ASSERT_TRUE(std::getline(in, l2));
  EXPECT_FALSE(std::getline(in, l3));
  EXPECT_NE(l1.find("\"seq\":1"), std::string::npos);
  EXPECT_NE(l2.find("\"seq\":2"), std::string::npos);
  const auto perms = std::filesystem::status(path).permissions();
  EXPECT_EQ(perms & std::filesystem::perms::others_read, std::filesystem::perms::none);
  std::filesystem::remove(path);
}

TEST(JsonLinesFileSink, UnwritablePathIsACodedError) {
  sandboxio::JsonLinesFileSink sink("/nonexistent-dir/for/sure/x.jsonl");
  auto r = sink.write(record(1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.problem().code, sandboxio::errc::AuditSinkFailed);
}

TEST(AuditDispatcher, DeliversInOrder) {
  auto q = std::make_shared<sandboxio::QueueSink>();
  sandboxio::AuditDispatcher d(q, 5s, sandboxio::AuditFailurePolicy::Fail);
  for (std::uint64_t i = 1; i <= 50; ++i)
    ASSERT_TRUE(d.deliver(record(i)).ok());
  auto got = q->drain();
  ASSERT_EQ(got.size(), 50u);
  for (std::uint64_t i = 0; i < 50; ++i)
    EXPECT_EQ(got[i].sequence, i + 1);
}

TEST(AuditDispatcher, StuckSinkFailsWithinTheTimeoutUnderFailPolicy) {
  auto sink = std::make_shared<BlockingSink>();
  {
    sandboxio::AuditDispatcher d(sink, 50ms, sandboxio::AuditFailurePolicy::Fail);
    auto r = d.deliver(record(1));  // returns although the sink never does
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.problem().code, sandboxio::errc::AuditSinkTimeout);
  }  // the destructor must not hang on the stuck sink either
  sink->release();
}

TEST(AuditDispatcher, StuckSinkWarnsUnderWarnPolicy) {
  auto sink = std::make_shared<BlockingSink>();
  std::vector<sandboxio::Problem> warnings;
  {
    sandboxio::AuditDispatcher d(sink, 50ms, sandboxio::AuditFailurePolicy::Warn,
                                 [&](const sandboxio::Problem& p) { warnings.push_back(p); });
    EXPECT_TRUE(d.deliver(record(1)).ok());
  }
  sink->release();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].code, sandboxio::errc::AuditSinkTimeout);
}

TEST(AuditDispatcher, FailingSinkReportsItsProblem) {
  sandboxio::AuditDispatcher d(std::make_shared<FailingSink>(), 5s,
                               sandboxio::AuditFailurePolicy::Fail);
  auto r = d.deliver(record(1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.problem().code, sandboxio::errc::AuditSinkFailed);
  EXPECT_NE(r.problem().detail.find("disk full"), std::string::npos);
}

TEST(Config, EnvironmentDurations) {
  ::unsetenv("SBX_TEARDOWN_GRACE");
  EXPECT_EQ(sandboxio::teardown_grace().value(), 5s);
  ::setenv("SBX_TEARDOWN_GRACE", "250ms", 1);
  EXPECT_EQ(sandboxio::teardown_grace().value(), 250ms);
  ::setenv("SBX_TEARDOWN_GRACE", "soon", 1);
  auto bad = sandboxio::teardown_grace();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.problem().code, sandboxio::errc::InvalidEnvironment);
  EXPECT_NE(bad.problem().hint.find("SBX_TEARDOWN_GRACE"), std::string::npos);
  ::unsetenv("SBX_TEARDOWN_GRACE");
  ::setenv("SBX_AUDIT_TIMEOUT", "2s", 1);
  EXPECT_EQ(sandboxio::audit_timeout().value(), 2s);
  ::unsetenv("SBX_AUDIT_TIMEOUT");
  EXPECT_EQ(sandboxio::audit_timeout().value(), 1s);
}

TEST(Registry, UnknownSchemeListsKnownOnes) {
  auto dsn = sandboxio::parse_dsn("daytona://x").value();
  auto r = sandboxio::registry().resolve(dsn);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.problem().code, sandboxio::errc::BackendNotFound);
  EXPECT_NE(r.problem().detail.find("docker://"), std::string::npos);
  EXPECT_NE(r.problem().detail.find("e2b://"), std::string::npos);
  EXPECT_NE(r.problem().detail.find("modal://"), std::string::npos);
}

TEST(Registry, ThirdPartySchemeCanBeAdded) {
  sandboxio::BackendRegistry reg;
  ASSERT_TRUE(reg.add({.scheme = "mybox",
                       .summary = "mine",
                       .factory = {},
                       .enable_hint = "build mybox",
                       .options = {}})
                  .ok());
  EXPECT_FALSE(
      reg.add({.scheme = "My Box", .summary = "", .factory = {}, .enable_hint = "", .options = {}})
          .ok());
  EXPECT_EQ(reg.schemes(), std::vector<std::string>{"mybox"});
  auto r = reg.resolve(sandboxio::parse_dsn("mybox://t").value());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.problem().code, sandboxio::errc::BackendNotInstalled);
  EXPECT_EQ(r.problem().hint, "build mybox");
}
