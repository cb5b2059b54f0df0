// Behaviour of fake:// through the sync API: what a user's offline tests rely on.
#include <gtest/gtest.h>

#include "sandboxio/fake.hpp"
#include "sandboxio/sinks.hpp"
#include "sandboxio/sync.hpp"

using namespace std::chrono_literals;
using sandboxio::Capability;
using sandboxio::Command;
using sandboxio::errc;
using sandboxio::ExecResult;
using sandboxio::StreamKind;
using sandboxio::Termination;
using sandboxio::sync::Sandbox;

namespace {

class FakeSync : public testing::Test {
 protected:
  std::shared_ptr<sandboxio::fake::World> world = sandboxio::fake::World::create();
  Sandbox create(sandboxio::CreateOptions options = {}, const std::string& query = "") {
    return Sandbox::create(world->dsn() + query, std::move(options));
  }
  static ExecResult sh(Sandbox& sb, const std::string& script) {
    return sb.run({"sh", "-c", script});
  }
};

TEST_F(FakeSync, ExitCodesAreTheProcessesOwn) {
  auto sb = create();
  EXPECT_EQ(sh(sb, "true").exit_code, 0);
  EXPECT_EQ(sh(sb, "false").exit_code, 1);
  EXPECT_EQ(sh(sb, "exit 3").exit_code, 3);
  const auto not_exec = sb.run({"/etc/hostname"});
  EXPECT_EQ(not_exec.exit_code, 126);
  const auto missing = sb.run({"definitely-not-installed"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.stderr_bytes.find("not found"), std::string::npos);
  const auto killed = sh(sb, "kill -9 $$");
  EXPECT_EQ(killed.exit_code, 137);
  EXPECT_EQ(killed.termination, Termination::Signalled);
  EXPECT_EQ(killed.signal, 9);
}

TEST_F(FakeSync, AnOperatorWhereAWordMustBeIsASyntaxError) {
  // Found by fuzzing: the shell looped on `>>&+` (no word after a redirection) until it ran out
  // of memory.
  auto sb = create();
  for (const char* script : {"echo hi >>&+", "echo hi >&&", "cat <|", "echo >;"}) {
    const auto r = sh(sb, script);
    EXPECT_EQ(r.exit_code, 2) << script;
    EXPECT_NE(r.stderr_bytes.find("syntax error"), std::string::npos) << script;
  }
}

TEST_F(FakeSync, PrintfReusesItsFormatOnlyWhileItTakesArguments) {
  // Found by fuzzing: a format without conversions and extra arguments looped forever.
  auto sb = create();
  EXPECT_EQ(sh(sb, "printf x y z").stdout_bytes, "x");
  EXPECT_EQ(sh(sb, "printf '%s-' a b c").stdout_bytes, "a-b-c-");
  EXPECT_EQ(sh(sb, "printf '%d,%s;' 1 a 2").stdout_bytes, "1,a;2,;");
}

TEST_F(FakeSync, PythonIntegersThatOverflowSaySo) {
  // Found by fuzzing: 64-bit overflow in the mini-Python was undefined behaviour.
  auto sb = create();
  const auto r = sb.run({"python3", "-c", "print(888889888888888888 * 88881)"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.stderr_bytes.find("OverflowError"), std::string::npos) << r.stderr_bytes;
  EXPECT_EQ(sb.run({"python3", "-c", "print(6 * 7 - 2)"}).stdout_bytes, "40\n");
}

TEST_F(FakeSync, PythonSleepTakesVirtualTimeAndRefusesNegativeLengths) {
  // Found by fuzzing: a sleep of 10^14 seconds overflowed the virtual clock.
  auto sb = create();
  Command c;
  c.argv = {"python3", "-c", "import time\ntime.sleep(79111111111104)\nprint('woke')"};
  c.timeout = 2s;
  const auto slept = sb.run(c);
  EXPECT_EQ(slept.termination, Termination::Timeout);
  EXPECT_EQ(slept.stdout_bytes, "");
  const auto negative = sb.run({"python3", "-c", "import time\ntime.sleep(-1)"});
  EXPECT_EQ(negative.exit_code, 1);
  EXPECT_NE(negative.stderr_bytes.find("ValueError: sleep length must be non-negative"),
            std::string::npos)
      << negative.stderr_bytes;
}

TEST_F(FakeSync, StreamsAreKeptApartAndBinarySafe) {
  auto sb = create();
  const auto r = sh(sb, "echo o1; echo e1 >&2; echo o2; echo e2 1>&2; printf 'x\\0y'");
  EXPECT_EQ(r.stdout_bytes, std::string("o1\no2\nx\0y", 9));
  EXPECT_EQ(r.stderr_bytes, "e1\ne2\n");
  EXPECT_TRUE(r.ok());
}

TEST_F(FakeSync, TenMegabytesOfOutput) {
  auto sb = create();
  const auto r = sb.run({"head", "-c", "10000000", "/dev/zero"});
  EXPECT_EQ(r.stdout_bytes.size(), 10'000'000u);
  EXPECT_EQ(r.stdout_bytes.find_first_not_of('\0'), std::string::npos);
}

TEST_F(FakeSync, OutputLimitIsACodedError) {
  auto sb = create();
  Command c;
  c.argv = {"head", "-c", "2000", "/dev/zero"};
  c.output_limit = 1000;
  try {
    (void)sb.run(c);
    FAIL() << "no error";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::OutputLimitExceeded);
  }
}

TEST_F(FakeSync, EnvAndWorkdir) {
  sandboxio::CreateOptions o;
  o.env.set("GREETING", "hi");
  o.workdir = "/work";
  auto sb = create(o);
  EXPECT_EQ(sh(sb, "echo $GREETING; pwd").stdout_bytes, "hi\n/work\n");
  Command c;
  c.argv = {"sh", "-c", "echo $GREETING $EXTRA; pwd"};
  c.env.set("EXTRA", "there");
  c.workdir = "/tmp";
  EXPECT_EQ(sb.run(c).stdout_bytes, "hi there\n/tmp\n");
}

TEST_F(FakeSync, TimeoutKillsTheWholeTreeAndTheSandboxSurvives) {
  auto sb = create();
  Command c;
  c.argv = {"sh", "-c", "setsid sleep 100 >/dev/null 2>&1 & sleep 50 & echo started; sleep 30"};
  c.timeout = 100ms;
  const auto r = sb.run(c);
  EXPECT_EQ(r.termination, Termination::Timeout);
  EXPECT_EQ(r.exit_code, 137);
  EXPECT_EQ(r.stdout_bytes, "started\n");  // output received before the kill is kept
  EXPECT_EQ(world->running_processes(), 0u);
  sb.write_file("/tmp/kept", "yes");
  EXPECT_TRUE(sh(sb, "cat /tmp/kept").ok());
}

TEST_F(FakeSync, StreamingInOrderWithGapFreeOffsets) {
  auto sb = create();
  auto p = sb.stream({"sh", "-c", "echo a; sleep 0.05; echo b >&2; echo c; sleep 0.05; echo d"});
  std::string out, err;
  std::uint64_t next_offset[2] = {0, 0};
  while (auto c = p.next()) {
    const int s = c->stream == StreamKind::Stdout ? 0 : 1;
    EXPECT_EQ(c->offset, next_offset[s]);
    next_offset[s] += c->data.size();
    (s == 0 ? out : err) += c->data;
  }
  const auto r = p.wait();
  EXPECT_EQ(out, "a\nc\nd\n");
  EXPECT_EQ(err, "b\n");
  EXPECT_TRUE(r.streamed);
  EXPECT_TRUE(r.stdout_bytes.empty());
  EXPECT_EQ(r.exit_code, 0);
}

TEST_F(FakeSync, StreamingLargeOutputIsBoundedByBackpressure) {
  auto sb = create();
  auto p = sb.stream({"head", "-c", "8000000", "/dev/zero"});
  std::size_t total = 0, biggest = 0;
  while (auto c = p.next()) {
    total += c->data.size();
    biggest = std::max(biggest, c->data.size());
  }
  EXPECT_EQ(total, 8'000'000u);
  EXPECT_LE(biggest, 64u * 1024);
}

TEST_F(FakeSync, DroppingAStreamKillsTheProcess) {
  auto sb = create();
  {
    auto p = sb.stream({"sh", "-c", "echo first; sleep 60; echo never"});
    auto c = p.next();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->data, "first\n");
    EXPECT_EQ(world->running_processes(), 1u);
  }
  EXPECT_EQ(world->running_processes(), 0u);
  EXPECT_TRUE(sh(sb, "true").ok());  // the next command works
}

TEST_F(FakeSync, AnExceptionInTheConsumerLoopKillsTheProcess) {
  auto sb = create();
  try {
    auto p = sb.stream({"sh", "-c", "echo x; sleep 60"});
    while (auto c = p.next())
      throw std::runtime_error("consumer failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(world->running_processes(), 0u);
}

TEST_F(FakeSync, ExplicitKillOfAStreamIsCancellation) {
  auto sb = create();
  auto p = sb.stream({"sh", "-c", "echo x; sleep 60"});
  ASSERT_TRUE(p.next());
  p.kill();
  EXPECT_EQ(p.wait().termination, Termination::Cancelled);
  EXPECT_EQ(world->running_processes(), 0u);
}

TEST_F(FakeSync, NetworkDeniedByDefault) {
  auto sb = create();
  const auto curl = sb.run({"curl", "https://pypi.org/simple/"});
  EXPECT_EQ(curl.exit_code, 6);
  const auto py = sb.run_code("import urllib.request\nurllib.request.urlopen('https://pypi.org')");
  EXPECT_FALSE(py.ok());
  EXPECT_NE(py.stderr_bytes.find("URLError"), std::string::npos);
  const auto calls = world->calls();
  EXPECT_EQ(calls[1].network_attempts, std::vector<std::string>{"pypi.org"});
}

TEST_F(FakeSync, AllowListNeedsTheCapabilityAndThenWorks) {
  sandboxio::CreateOptions o;
  o.network = sandboxio::NetworkPolicy::allowing({"pypi.org"});
  try {
    (void)create(o);
    FAIL() << "created without network_allow_list";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::PolicyUnenforceable);
  }
  auto sb = create(o, "?caps=network_policy,network_allow_list");
  EXPECT_TRUE(sb.run({"curl", "https://pypi.org"}).ok());
  EXPECT_FALSE(sb.run({"curl", "https://evil.example"}).ok());
}

TEST_F(FakeSync, NoNetworkPolicyMeansNoSandbox) {
  try {
    (void)create({}, "?caps=filesystem");
    FAIL() << "created although it cannot deny egress";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::PolicyUnenforceable);
  }
}

TEST_F(FakeSync, UndeclaredCapabilitiesAreRefused) {
  auto sb = create({}, "?caps=network_policy");
  EXPECT_FALSE(sb.capabilities().contains(Capability::Filesystem));
  try {
    sb.write_file("/tmp/x", "y");
    FAIL();
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::CapabilityNotSupported);
  }
  try {
    auto p = sb.stream({"true"});
    FAIL();
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::CapabilityNotSupported);
  }
  try {
    (void)sb.create_context();
    FAIL();
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::CapabilityNotSupported);
  }
}

