// e2b:// behaviour beyond the contract suite, against the local E2B-compatible server: errors
// mapped the way users need them (a wrong or missing key names E2B_API_KEY, an unknown template,
// 429 retried as Retry-After says), reaping by metadata, rich outputs, a timed-out cell
// restarting its context, a sandbox killed from outside, and plain HTTP next to TLS.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <set>

#include <thread>

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include "../docker/lease_holder.hpp"
#include "../support/flight_session.hpp"
#include "e2b_support.hpp"

#include "sandboxio/async.hpp"
#include "sandboxio/codec/base64.hpp"
#include "sandboxio/e2b.hpp"
#include "sandboxio/sinks.hpp"
#include "sandboxio/sync.hpp"

namespace {

using namespace std::chrono_literals;
using sandboxio::errc;
using sandboxio::testing::e2b_server;

template <class F>
sandboxio::Error error_of(F&& f) {
  try {
    f();
  } catch (const sandboxio::Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return sandboxio::Error(errc::ConfigurationError, "none");
}

class E2b : public ::testing::Test {
 protected:
  void SetUp() override { SBX_REQUIRE_E2B_SERVER(); }
  void TearDown() override {
    ::setenv("E2B_API_KEY", sandboxio::testing::kE2bApiKey, 1);
    EXPECT_TRUE(sandboxio::testing::no_e2b_sandbox_left_within()) << "a sandbox was left behind";
  }
};

TEST_F(E2b, AWrongKeyIsAnAuthenticationErrorNamingTheVariable) {
  ::setenv("E2B_API_KEY", "e2b_wrong", 1);
  const auto e = error_of([] { (void)sandboxio::sync::Sandbox::create(e2b_server().dsn()); });
  EXPECT_EQ(e.code(), errc::AuthenticationError);
  EXPECT_NE(std::string(e.what()).find("E2B_API_KEY"), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).find("e2b_wrong"), std::string::npos) << "the key leaked";
}

TEST_F(E2b, AMissingKeyFailsBeforeAnyCall) {
  ::unsetenv("E2B_API_KEY");
  const auto e = error_of([] { (void)sandboxio::sync::Sandbox::create(e2b_server().dsn()); });
  EXPECT_EQ(e.code(), errc::CredentialsMissing);
  EXPECT_NE(std::string(e.what()).find("E2B_API_KEY"), std::string::npos) << e.what();
}

TEST_F(E2b, LearningModePinnedNamesAndPortsAreRefusedNotIgnored) {
  // E2B cannot record what a sandbox tried, nor connect a name where the caller says: both
  // would be silently weaker than asked, so both refuse to create.
  sandboxio::CreateOptions learn;
  learn.network = sandboxio::NetworkPolicy::learning();
  auto e = error_of([&] { (void)sandboxio::sync::Sandbox::create(e2b_server().dsn(), learn); });
  EXPECT_EQ(e.code(), errc::PolicyUnenforceable) << e.what();
  sandboxio::CreateOptions pinned;
  pinned.network = sandboxio::NetworkPolicy::allowing({"canary.test"});
  pinned.network.pinned = {{"canary.test", "127.0.0.1"}};
  e = error_of([&] { (void)sandboxio::sync::Sandbox::create(e2b_server().dsn(), pinned); });
  EXPECT_EQ(e.code(), errc::PolicyUnenforceable) << e.what();
  // E2B matches a name on ports 80 and 443, whatever the list says: a port cannot be honoured.
  sandboxio::CreateOptions port;
  port.network = sandboxio::NetworkPolicy::allowing({"canary.test:8080"});
  e = error_of([&] { (void)sandboxio::sync::Sandbox::create(e2b_server().dsn(), port); });
  EXPECT_EQ(e.code(), errc::PolicyUnenforceable) << e.what();
  sandboxio::CreateOptions subdomains;
  subdomains.network = sandboxio::NetworkPolicy::allowing({"*.sandboxio.test"});
  auto sb = sandboxio::sync::Sandbox::create(e2b_server().dsn(), subdomains);
  EXPECT_EQ(sb.info().network, subdomains.network);
}

TEST_F(E2b, AnUnknownTemplateSaysSo) {
  const auto e = error_of(
      [] { (void)sandboxio::sync::Sandbox::create(e2b_server().dsn("no-such-template")); });
  EXPECT_EQ(e.code(), errc::ImageNotFound);
  EXPECT_NE(std::string(e.what()).find("no-such-template"), std::string::npos) << e.what();
}

TEST_F(E2b, AControlPlaneWithoutV2CreatesThroughV1) {
  auto sb = sandboxio::sync::Sandbox::create(e2b_server().dsn("sbx-v1-only"));
  EXPECT_EQ(sb.run({"sh", "-c", "echo v1"}).stdout_bytes, "v1\n");
}

TEST_F(E2b, TooManyRequestsIsRetriedAsRetryAfterSays) {
  auto sb = sandboxio::sync::Sandbox::create(e2b_server().dsn("sbx-rate-limited"));
  EXPECT_TRUE(sb.run({"true"}).ok());
  const auto e = error_of(
      [] { (void)sandboxio::sync::Sandbox::create(e2b_server().dsn("sbx-rate-limited-always")); });
  EXPECT_EQ(e.code(), errc::RateLimited);
}

TEST_F(E2b, ReapingFindsSandboxesByMetadataAndRemovesThem) {
  const std::string dsn = e2b_server().dsn();
  sandboxio::CreateOptions o;
  o.outlive_owner = true;
  o.labels["purpose"] = "reap-test";
  std::string id;
  {
    auto sb = sandboxio::sync::Sandbox::create(dsn, o);
    id = sb.id();
    sb.detach();
  }
  const auto listed = sandboxio::sync::list_managed(dsn, {{"purpose", "reap-test"}});
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id, id);
  EXPECT_EQ(listed[0].backend, "e2b");
  EXPECT_EQ(listed[0].labels.at("purpose"), "reap-test");
  EXPECT_EQ(listed[0].lifetime, o.lifetime);
  EXPECT_EQ(listed[0].state, sandboxio::SandboxState::Running);
  sandboxio::sync::remove_managed(dsn, id);
  EXPECT_TRUE(sandboxio::sync::list_managed(dsn, {{"purpose", "reap-test"}}).empty());
  EXPECT_EQ(error_of([&] { sandboxio::sync::remove_managed(dsn, id); }).code(),
            errc::SandboxNotFound);
}

