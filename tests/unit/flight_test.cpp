// The flight recorder: a session recorded through the sync API replays offline to the same
// events and records; a damaged trace is refused with its code, never misread; secrets stay
// out; the size bound holds. docker:// and e2b:// sessions are replayed in their own suites.
#include <gtest/gtest.h>

#include "../support/flight_session.hpp"
#include "sandboxio/codec/protobuf.hpp"
#include "sandboxio/config.hpp"
#include "sandboxio/fake.hpp"
#include "sandboxio/flight_recorder.hpp"
#include "sandboxio/sinks.hpp"
#include "sandboxio/sync.hpp"

using namespace std::chrono_literals;
using sandboxio::errc;
using sandboxio::ExecResult;
namespace flight = sandboxio::flight;

namespace {

using sandboxio::testing::recorded_session;
using sandboxio::testing::slurp;
using sandboxio::testing::TempDir;
using sandboxio::testing::the_trace;
using Seen = sandboxio::testing::Seen;

sandboxio::Result<flight::ReplaySummary> replay(const std::string& bytes, Seen* seen = nullptr) {
  return sandboxio::testing::replay_bytes(bytes, seen);
}

TEST(Flight, AFakeSessionReplaysOfflineToTheSameResultsAndRecords) {
  // fake:// runs in a World shared by the process; its replay runs in a replica numbered on
  // from where the recorded one was, so a fresh world's session replays exactly.
  auto world = sandboxio::fake::World::create();
  const auto summary = sandboxio::testing::expect_identical_replay(world->dsn(), true, 11);
  EXPECT_GE(summary.records, 7u);
  EXPECT_EQ(summary.recorded.bytes_in, 0u) << "fake:// moves no bytes: it is all in the machine";
}

TEST(Flight, WhatAFakeWorldDeclaresIsReplayedAsItWas) {
  sandboxio::fake::Profile profile;
  profile.tier = sandboxio::IsolationTier::Container;
  profile.capabilities = {sandboxio::Capability::NetworkPolicy, sandboxio::Capability::Streaming,
                          sandboxio::Capability::Filesystem};
  auto world = sandboxio::fake::World::create(profile);
  const auto summary = sandboxio::testing::expect_identical_replay(world->dsn(), false, 11);
  EXPECT_TRUE(summary.complete);
}

TEST(Flight, TheRecordingDirectoryIsOwnerOnly) {
  TempDir dir;
  auto world = sandboxio::fake::World::create();
  (void)recorded_session(world->dsn(), dir.path / "t", dir.path / "a.jsonl");
  struct stat st {};
  ASSERT_EQ(::stat((dir.path / "t").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(Flight, AChangedCommandIsCaughtAtItsEntry) {
  TempDir dir;
  auto world = sandboxio::fake::World::create();
  (void)recorded_session(world->dsn(), dir.path / "t", dir.path / "a.jsonl");
  std::string bytes = slurp(the_trace(dir.path / "t"));
  const auto at = bytes.find("echo one");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 6] = 'x';  // "echo oxe": the replayed stream prints something else
  auto summary = replay(bytes);
  ASSERT_FALSE(summary);
  EXPECT_EQ(summary.problem().code, errc::ReplayDiverged) << summary.problem().describe();
  EXPECT_NE(summary.problem().detail.find("differ"), std::string::npos) << summary.problem().detail;
}

TEST(Flight, ATraceCutAnywhereIsReplayedUpToTheCutOrRefusedNeverMisread) {
  TempDir dir;
  auto world = sandboxio::fake::World::create();
  (void)recorded_session(world->dsn(), dir.path / "t", dir.path / "a.jsonl");
  const std::string bytes = slurp(the_trace(dir.path / "t"));
  std::size_t refused = 0, partial = 0;
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    auto summary = replay(bytes.substr(0, cut));
    if (summary) {
      EXPECT_FALSE(summary.value().complete) << "cut at " << cut;
      ++partial;
    } else {
      EXPECT_EQ(summary.problem().code, errc::TraceInvalid)
          << "cut at " << cut << ": " << summary.problem().describe();
      ++refused;
    }
  }
  EXPECT_GT(partial, 10u);
  EXPECT_GT(refused, 10u);
  auto whole = replay(bytes);
  ASSERT_TRUE(whole) << whole.problem().describe();
  EXPECT_TRUE(whole.value().complete);
}

TEST(Flight, NotATraceIsTraceInvalidWithAHint) {
  for (const std::string& bad :
       {std::string(""), std::string("hello"), std::string("SBXTRACE\x02"),
        std::string("SBXTRACE\x01\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 21)}) {
    auto summary = replay(bad);
    ASSERT_FALSE(summary);
    EXPECT_EQ(summary.problem().code, errc::TraceInvalid) << summary.problem().describe();
    EXPECT_FALSE(summary.problem().effective_hint().empty());
  }
}

TEST(Flight, SecretValuesNeverReachTheTraceAndTheRecordsStillMatch) {
  TempDir dir;
  auto world = sandboxio::fake::World::create();
  const std::string secret = "s3cr3t-VALUE-4242";
  {
    sandboxio::CreateOptions o;
    o.record = (dir.path / "t").string();
    o.audit.sink = std::make_shared<sandboxio::JsonLinesFileSink>((dir.path / "a").string());
    o.audit.capture_commands = true;
    o.audit.sink_timeout = 30s;  // see recorded_session()
    o.env.set_secret("DEPLOY_TOKEN", secret);
    auto sb = sandboxio::sync::Sandbox::create(world->dsn(), o);
    sandboxio::Command c;
    c.argv = {"sh", "-c", ": " + secret};  // on the command line too
    c.env.set_secret("OTHER_PASSWORD", "pw-" + secret);
    EXPECT_EQ(sb.run(c).exit_code, 0);
  }
  const std::string bytes = slurp(the_trace(dir.path / "t"));
  EXPECT_EQ(bytes.find(secret), std::string::npos);
  EXPECT_NE(bytes.find("[secret:DEPLOY_TOKEN]"), std::string::npos);
  Seen seen;
  auto summary = replay(bytes, &seen);
  ASSERT_TRUE(summary) << summary.problem().describe();
  EXPECT_EQ(seen.records, slurp(dir.path / "a"));
  EXPECT_EQ(seen.records.find(secret), std::string::npos);
}

TEST(Flight, TheSizeBoundEndsTheTraceThereAndTheReplaySaysSo) {
  auto world = sandboxio::fake::World::create();
  auto dsn = sandboxio::parse_dsn(world->dsn()).value();
  flight::Header header;
  header.dsn = world->dsn();
  auto sink = std::make_shared<flight::StringTraceSink>();
  sandboxio::Instant now{};
  {
    flight::Recorder m(sandboxio::registry().resolve(dsn).value()->make(dsn).value(), header, sink,
                       4096);
    (void)m.submit_create({}, now);
    while (m.poll_event()) {
    }
    (void)m.submit_write_file("/tmp/big", std::string(10000, 'x'), now);
    while (m.poll_event()) {
    }
    EXPECT_TRUE(m.stats().truncated);
    EXPECT_LE(m.stats().trace_bytes, 4096u);
  }
  EXPECT_LE(sink->out.size(), 4096u + 16);
  auto summary = replay(sink->out);
  ASSERT_TRUE(summary) << summary.problem().describe();
  EXPECT_TRUE(summary.value().truncated);
  EXPECT_FALSE(summary.value().complete);
}

TEST(Flight, ARecordingDirectoryThatCannotBeMadeFailsCreateWithItsCode) {
  sandboxio::CreateOptions o;
  o.record = "/proc/self/no-such-dir/traces";
  try {
    auto sb = sandboxio::sync::Sandbox::create("fake://", o);
    FAIL() << "created without its recording";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::make_error_code(errc::InvalidCreateOptions)) << e.what();
  }
}

TEST(Protobuf, TheReaderStopsAtMalformedInputWithoutReadingPastIt) {
  sandboxio::protobuf::Writer w;
  w.varint(1, 300);
  w.string(2, "abc");
  w.fixed64(3, 7);
  w.fixed32(4, 9);
  const std::string good = w.view();
  sandboxio::protobuf::Reader r(good);
  sandboxio::protobuf::Field f;
  ASSERT_TRUE(r.next(f));
  EXPECT_EQ(f.value, 300u);
  ASSERT_TRUE(r.next(f));
  EXPECT_EQ(f.bytes, "abc");
  ASSERT_TRUE(r.next(f));
  EXPECT_EQ(f.value, 7u);
  ASSERT_TRUE(r.next(f));
  EXPECT_EQ(f.value, 9u);
  EXPECT_FALSE(r.next(f));
  EXPECT_FALSE(r.failed());
  for (std::size_t cut = 1; cut < good.size(); ++cut) {
    sandboxio::protobuf::Reader part(std::string_view(good).substr(0, cut));
    while (part.next(f)) {
    }
    if (cut != 3 && cut != 8 && cut != 17) {
      EXPECT_TRUE(part.failed()) << cut;
    }
  }
  for (const std::string& bad : {std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f"),
                                 std::string("\x00\x01", 2), std::string("\x0b"),
                                 std::string("\x12\x05"
                                             "ab")}) {
    sandboxio::protobuf::Reader part(bad);
    while (part.next(f)) {
    }
    EXPECT_TRUE(part.failed());
  }
}

}  // namespace