TEST_F(FakeSync, IsolationRequirement) {
  sandboxio::CreateOptions o;
  o.require_isolation = sandboxio::IsolationTier::Container;
  try {
    (void)create(o);
    FAIL();
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::IsolationNotSatisfied);
  }
  auto sb = create(o, "?tier=microvm");
  EXPECT_EQ(sb.tier(), sandboxio::IsolationTier::Microvm);
  EXPECT_TRUE(sb.warnings().empty());
  auto unknown = create();
  ASSERT_EQ(unknown.warnings().size(), 1u);  // creating on the UNKNOWN tier warns
}

TEST_F(FakeSync, FilesRoundTripAndCodedErrors) {
  auto sb = create();
  std::string blob(3'000'000, '\0');
  for (std::size_t i = 0; i < blob.size(); ++i)
    blob[i] = static_cast<char>(i * 31 % 251);
  sb.write_file("/data/deep/nested/blob.bin", blob);
  EXPECT_EQ(sb.read_file("/data/deep/nested/blob.bin"), blob);
  sb.write_file("/data/empty", "");
  EXPECT_EQ(sb.read_file("/data/empty"), "");
  const auto listed = sb.list_files("/data");
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].path, "/data/deep");
  EXPECT_EQ(listed[0].type, sandboxio::FileType::Directory);
  EXPECT_EQ(listed[1].size, 0u);
  sb.remove_file("/data/deep");
  std::error_code ec;
  (void)sb.read_file("/data/deep/nested/blob.bin", ec);
  EXPECT_EQ(ec, errc::FileNotFound);
  sb.write_file("relative/path", "x", ec);
  EXPECT_EQ(ec, errc::InvalidPath);
  (void)sb.read_file("/data", ec);
  EXPECT_EQ(ec, errc::IsADirectory);
  // '..' is refused on every backend, fake:// included.
  (void)sb.read_file("/data/../etc/passwd", ec);
  EXPECT_EQ(ec, errc::InvalidPath);
  // Every operation has its error_code overload.
  (void)sb.list_files("/no/such/dir", ec);
  EXPECT_EQ(ec, errc::FileNotFound);
  sb.remove_file("/no/such/file", ec);
  EXPECT_EQ(ec, errc::FileNotFound);
  EXPECT_EQ(sb.info(ec).id, sb.id());
  EXPECT_FALSE(ec);
  sandboxio::CodeRequest code;
  code.code = "print(1)";
  code.context = "no-such-context";
  (void)sb.run_code(code, ec);
  EXPECT_TRUE(ec);
  (void)sb.create_context("python", ec);
  EXPECT_FALSE(ec);
  sandboxio::Command empty;
  auto refused = sb.stream(empty, ec);
  EXPECT_TRUE(ec);
  EXPECT_FALSE(refused.next());
  sb.kill(ec);
  EXPECT_FALSE(ec);
}