// A traced sandbox (the caller's traceparent): every record is a span of the caller's trace,
// and a command and a code cell each see TRACEPARENT naming their own span.
TEST_F(E2b, CommandsAndCellsSeeTheirOwnSpanInTheCallersTrace) {
  auto queue = std::make_shared<sandboxio::QueueSink>();
  sandboxio::CreateOptions o;
  o.audit.sink = queue;
  o.trace = sandboxio::TraceContext::from_traceparent(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
                .value();
  std::string command_saw, cell_saw;
  {
    auto sb = sandboxio::sync::Sandbox::create(e2b_server().dsn(), o);
    command_saw = sb.run({"sh", "-c", "echo $TRACEPARENT"}).stdout_bytes;
    cell_saw = sb.run_code("import os\nprint(os.environ['TRACEPARENT'])").stdout_bytes;
  }
  std::map<sandboxio::Operation, std::string> span_of;
  for (const auto& r : queue->drain()) {
    EXPECT_EQ(r.trace.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736") << to_string(r.operation);
    EXPECT_EQ(r.trace.parent_span_id(), "00f067aa0ba902b7") << to_string(r.operation);
    span_of[r.operation] = std::string(r.trace.span_id());
  }
  ASSERT_TRUE(span_of.count(sandboxio::Operation::Run) &&
              span_of.count(sandboxio::Operation::RunCode));
  EXPECT_EQ(command_saw,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-" + span_of[sandboxio::Operation::Run] + "-01\n");
  EXPECT_EQ(cell_saw, "00-4bf92f3577b34da6a3ce929d0e0e4736-" +
                          span_of[sandboxio::Operation::RunCode] + "-01\n");
}

TEST_F(E2b, RichOutputsComeAsMimeBundles) {
  auto sb = sandboxio::sync::Sandbox::create(e2b_server().dsn());
  const auto r = sb.run_code(
      "class Chart:\n"
      "    def _repr_png_(self): return b'\\x89PNG\\r\\n'\n"
      "    def _repr_html_(self): return '<img>'\n"
      "Chart()");
  ASSERT_TRUE(r.ok()) << r.stderr_bytes;
  ASSERT_EQ(r.results.size(), 3u);
  EXPECT_EQ(r.results[0].mime_type, "text/plain");
  EXPECT_EQ(r.results[1].mime_type, "text/html");
  EXPECT_EQ(r.results[1].data, "<img>");
  EXPECT_EQ(r.results[2].mime_type, "image/png");
  EXPECT_EQ(sandboxio::base64_decode(r.results[2].data), std::string("\x89PNG\r\n"));
}

TEST_F(E2b, ATimedOutCellRestartsItsContext) {
  auto sb = sandboxio::sync::Sandbox::create(e2b_server().dsn());
  const auto ctx = sb.create_context();
  sandboxio::CodeRequest a;
  a.code = "kept = 1";
  a.context = ctx.id;
  ASSERT_TRUE(sb.run_code(a).ok());
  sandboxio::CodeRequest slow;
  slow.code = "import time\ntime.sleep(30)";
  slow.context = ctx.id;
  slow.timeout = 500ms;
  EXPECT_EQ(sb.run_code(slow).termination, sandboxio::Termination::Timeout);
  sandboxio::CodeRequest after;
  after.code = "print(1 + 1)";
  after.context = ctx.id;
  const auto r = sb.run_code(after);
  EXPECT_EQ(r.stdout_bytes, "2\n") << "the context does not answer after its restart";
  sandboxio::CodeRequest unknown;
  unknown.code = "1";
  unknown.context = "no-such-context";
  EXPECT_EQ(error_of([&] { (void)sb.run_code(unknown); }).code(), errc::CodeContextNotFound);
}

TEST_F(E2b, ASandboxKilledFromOutsideIsGone) {
  auto sb = sandboxio::sync::Sandbox::create(e2b_server().dsn());
  auto p = sb.stream({"sh", "-c", "echo started; sleep 600"});
  ASSERT_TRUE(p.next().has_value());
  sandboxio::testing::capture(
      "curl -fsS -X DELETE -H 'X-API-KEY: " + std::string(sandboxio::testing::kE2bApiKey) +
      "' http://127.0.0.1:" + std::to_string(e2b_server().api) + "/sandboxes/" + sb.id());
  while (p.next()) {
  }
  EXPECT_EQ(p.wait().termination, sandboxio::Termination::SandboxGone);
  EXPECT_EQ(error_of([&] { (void)sb.run({"true"}); }).code(), errc::SandboxGone);
}

TEST_F(E2b, PlainHttpWorksToo) {
  auto sb = sandboxio::sync::Sandbox::create(e2b_server().dsn("base", /*tls=*/false));
  const auto r = sb.run({"sh", "-c", "echo plain"});
  EXPECT_EQ(r.stdout_bytes, "plain\n");
}

TEST_F(E2b, AnUntrustedCertificateIsATlsError) {
  const auto s = e2b_server();
  const std::string dsn = "e2b://base?api_url=https://127.0.0.1:" + std::to_string(s.api_tls) +
                          "&sandbox_url=https://127.0.0.1:" + std::to_string(s.sandbox_tls) +
                          "&ca=/etc/ssl/certs/ca-certificates.crt";
  EXPECT_EQ(error_of([&] { (void)sandboxio::sync::Sandbox::create(dsn); }).code(), errc::TlsError);
}

}  // namespace

namespace {

// The command line on e2b://: doctor's verdict, run's exit code, reap's dry run and --kill.
std::string cli(const std::string& env, const std::string& args, int* status = nullptr) {
  return sandboxio::testing::capture(env + SBX_CLI + " " + args + " 2>&1", status);
}

TEST_F(E2b, TheCommandLineSpeaksE2b) {
  const auto s = e2b_server();
  const std::string env = "E2B_API_KEY=" + std::string(sandboxio::testing::kE2bApiKey) +
                          " E2B_API_URL=http://127.0.0.1:" + std::to_string(s.api) +
                          " E2B_SANDBOX_URL=http://127.0.0.1:" + std::to_string(s.sandbox) + " ";
  int status = 0;
  const std::string doctor_e2b = cli(env, "doctor --json");
  EXPECT_NE(doctor_e2b.find(R"("backend":"e2b","installed":true,"ok":true)"), std::string::npos)
      << doctor_e2b;
  EXPECT_EQ(doctor_e2b.find(sandboxio::testing::kE2bApiKey), std::string::npos) << "key printed";

  const std::string dsn = "'" + s.dsn("base", false) + "'";
  cli(env, "run -b " + dsn + " -- sh -c 'echo hi; exit 3'", &status);
  EXPECT_EQ(WEXITSTATUS(status), 3);

  sandboxio::CreateOptions o;
  o.outlive_owner = true;
  o.labels["purpose"] = "cli-reap";
  auto sb = sandboxio::sync::Sandbox::create(s.dsn(), o);
  sb.detach();
  const std::string dry = cli(env, "reap --label purpose=cli-reap");
  EXPECT_NE(dry.find("e2b " + sb.id()), std::string::npos) << dry;
  EXPECT_NE(dry.find("dry run"), std::string::npos) << dry;
  const std::string killed = cli(env, "reap --kill --label purpose=cli-reap");
  EXPECT_NE(killed.find("removed"), std::string::npos) << killed;
  EXPECT_TRUE(sandboxio::sync::list_managed(s.dsn(), {{"purpose", "cli-reap"}}).empty());
}

}  // namespace

namespace {

// E2B-only operations, typed (sync::e2b) and through native_call: pause and resume, the
// lifetime moved, a PTY; another backend refuses them with its code.
TEST_F(E2b, PauseResumeLifetimeAndPtyAsTypedCalls) {
  using sandboxio::Instant;
  using sandboxio::Machine;
  namespace typed = sandboxio::sync::e2b;
  auto sb = sandboxio::sync::Sandbox::create(e2b_server().dsn());
  ASSERT_TRUE(sb.run({"sh", "-c", "echo kept > /tmp/state"}).ok());
  typed::pause(sb);
  EXPECT_EQ(sb.info().state, sandboxio::SandboxState::Paused);
  EXPECT_EQ(error_of([&] { (void)sb.run({"true"}); }).code(), errc::SandboxGone);
  EXPECT_EQ(typed::resume(sb, std::chrono::seconds(120)).lifetime, std::chrono::seconds(120));
  EXPECT_EQ(sb.run({"cat", "/tmp/state"}).stdout_bytes, "kept\n");

  typed::set_lifetime(sb, std::chrono::seconds(1));
  sandboxio::Command sleeper;
  sleeper.argv = {"sleep", "30"};
  EXPECT_EQ(sb.run(sleeper).termination, sandboxio::Termination::SandboxGone)
      << "the shortened lifetime did not end the sandbox";

  auto tty = sandboxio::sync::Sandbox::create(e2b_server().dsn());
  sandboxio::Command c;
  c.argv = {"sh", "-c", "test -t 1 && echo on-a-terminal; stty size"};
  const auto pty = typed::run_pty(tty, std::move(c), 100, 30);
  EXPECT_EQ(pty.exit_code, 0);
  EXPECT_NE(pty.stdout_bytes.find("on-a-terminal"), std::string::npos) << pty.stdout_bytes;
  EXPECT_NE(pty.stdout_bytes.find("30 100"), std::string::npos) << pty.stdout_bytes;
  // The untyped way still reaches the same machine.
  std::error_code ec;
  (void)tty.native_call(
      [](Machine& m, Instant now) { return sandboxio::e2b::extensions(m).submit_pause(now); }, ec);
  EXPECT_FALSE(ec) << ec.message();

  auto fake = sandboxio::sync::Sandbox::create("fake://");
  EXPECT_EQ(error_of([&] { typed::pause(fake); }).code(), errc::CapabilityNotSupported);
}

}  // namespace

namespace {

// Keep-alive: the local server counts the client connections that carried requests for a
// sandbox (an extension of that server; E2B has none).
// A count the local server keeps of a sandbox's connections: "connections" (TCP connections
// that carried its requests) or "resumed" (those whose TLS handshake resumed); -1 if absent.
int connections_for(const std::string& sandbox, const std::string& field = "connections") {
  const std::string out = sandboxio::testing::capture(
      "curl -fsS 'http://127.0.0.1:" + std::to_string(e2b_server().api) +
      "/_test/connections?sandbox=" + sandbox + "'");
  const auto at = out.find("\"" + field + "\":");
  return at == std::string::npos ? -1 : std::atoi(out.c_str() + at + field.size() + 3);
}

TEST_F(E2b, AHundredRunsOnOneSandboxShareOneKeptAliveConnection) {
  for (const bool tls : {true, false}) {
    auto sb = sandboxio::sync::Sandbox::create(e2b_server().dsn("base", tls));
    for (int i = 0; i < 100; ++i)
      ASSERT_EQ(sb.run({"true"}).exit_code, 0) << "run " << i;
    // One connection to envd served create's readiness check and every run: no handshake
    // per exchange (the SDK's undici agent does the same).
    EXPECT_EQ(connections_for(sb.id()), 1) << (tls ? "TLS" : "plain HTTP");
    sb.kill();
  }
}

// The client ports of the connections that carried requests for a sandbox.
std::set<std::string> addresses_for(const std::string& sandbox) {
  const std::string out = sandboxio::testing::capture(
      "curl -fsS 'http://127.0.0.1:" + std::to_string(e2b_server().api) +
      "/_test/connections?sandbox=" + sandbox + "'");
  std::set<std::string> found;
  for (std::size_t at = out.find("\"127.0.0.1:"); at != std::string::npos;
       at = out.find("\"127.0.0.1:", at + 1))
    found.insert(out.substr(at + 1, out.find('"', at + 1) - at - 1));
  return found;
}

// Across sandboxes (the sync API): a sandbox that ended leaves its idle connections to the
// process, and the next sandbox's requests to the same endpoints go out on them, with no
// TCP or TLS handshake, as the SDK's process-wide undici pool does.
TEST_F(E2b, ASandboxMadeAfterAnotherEndedReusesItsConnections) {
  std::set<std::string> first;
  {
    auto a = sandboxio::sync::Sandbox::create(e2b_server().dsn());
    ASSERT_EQ(a.run({"true"}).exit_code, 0);
    first = addresses_for(a.id());
    ASSERT_FALSE(first.empty());
  }  // killed: its idle connections go to the process's pool
  auto b = sandboxio::sync::Sandbox::create(e2b_server().dsn());
  ASSERT_EQ(b.run({"echo", "reused"}).stdout_bytes, "reused\n");
  const std::set<std::string> second = addresses_for(b.id());
  std::vector<std::string> shared;
  std::set_intersection(first.begin(), first.end(), second.begin(), second.end(),
                        std::back_inserter(shared));
  EXPECT_FALSE(shared.empty()) << "the second sandbox opened new connections only";
  b.kill();
}

// A server this process has spoken TLS to before is met with a session ticket: the next
// connection resumes (no certificate exchange, no signature) instead of a full handshake.
// The trust store is loaded once per process, not per connection.
TEST_F(E2b, ANewConnectionToAServerSeenBeforeResumesItsTlsSession) {
  auto a = sandboxio::sync::Sandbox::create(e2b_server().dsn("base", /*tls=*/true));
  ASSERT_EQ(a.run({"true"}).exit_code, 0);
  // a is alive and keeps its connections: b's are new ones, to the same servers.
  auto b = sandboxio::sync::Sandbox::create(e2b_server().dsn("base", /*tls=*/true));
  ASSERT_EQ(b.run({"echo", "resumed"}).stdout_bytes, "resumed\n");
  const int connections = connections_for(b.id());
  ASSERT_GE(connections, 1);
  EXPECT_EQ(connections_for(b.id(), "resumed"), connections);
  a.kill();
  b.kill();
}

// The Asio transport pools too, in the same process-wide pool: a sandbox made after another
// ended goes out on the connections it left.
TEST_F(E2b, AnAsyncSandboxMadeAfterAnotherEndedReusesItsConnections) {
  using sandboxio::async::Sandbox;
  asio::io_context io;
  std::string first_id, second_id, out;
  std::set<std::string> first, then;
  auto second = [&] {
    Sandbox::async_create(
        io.get_executor(), e2b_server().dsn(), {}, [&](std::error_code ec, Sandbox created) {
          ASSERT_FALSE(ec) << ec.message();
          auto b = std::make_shared<Sandbox>(std::move(created));
          second_id = b->id();
          sandboxio::Command c;
          c.argv = {"echo", "reused"};
          b->async_run(std::move(c), [&, b](std::error_code e, sandboxio::ExecResult r) {
            EXPECT_FALSE(e) << e.message();
            out = r.stdout_bytes;
            then = addresses_for(second_id);
            b->async_kill([b](std::error_code) {});
          });
        });
  };
  Sandbox::async_create(
      io.get_executor(), e2b_server().dsn(), {}, [&](std::error_code ec, Sandbox created) {
        ASSERT_FALSE(ec) << ec.message();
        auto a = std::make_shared<Sandbox>(std::move(created));
        first_id = a->id();
        sandboxio::Command c;
        c.argv = {"true"};
        a->async_run(std::move(c), [&, a](std::error_code e, sandboxio::ExecResult) {
          EXPECT_FALSE(e) << e.message();
          first = addresses_for(first_id);
          // Killed: its idle connections go to the process's pool; then the next sandbox.
          a->async_kill([&, a](std::error_code) { asio::post(io, second); });
        });
      });
  io.run();
  EXPECT_EQ(out, "reused\n");
  ASSERT_FALSE(first.empty());
  std::vector<std::string> shared;
  std::set_intersection(first.begin(), first.end(), then.begin(), then.end(),
                        std::back_inserter(shared));
  EXPECT_FALSE(shared.empty()) << "the second sandbox opened new connections only";
}

TEST_F(E2b, AConnectionTheServerClosedWhileIdleIsNotReused) {
  // Node's server closes an idle connection after 5 s ("Keep-Alive: timeout=5"): we stop
  // using it a second before, so a run after 4.5 s idle opens a new one and succeeds.
  auto sb = sandboxio::sync::Sandbox::create(e2b_server().dsn());
  ASSERT_EQ(sb.run({"true"}).exit_code, 0);
  const int before = connections_for(sb.id());
  std::this_thread::sleep_for(4500ms);  // the idle time under test, not synchronisation
  EXPECT_EQ(sb.run({"echo", "again"}).stdout_bytes, "again\n");
  EXPECT_EQ(connections_for(sb.id()), before + 1);
  sb.kill();
}

}  // namespace

namespace {

// ---- the owner lease ----

// The local server's answer for GET /sandboxes/ID: 200 while it exists, 404 once it is gone.
int sandbox_status(const std::string& id) {
  return std::atoi(sandboxio::testing::capture(
                       "curl -s -o /dev/null -w '%{http_code}' -H 'X-API-KEY: " +
                       std::string(sandboxio::testing::kE2bApiKey) + "' http://127.0.0.1:" +
                       std::to_string(e2b_server().api) + "/sandboxes/" + id)
                       .c_str());
}

void remove_sandbox(const std::string& id) {
  (void)sandboxio::testing::capture(
      "curl -s -X DELETE -H 'X-API-KEY: " + std::string(sandboxio::testing::kE2bApiKey) +
      "' http://127.0.0.1:" + std::to_string(e2b_server().api) + "/sandboxes/" + id);
}

// Starts the lease holder on `dsn`, SIGKILLs it once its sandbox exists, and returns the
// sandbox id and when its owner died.
std::pair<std::string, std::chrono::steady_clock::time_point> sigkill_owner(const std::string& dsn,
                                                                            bool outlive) {
  const auto holder = sandboxio::testing::start_lease_holder(dsn, outlive);
  EXPECT_EQ(sandbox_status(holder.sandbox_id), 200);
  EXPECT_EQ(::kill(holder.pid, SIGKILL), 0);
  int status = 0;
  ::waitpid(holder.pid, &status, 0);
  return {holder.sandbox_id, std::chrono::steady_clock::now()};
}

TEST_F(E2b, ASandboxWhoseOwnerWasSigkilledEndsWithinTheLease) {
  const auto [id, killed] = sigkill_owner(e2b_server().dsn() + "&lease=3s", false);
  while (sandbox_status(id) == 200 && std::chrono::steady_clock::now() - killed < 20s) {
  }
  const auto took = std::chrono::steady_clock::now() - killed;
  EXPECT_EQ(sandbox_status(id), 404) << "the sandbox outlived its SIGKILLed owner by 20 s";
  // The last renewal asked for 3 s at most: it is gone within the lease (and a second of
  // the server's own timer).
  EXPECT_LT(took, 4s) << "the sandbox lived "
                      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                      << " ms after its owner died, past its 3 s lease";
}

TEST_F(E2b, AnOutliveOwnerSandboxSurvivesItsOwnersDeath) {
  const auto [id, killed] = sigkill_owner(e2b_server().dsn() + "&lease=3s", true);
  // Past the lease it was not given: it is there, with its whole lifetime.
  while (std::chrono::steady_clock::now() - killed < 5s && sandbox_status(id) == 200) {
  }
  EXPECT_EQ(sandbox_status(id), 200) << "an outlive_owner sandbox ended with its owner";
  remove_sandbox(id);
}

TEST_F(E2b, AnIdleOwnerKeepsItsLeaseAndDetachGivesBackTheLifetime) {
  sandboxio::CreateOptions options;
  options.lifetime = 60s;
  auto sb = sandboxio::sync::Sandbox::create(e2b_server().dsn() + "&lease=3s", options);
  // The owner makes no call for longer than the lease: the library's keeper renews it.
  std::this_thread::sleep_for(5s);  // the idle time under test, not synchronisation
  EXPECT_EQ(sb.run({"echo", "alive"}).stdout_bytes, "alive\n");
  // detach(): the lease gives way to what is left of the 60 s lifetime.
  const std::string id = sb.id();
  sb.detach();
  std::this_thread::sleep_for(5s);  // past the lease
  EXPECT_EQ(sandbox_status(id), 200) << "a detached sandbox ended with its lease";
  remove_sandbox(id);
}

}  // namespace

namespace {

TEST_F(E2b, TheAsyncApiRenewsTheLeaseOnItsExecutorAndDetachGivesBackTheLifetime) {
  using sandboxio::async::Sandbox;
  asio::io_context io;
  asio::steady_timer idle(io);
  std::string id, out;
  sandboxio::CreateOptions options;
  options.lifetime = 60s;
  Sandbox::async_create(
      io.get_executor(), e2b_server().dsn() + "&lease=3s", options,
      [&](std::error_code ec, Sandbox created) {
        ASSERT_FALSE(ec) << ec.message();
        auto sb = std::make_shared<Sandbox>(std::move(created));
        // No call for longer than the lease; the io_context runs, and renews it.
        idle.expires_after(5s);
        idle.async_wait([&, sb](std::error_code) {
          sandboxio::Command c;
          c.argv = {"echo", "alive"};
          sb->async_run(std::move(c), [&, sb](std::error_code e, sandboxio::ExecResult r) {
            EXPECT_FALSE(e) << e.message();
            out = r.stdout_bytes;
            id = sb->id();
            sb->detach();  // dropped with this handler: the lease gives way to the lifetime
          });
        });
      });
  io.run();
  EXPECT_EQ(out, "alive\n");
  ASSERT_FALSE(id.empty());
  std::this_thread::sleep_for(5s);  // past the lease
  EXPECT_EQ(sandbox_status(id), 200) << "a detached sandbox ended with its lease";
  remove_sandbox(id);
}

}  // namespace

namespace {

// The flight recorder against the local server over TLS: the session's trace replays offline
// (no server is asked: the replay makes no connection) to the same results and records, the
// trace is under twice the bytes the session moved, and the command line's `replay` prints the
// records byte for byte and writes the HTML page.
TEST_F(E2b, ARecordedSessionReplaysOfflineIdentically) {
  namespace t = sandboxio::testing;
  const auto s = t::expect_identical_replay(e2b_server().dsn(), true, std::size_t{1} << 20);
  const std::uint64_t moved = s.recorded.bytes_in + s.recorded.bytes_out;
  EXPECT_GT(moved, std::uint64_t{2} << 20);
  EXPECT_LT(s.recorded.trace_bytes, 2 * moved) << "the trace keeps what came in, once";
  EXPECT_GT(s.requests, 10u);
}

// A session that starts on connections an earlier sandbox of the process left in the pool is
// recorded as reused, and the command line replays it (through the admission guard and the
// recorder, a pooled connection used to reach the machine as a new one, and the trace held a
// connection answered twice).
TEST_F(E2b, ASessionOnPooledConnectionsReplaysThroughTheCommandLine) {
  namespace t = sandboxio::testing;
  {
    auto earlier = sandboxio::sync::Sandbox::create(e2b_server().dsn());
    ASSERT_EQ(earlier.run({"true"}).exit_code, 0);
  }  // killed: its idle connections go to the process's pool
  t::TempDir dir;
  (void)t::recorded_session(e2b_server().dsn(), dir.path / "traces", dir.path / "audit.jsonl",
                            false);
  const std::string trace = t::the_trace(dir.path / "traces").string();
  int status = 0;
  const std::string timeline =
      t::capture(std::string(SBX_CLI) + " replay --inputs " + trace + " 2>&1", &status);
  EXPECT_EQ(status, 0) << timeline;
  EXPECT_NE(timeline.find("reused"), std::string::npos) << timeline;
  EXPECT_NE(timeline.find("identical to the recording"), std::string::npos) << timeline;
}

TEST_F(E2b, TheCommandLineReplaysATracePrintingItsRecordsAndAPage) {
  namespace t = sandboxio::testing;
  t::TempDir dir;
  (void)t::recorded_session(e2b_server().dsn(), dir.path / "traces", dir.path / "audit.jsonl",
                            false);
  const std::string trace = t::the_trace(dir.path / "traces").string();
  int status = 0;
  const std::string records =
      t::capture(std::string(SBX_CLI) + " replay --records " + trace + " 2>/dev/null", &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(records, t::slurp(dir.path / "audit.jsonl"));
  const std::string page = (dir.path / "replay.html").string();
  const std::string timeline =
      t::capture(std::string(SBX_CLI) + " replay --html " + page + " " + trace + " 2>&1", &status);
  EXPECT_EQ(status, 0) << timeline;
  EXPECT_NE(timeline.find("identical to the recording"), std::string::npos) << timeline;
  EXPECT_NE(timeline.find("sleep 5"), std::string::npos) << timeline;
  const std::string html = t::slurp(page);
  EXPECT_NE(html.find("<table>"), std::string::npos);
  EXPECT_NE(html.find("echo one"), std::string::npos);
  for (const char* fetch : {"src=", "href=", "@import", "url("})
    EXPECT_EQ(html.find(fetch), std::string::npos) << "the page loads nothing: " << fetch;
}

}  // namespace