TEST_F(FakeSync, StatefulContextsAndRichResults) {
  auto sb = create();
  const auto ctx = sb.create_context();
  sandboxio::CodeRequest a;
  a.code = "x = 41";
  a.context = ctx.id;
  EXPECT_TRUE(sb.run_code(a).ok());
  sandboxio::CodeRequest b;
  b.code = "print(x + 1)\nx * 2";
  b.context = ctx.id;
  const auto r = sb.run_code(b);
  EXPECT_EQ(r.stdout_bytes, "42\n");
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results[0], (sandboxio::RichOutput{"text/plain", "82"}));
  // Stateless run_code sees nothing of the context.
  EXPECT_FALSE(sb.run_code("print(x)").ok());
  sandboxio::CodeRequest missing;
  missing.code = "1";
  missing.context = "ctx-404";
  try {
    (void)sb.run_code(missing);
    FAIL();
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::CodeContextNotFound);
  }
}

TEST_F(FakeSync, ReattachByIdSeesTheSameSandbox) {
  auto sb = create();
  sb.write_file("/tmp/shared", "state");
  auto again = Sandbox::connect(world->dsn(), sb.id());
  EXPECT_EQ(again.read_file("/tmp/shared"), "state");
  try {
    (void)Sandbox::connect(world->dsn(), "no-such-id");
    FAIL();
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::SandboxNotFound);
  }
}

TEST_F(FakeSync, AWorldForgetsWhatWasKilledSoItStaysSmall) {
  // Found by fuzzing: a world kept every sandbox and call it ever saw, so a long-lived process
  // (an MCP server on fake://) grew without bound. A killed sandbox is forgotten; its id still
  // answers SandboxGone for the newest 4096.
  std::string first, last;
  for (int i = 0; i < 4200; ++i) {
    auto sb = create();
    (void)sb.run({"true"});
    if (i == 0) first = sb.id();
    last = sb.id();
  }  // each handle's end kills its sandbox
  EXPECT_TRUE(world->live_sandboxes().empty());
  auto code_of = [&](const std::string& id) -> std::error_code {
    try {
      (void)Sandbox::connect(world->dsn(), id);
      return {};
    } catch (const sandboxio::Error& e) {
      return e.code();
    }
  };
  EXPECT_EQ(code_of(last), errc::SandboxGone);
  EXPECT_EQ(code_of(first), errc::SandboxNotFound);
}

TEST_F(FakeSync, KillThenUseIsSandboxGone) {
  auto sb = create();
  sb.kill();
  try {
    (void)sb.run({"true"});
    FAIL();
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::SandboxGone);
  }
  EXPECT_TRUE(world->live_sandboxes().empty());
}

TEST_F(FakeSync, DestroyingTheHandleKillsTheSandboxUnlessDetached) {
  { auto sb = create(); }
  EXPECT_TRUE(world->live_sandboxes().empty());
  std::string kept;
  {
    auto sb = create();
    kept = sb.id();
    sb.detach();
  }
  EXPECT_EQ(world->live_sandboxes(), std::vector<std::string>{kept});
}

TEST_F(FakeSync, LifetimeExpiryEndsRunningWorkAndLaterUse) {
  sandboxio::CreateOptions o;
  o.lifetime = 1s;
  auto sb = create(o);
  const auto r = sb.run({"sleep", "5"});
  EXPECT_EQ(r.termination, Termination::SandboxGone);
  try {
    (void)sb.run({"true"});
    FAIL();
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::SandboxGone);
  }
}

TEST_F(FakeSync, CreateTimeout) {
  sandboxio::CreateOptions o;
  o.create_timeout = 50ms;
  try {
    (void)create(o, "?create_delay=10s");
    FAIL();
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::CreateTimeout);
  }
  EXPECT_TRUE(world->live_sandboxes().empty());
}

TEST_F(FakeSync, ScriptedResponsesWinAndCallsAreRecorded) {
  world->on({"python3", "agent.py"}, {.stdout_bytes = "done\n", .exit_code = 0});
  world->on_code("secret_sauce()", {.stdout_bytes = "sauce\n"});
  sandboxio::CreateOptions o;
  o.env.set("MODE", "test");
  auto sb = create(o);
  EXPECT_EQ(sb.run({"python3", "agent.py"}).stdout_bytes, "done\n");
  EXPECT_EQ(sb.run_code("secret_sauce()").stdout_bytes, "sauce\n");
  const auto calls = world->calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].operation, sandboxio::Operation::Create);
  EXPECT_EQ(calls[1].argv, (std::vector<std::string>{"python3", "agent.py"}));
  EXPECT_EQ(calls[1].env.at("MODE"), "test");
  EXPECT_TRUE(calls[1].network.denies_all());
  EXPECT_EQ(calls[2].code, "secret_sauce()");
}

/// Refuses the records of runs: a sink whose store is down.
class RefusingRuns final : public sandboxio::AuditSink {
 public:
  sandboxio::Result<void> write(const sandboxio::OperationRecord& r) override {
    if (r.operation != sandboxio::Operation::Run) return {};
    return sandboxio::Problem{sandboxio::errc::AuditSinkFailed, "the store is down", {}};
  }
};

// AuditFailurePolicy::Fail (Async checks the same over Asio): the run whose record the sink
// refused fails with SBX_E1602; the default policy only warns.
TEST_F(FakeSync, UnderTheFailPolicyARunWhoseRecordTheSinkRefusedFails) {
  sandboxio::CreateOptions o;
  o.audit.sink = std::make_shared<RefusingRuns>();
  o.audit.on_failure = sandboxio::AuditFailurePolicy::Fail;
  auto sb = create(o);
  std::error_code ec;
  sandboxio::Command c;
  c.argv = {"true"};
  (void)sb.run(c, ec);
  EXPECT_EQ(ec, sandboxio::make_error_code(sandboxio::errc::AuditSinkFailed)) << ec.message();
  (void)sb.list_files("/", ec);
  EXPECT_FALSE(ec) << "one refused record fails one operation";
  o.audit.on_failure = sandboxio::AuditFailurePolicy::Warn;
  auto warned = create(o);
  EXPECT_EQ(warned.run({"true"}).exit_code, 0);
  ASSERT_FALSE(warned.warnings().empty());
  EXPECT_EQ(warned.warnings().back().code, sandboxio::errc::AuditSinkFailed);
}

TEST_F(FakeSync, OneRedactedRecordPerOperation) {
  auto sink = std::make_shared<sandboxio::QueueSink>();
  sandboxio::CreateOptions o;
  o.audit.sink = sink;
  o.audit.capture_commands = true;
  o.env.set_secret("API_SECRET_VALUE", "hunter2hunter2");
  {
    auto sb = create(o);
    (void)sb.run({"echo", "hunter2hunter2"});
    (void)sb.run({"curl", "-H", "Authorization: Bearer abc.def", "https://x.example"});
    std::error_code ec;
    (void)sb.read_file("/missing", ec);
  }  // destroying the handle kills: one more record
  const auto records = sink->drain();
  ASSERT_EQ(records.size(), 5u);
  const sandboxio::Operation ops[] = {sandboxio::Operation::Create, sandboxio::Operation::Run,
                                      sandboxio::Operation::Run, sandboxio::Operation::ReadFile,
                                      sandboxio::Operation::Kill};
  for (std::size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].operation, ops[i]);
    EXPECT_EQ(records[i].sequence, i + 1);
    EXPECT_TRUE(records[i].closed);
    EXPECT_GT(records[i].started.time_since_epoch().count(), 0);
    const std::string line = sandboxio::to_json_line(records[i]);
    EXPECT_EQ(line.find("hunter2hunter2"), std::string::npos) << line;
    EXPECT_EQ(line.find("abc.def"), std::string::npos) << line;
  }
  EXPECT_EQ(records[1].command, "echo ***");
  EXPECT_EQ(records[1].exit_code, 0);
  EXPECT_EQ(records[3].outcome, sandboxio::Outcome::Failed);
  EXPECT_EQ(records[3].error_code, static_cast<int>(errc::FileNotFound));
}

}  // namespace

namespace {

TEST_F(FakeSync, OperationsInFlightAreBounded) {
  auto sb = create();
  std::vector<sandboxio::sync::Process> held;
  for (std::size_t i = 0; i < sandboxio::Limits{}.max_pending_operations; ++i) {
    held.push_back(sb.stream({"sleep", "100"}));
  }
  try {
    auto one_more = sb.stream({"sleep", "100"});
    FAIL() << "no bound on operations in flight";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::QueueFull);
  }
  held.clear();  // dropping them kills them all
  EXPECT_EQ(world->running_processes(), 0u);
  EXPECT_TRUE(sb.run({"true"}).ok());
}

}  // namespace

// A command that finishes at once still hands its output to next(): nothing is dropped
// because the process ended before the first read.
TEST(FakeSyncStream, AStreamThatEndsAtOnceKeepsItsOutput) {
  auto sb = sandboxio::sync::Sandbox::create("fake://");
  auto p = sb.stream({"sh", "-c", "echo out; echo err >&2; exit 7"});
  std::string out, err;
  while (auto c = p.next())
    (c->stream == sandboxio::StreamKind::Stdout ? out : err) += c->data;
  EXPECT_EQ(out, "out\n");
  EXPECT_EQ(err, "err\n");
  EXPECT_EQ(p.wait().exit_code, 7);
}
