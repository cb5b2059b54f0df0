// docker:// through the agent (the default) beyond the contract suite: which path info()
// reports, a read-only root, a non-root user's commands against the agent they run under,
// kills that hold, and code contexts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "docker_support.hpp"
#include "sandboxio/contract.hpp"
#include "sandboxio/sinks.hpp"
#include "sandboxio/sync.hpp"

namespace {

using namespace std::chrono_literals;
using sandboxio::testing::kBusyboxImage;
using sandboxio::testing::kPythonImage;

const std::string kDsn = std::string("docker://") + kPythonImage;
const std::string kAgent = "sandboxio-agent 0.1.0";
// How a handle reaches the agent of a sandbox on this (local) engine: straight to its socket
// when this process is root, like the engine; otherwise the owner's attach stream, and for
// connect() a bridge exec.
const std::string kOwnerRoute = ::geteuid() == 0 ? " (direct socket)" : " (attach stream)";
const std::string kConnectRoute = ::geteuid() == 0 ? " (direct socket)" : " (bridge exec)";

std::string sh(sandboxio::sync::Sandbox& sb, const std::string& script) {
  const auto r = sb.run({"sh", "-c", script});
  return r.stdout_bytes + r.stderr_bytes;
}

sandboxio::ExecResult cell(sandboxio::sync::Sandbox& sb, const sandboxio::CodeContext& ctx,
                           const std::string& code,
                           std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  sandboxio::CodeRequest r;
  r.code = code;
  r.context = ctx.id;
  r.timeout = timeout;
  return sb.run_code(r);
}

// Where the handle reaches the agent straight (its direct socket), the sync API hands an
// allowed connection's socket to the agent, which relays it kernel to kernel; over the attach
// stream (a relay in between that no descriptor can cross) the library relays it. Both
// deliver every byte and record it once.
TEST(DockerAgent, AnAllowedDownloadIsHandedToTheAgentWhereItsSocketIsDirect) {
  SBX_REQUIRE_ENGINE();
  constexpr std::size_t kBig = std::size_t{16} << 20;
  sandboxio::contract::HttpCanary canary(kBig);
  const std::string target = "canary.sandboxio.test:" + std::to_string(canary.port());
  for (const std::string route : {"", "?agent=attach"}) {
    auto records = std::make_shared<sandboxio::QueueSink>();
    sandboxio::CreateOptions o;
    o.network = sandboxio::NetworkPolicy::allowing({target});
    o.network.pinned = {{"canary.sandboxio.test", "127.0.0.1"}};
    o.audit.sink = records;
    auto sb = sandboxio::sync::Sandbox::create(kDsn + route, o);
    const bool direct = sb.info().agent == kAgent + " (direct socket)";
    EXPECT_EQ(direct, route.empty() && ::geteuid() == 0) << route;  // as kOwnerRoute says
    const auto r = sb.run(sandboxio::contract::python_fetch("http://" + target + "/big"));
    ASSERT_EQ(r.exit_code, 0) << route << r.stderr_bytes;
    EXPECT_EQ(r.stdout_bytes.size(), canary.body().size() + kBig) << route;
    sb.kill();
    std::vector<sandboxio::OperationRecord> egress;
    for (auto& rec : records->drain())
      if (rec.operation == sandboxio::Operation::Egress) egress.push_back(std::move(rec));
    ASSERT_EQ(egress.size(), 1u) << route;
    EXPECT_EQ(egress[0].outcome, sandboxio::Outcome::Ok) << route << egress[0].error_detail;
    EXPECT_GE(egress[0].egress->bytes_in, kBig) << route;
    EXPECT_EQ(egress[0].egress->handed_over, direct) << route;
  }
}

TEST(DockerAgent, InfoSaysWhichPathServesTheSandbox) {
  SBX_REQUIRE_ENGINE();
  auto by_default = sandboxio::sync::Sandbox::create(kDsn);
  EXPECT_EQ(by_default.info().agent, kAgent + kOwnerRoute) << "the agent is the default";
  auto on = sandboxio::sync::Sandbox::create(kDsn + "?agent=on");
  EXPECT_EQ(on.info().agent, kAgent + kOwnerRoute);
  auto attach = sandboxio::sync::Sandbox::create(kDsn + "?agent=attach");
  EXPECT_EQ(attach.info().agent, kAgent + " (attach stream)");
  EXPECT_EQ(attach.run({"sh", "-c", "exit 200"}).exit_code, 200);
  auto off = sandboxio::sync::Sandbox::create(kDsn + "?agent=off");
  EXPECT_EQ(off.info().agent, "");
  // A handle from connect() speaks to the same agent through a bridge session; ?agent=off
  // keeps it to the daemon's exec. Each says which.
  auto again = sandboxio::sync::Sandbox::connect(kDsn, on.id());
  EXPECT_EQ(again.info().agent, kAgent + kConnectRoute);
  auto bridged = sandboxio::sync::Sandbox::connect(kDsn + "?agent=attach", on.id());
  EXPECT_EQ(bridged.info().agent, kAgent + " (bridge exec)");
  EXPECT_EQ(bridged.run({"true"}).exit_code, 0);
  EXPECT_EQ(again.run({"sh", "-c", "exit 200"}).termination, sandboxio::Termination::Exited);
  auto plain = sandboxio::sync::Sandbox::connect(kDsn + "?agent=off", on.id());
  EXPECT_EQ(plain.info().agent, "");
  EXPECT_EQ(plain.run({"true"}).exit_code, 0);
  auto exec_only = sandboxio::sync::Sandbox::connect(kDsn, off.id());
  EXPECT_EQ(exec_only.info().agent, "") << "a container without the agent has no bridge";
  EXPECT_EQ(exec_only.run({"true"}).exit_code, 0);
}

// A read-only root filesystem keeps the agent: it lives in a small volume of its own at
// /.sandboxio (the archive API writes nowhere else on such a container), which goes with the
// container. Nothing else on the root is writable; a non-root user cannot write there either.
TEST(DockerAgent, AReadOnlyRootKeepsTheAgentAndItsVolumeGoesWithTheContainer) {
  SBX_REQUIRE_ENGINE();
  const auto volumes = [] { return sandboxio::testing::capture("docker volume ls -q | wc -l"); };
  const std::string before = volumes();
  {
    auto sb = sandboxio::sync::Sandbox::create(kDsn + "?read_only=true&tmpfs=/work");
    EXPECT_EQ(sb.info().agent, kAgent + kOwnerRoute);
    sb.write_file("/work/a.txt", "on tmpfs");
    EXPECT_EQ(sb.run({"cat", "/work/a.txt"}).stdout_bytes, "on tmpfs");
    const auto r = sb.run({"sh", "-c", "echo x > /etc/x"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.stderr_bytes.find("Read-only file system"), std::string::npos) << r.stderr_bytes;
    EXPECT_NE(volumes(), before) << "no volume holds the agent";
  }
  auto nobody = sandboxio::sync::Sandbox::create(kDsn + "?read_only=true&user=nobody");
  EXPECT_EQ(nobody.info().agent, kAgent + kOwnerRoute);
  const auto r = nobody.run({"sh", "-c", "echo x > /.sandboxio/x"});
  EXPECT_NE(r.stderr_bytes.find("Permission denied"), std::string::npos) << r.stderr_bytes;
  nobody.kill();
  EXPECT_EQ(volumes(), before) << "the agent's volume outlived its container";
}

// outlive_owner: the agent outlives its owner's stream, and a later connect() reaches it
// through a bridge session (one exec of the agent, relayed to its root-only socket). Two
// handles at once are two sessions of the same agent.
TEST(DockerAgent, ASandboxThatOutlivesItsOwnerIsReattachedThroughItsAgent) {
  SBX_REQUIRE_ENGINE();
  std::string id;
  {
    sandboxio::CreateOptions o;
    o.outlive_owner = true;
    o.lifetime = 120s;
    auto sb = sandboxio::sync::Sandbox::create(kDsn + "?agent=on", o);
    EXPECT_EQ(sb.info().agent, kAgent + kOwnerRoute);
    id = sb.id();
    sb.write_file("/tmp/kept", "state");
  }
  ASSERT_TRUE(sandboxio::testing::container_exists(id)) << "the sandbox ended with its owner";
  auto again = sandboxio::sync::Sandbox::connect(kDsn, id);
  EXPECT_EQ(again.info().agent, kAgent + kConnectRoute);
  EXPECT_EQ(again.read_file("/tmp/kept"), "state");
  const auto r = again.run({"sh", "-c", "echo $PPID; exit 201"});
  EXPECT_EQ(r.exit_code, 201);
  EXPECT_EQ(r.termination, sandboxio::Termination::Exited) << "an exit code, as waitpid said";
  EXPECT_EQ(r.stdout_bytes, "1\n") << "the command is a child of the agent that is PID 1";
  ASSERT_TRUE(again.capabilities().contains(sandboxio::Capability::StatefulCode));
  const auto ctx = again.create_context();
  EXPECT_TRUE(cell(again, ctx, "total = 40").ok());
  EXPECT_EQ(cell(again, ctx, "print(total + 2)").stdout_bytes, "42\n");

  {
    // A second handle at the same time: its own session, the same sandbox.
    auto third = sandboxio::sync::Sandbox::connect(kDsn, id);
    auto held = third.stream({"sh", "-c", "echo up; exec sleep 4301"});
    auto first = held.next();
    ASSERT_TRUE(first);
    EXPECT_EQ(first->data, "up\n");
    EXPECT_EQ(sh(again, "pgrep -f '[s]leep 4301' >/dev/null && echo running"), "running\n");
  }  // the stream and its handle go: the command ends, the sandbox stays
  sandboxio::Command c;
  c.argv = {"sh", "-c", "while pgrep -f '[s]leep 4301' >/dev/null; do :; done; echo ended"};
  c.timeout = 10s;
  EXPECT_EQ(again.run(c).stdout_bytes, "ended\n") << "a session's command outlived it";
  EXPECT_EQ(cell(again, ctx, "print(total)").stdout_bytes, "40\n") << "the context lives on";
  again.kill();
}

// The direct socket is trusted only when the process listening on it is the container's
// init. Root in the sandbox can put another listener at the agent's path; connect() must then
// not talk to it from the host: it falls back (a bridge exec, which the impostor ends, and
// then the daemon's exec) and the impostor never sees a peer from outside the container.
TEST(DockerAgent, AnImpostorAtTheAgentsSocketIsNotTrusted) {
  SBX_REQUIRE_ENGINE();
  auto sb = sandboxio::sync::Sandbox::create(kDsn + "?agent=on");
  const std::string impostor =
      "import os, socket, struct\n"
      "p = '/.sandboxio/run/agent.sock'\n"
      "os.unlink(p)\n"
      "s = socket.socket(socket.AF_UNIX)\n"
      "s.bind(p)\n"
      "s.listen(8)\n"
      "open('/tmp/impostor.ready', 'w').close()\n"
      "while True:\n"
      "    c, _ = s.accept()\n"
      "    pid = struct.unpack('3i', c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]\n"
      "    c.settimeout(2)\n"
      "    try:\n"
      "        got = len(c.recv(65536))\n"
      "    except OSError:\n"
      "        got = -1\n"
      "    with open('/tmp/impostor.log', 'a') as f:\n"
      "        f.write('%d %d\\n' % (pid, got))\n"
      "    c.close()\n";
  sb.write_file("/tmp/impostor.py", impostor);
  ASSERT_EQ(sh(sb,
               "nohup python3 /tmp/impostor.py >/tmp/impostor.out 2>&1 & "
               "for i in $(seq 100); do [ -e /tmp/impostor.ready ] && break; sleep 0.05; done; "
               "[ -e /tmp/impostor.ready ] && echo listening"),
            "listening\n");
  auto again = sandboxio::sync::Sandbox::connect(kDsn, sb.id());
  EXPECT_EQ(again.info().agent, "") << "connect() trusted a socket the agent does not serve";
  EXPECT_EQ(again.run({"true"}).exit_code, 0);
  // Each line: the peer's pid (0 for one outside the container's PID namespace, the host;
  // the bridge exec is a process inside it) and the bytes it sent first. The host may find
  // the impostor listening, but must send it nothing: no Hello, no command.
  const std::string log = sb.read_file("/tmp/impostor.log");
  EXPECT_NE(log.find(' '), std::string::npos) << "the impostor saw no connection: " << log;
  for (std::size_t at = 0; at < log.size();) {
    const std::size_t end = log.find('\n', at);
    const std::string line = log.substr(at, end - at);
    at = end == std::string::npos ? log.size() : end + 1;
    if (line.starts_with("0 ")) {
      EXPECT_EQ(line, "0 0") << "the host spoke to the impostor";
    }
  }
}

TEST(DockerAgent, RunsInAnImageWithoutPythonOrLibc) {
  SBX_REQUIRE_ENGINE();
  auto sb =
      sandboxio::sync::Sandbox::create(std::string("docker://") + kBusyboxImage + "?agent=on");
  EXPECT_EQ(sb.info().agent, kAgent + kOwnerRoute);
  const auto r = sb.run({"sh", "-c", "echo $$; exit 201"});
  EXPECT_EQ(r.exit_code, 201) << "an exit code above 128 is an exit code";
  EXPECT_EQ(r.termination, sandboxio::Termination::Exited);
  EXPECT_NE(r.stdout_bytes, "1\n") << "the command is not the container's init";
}

// The attach stream carries command output and file contents: none of it may land in the
// engine's container log on disk.
TEST(DockerAgent, NothingTheAgentCarriesReachesTheEnginesLog) {
  SBX_REQUIRE_ENGINE();
  auto sb = sandboxio::sync::Sandbox::create(kDsn + "?agent=on");
  const std::string marker = "sbx-log-canary-4471";
  ASSERT_EQ(sb.run({"sh", "-c", "echo " + marker + "; echo " + marker + " >&2"}).exit_code, 0);
  sb.write_file("/tmp/canary", marker + "-file");
  ASSERT_EQ(sb.read_file("/tmp/canary"), marker + "-file");
  const std::string logs = sandboxio::testing::capture("docker logs " + sb.id() + " 2>&1");
  EXPECT_EQ(logs.find(marker), std::string::npos) << "the engine logged: " << logs;
  EXPECT_EQ(sandboxio::testing::trim_text(sandboxio::testing::capture(
                "docker inspect -f '{{.HostConfig.LogConfig.Type}}' " + sb.id())),
            "none");
}

// The agent stays root (with CAP_SETUID, CAP_SETGID and CAP_KILL only) and runs every
// command as the user: their processes cannot signal, trace or read it, and hold no
// capability themselves.
TEST(DockerAgent, ANonRootUsersCommandsCannotReachTheAgent) {
  SBX_REQUIRE_ENGINE();
  auto sb = sandboxio::sync::Sandbox::create(kDsn + "?agent=on&user=nobody");
  EXPECT_EQ(sh(sb, "id -u; id -g"), "65534\n65534\n");
  EXPECT_EQ(sh(sb, "grep -E '^Cap(Prm|Eff|Amb)' /proc/self/status | awk '{print $2}'"),
            "0000000000000000\n0000000000000000\n0000000000000000\n")
      << "a command as the user holds a capability";
  EXPECT_EQ(sh(sb,
               "ls /proc/1/fd >/dev/null 2>&1 && echo fd; "
               "cat /proc/1/environ >/dev/null 2>&1 && echo environ; "
               "head -c1 /proc/1/mem >/dev/null 2>&1 && echo mem; "
               "{ echo x > /proc/1/fd/1; } 2>/dev/null && echo wrote; "
               "kill -KILL 1 2>/dev/null && echo killed; "
               "kill -STOP 1 2>/dev/null && echo stopped; "
               "echo end"),
            "end\n");
  EXPECT_EQ(sb.run({"true"}).exit_code, 0) << "the agent survived its user's attempts";
  // Files are opened as the user: theirs when written, refused where the user may not go.
  sb.write_file("/tmp/mine.txt", "hello");
  EXPECT_EQ(sh(sb, "stat -c %u:%g /tmp/mine.txt"), "65534:65534\n");
  try {
    (void)sb.read_file("/etc/shadow");
    ADD_FAILURE() << "the user read /etc/shadow through the agent";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::FilePermissionDenied) << e.what();
  }
  try {
    sb.write_file("/etc/owned", "x");
    ADD_FAILURE() << "the user wrote into /etc through the agent";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::FilePermissionDenied) << e.what();
  }
  EXPECT_NE(sh(sb, "echo $HOME"), "/root\n");
  // Another process's handle (the daemon's exec) runs as the user too, never as root.
  auto again = sandboxio::sync::Sandbox::connect(kDsn, sb.id());
  EXPECT_EQ(again.info().agent, kAgent + kConnectRoute);
  EXPECT_EQ(again.run({"id", "-u"}).stdout_bytes, "65534\n");
  // The bridge admits root only: the user's commands cannot open a session of their own.
  const auto bridge = sb.run({"sh", "-c", "echo | /.sandboxio/agent --bridge; echo rc=$?"});
  EXPECT_NE(bridge.stderr_bytes.find("Permission denied"), std::string::npos)
      << bridge.stderr_bytes;
  EXPECT_EQ(bridge.stdout_bytes, "rc=2\n");
  EXPECT_EQ(sh(sb, "ls /.sandboxio/run 2>&1 >/dev/null | grep -c 'Permission denied'"), "1\n");
}

TEST(DockerAgent, ATimedOutCommandLeavesNothingBehindAndTheNextRunWorks) {
  SBX_REQUIRE_ENGINE();
  auto sb = sandboxio::sync::Sandbox::create(kDsn + "?agent=on");
  sandboxio::Command c;
  // A setsid child, a double fork, nohup and a child that clears its environment: each
  // leaves the command's session or its environment token; none may survive the timeout.
  c.argv = {"sh", "-c",
            "setsid sleep 4101 & (sleep 4102 &) & nohup sleep 4103 >/dev/null 2>&1 & "
            "env -i /bin/sleep 4104 & sleep 4100"};
  c.timeout = 1s;
  const auto r = sb.run(c);
  EXPECT_EQ(r.termination, sandboxio::Termination::Timeout);
  EXPECT_EQ(sh(sb, "pgrep -f 'sleep 41[0-9]' || echo none"), "none\n");
  sb.write_file("/tmp/after", "still here");
  EXPECT_EQ(sb.read_file("/tmp/after"), "still here");
}

// The agent says a file's size before its bytes: one that read_file() cannot keep (over 2 GiB)
// is refused at once, before any of it travels, and the session goes on.
TEST(DockerAgent, AFileTooLargeToReadIsRefusedBeforeItTravels) {
  SBX_REQUIRE_ENGINE();
  auto sb = sandboxio::sync::Sandbox::create(kDsn + "?agent=on");
  ASSERT_EQ(sh(sb, "truncate -s 3G /tmp/huge && echo made"), "made\n");  // sparse: no disk
  const auto t = std::chrono::steady_clock::now();
  try {
    (void)sb.read_file("/tmp/huge");
    FAIL() << "read_file() returned a 3 GiB file";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::OutputLimitExceeded) << e.what();
  }
  // 3 GiB through dockerd takes seconds; a refusal on the size alone takes a round trip.
  EXPECT_LT(std::chrono::steady_clock::now() - t, 2s);
  sb.write_file("/tmp/small", "fine");
  EXPECT_EQ(sb.read_file("/tmp/small"), "fine");
}

// ---- code contexts ----

TEST(DockerAgent, CodeContextsKeepStateAndReturnRichValuesAndExceptions) {
  SBX_REQUIRE_ENGINE();
  auto sb = sandboxio::sync::Sandbox::create(kDsn + "?agent=on");
  EXPECT_TRUE(sb.capabilities().contains(sandboxio::Capability::StatefulCode));
  EXPECT_TRUE(sb.info().capabilities.contains(sandboxio::Capability::RichOutput));
  const auto ctx = sb.create_context();
  auto r = cell(sb, ctx, "rows = [1, 2, 3]\nprint('stored')");
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.stdout_bytes, "stored\n");
  r = cell(sb, ctx,
           "class Table:\n"
           "    def _repr_html_(self): return '<table><tr><td>%d</td></tr></table>' % sum(rows)\n"
           "    def __repr__(self): return 'Table(6)'\n"
           "Table()");
  ASSERT_TRUE(r.ok()) << r.stderr_bytes;
  const std::vector<sandboxio::RichOutput> want = {
      {"text/plain", "Table(6)"}, {"text/html", "<table><tr><td>6</td></tr></table>"}};
  EXPECT_EQ(r.results, want);

  r = cell(sb, ctx, "{}['missing']");
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->name, "KeyError");
  EXPECT_EQ(r.error->value, "'missing'");
  EXPECT_NE(r.error->traceback.find("KeyError: 'missing'"), std::string::npos);
  EXPECT_NE(r.stderr_bytes.find("KeyError"), std::string::npos) << "stderr shows the traceback";
  EXPECT_FALSE(r.context_restarted);

  // A cell that times out is interrupted: what it started dies, the context lives on.
  r = cell(sb, ctx,
           "import subprocess, time\n"
           "subprocess.Popen(['sh', '-c', 'setsid sleep 4201 & env -i sleep 4202'])\n"
           "time.sleep(600)",
           1s);
  EXPECT_EQ(r.termination, sandboxio::Termination::Timeout);
  EXPECT_FALSE(r.error) << "the interrupt is the timeout's, not an error of the code";
  EXPECT_FALSE(r.context_restarted);
  EXPECT_EQ(cell(sb, ctx, "print(len(rows))").stdout_bytes, "3\n");
  EXPECT_EQ(sh(sb, "pgrep -f 'sleep 420[12]' || echo none"), "none\n");

  // A cell that cannot be interrupted gets its context restarted, and the result says so.
  r = cell(sb, ctx,
           "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(600)",
           1s);
  EXPECT_EQ(r.termination, sandboxio::Termination::Timeout);
  EXPECT_TRUE(r.context_restarted);
  r = cell(sb, ctx, "print('rows' in dir())");
  EXPECT_EQ(r.stdout_bytes, "False\n");

  // run_code without a context runs in a fresh one and also returns values.
  r = sb.run_code("6 * 7");
  ASSERT_FALSE(r.results.empty());
  EXPECT_EQ(r.results[0], (sandboxio::RichOutput{"text/plain", "42"}));
  try {
    (void)cell(sb, sandboxio::CodeContext{"ctx-999", "python"}, "1");
    ADD_FAILURE() << "a context that does not exist ran code";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::CodeContextNotFound) << e.what();
  }
}

TEST(DockerAgent, ContextsAreDeclaredOnlyWhereTheyCanRun) {
  SBX_REQUIRE_ENGINE();
  auto busybox =
      sandboxio::sync::Sandbox::create(std::string("docker://") + kBusyboxImage + "?agent=on");
  EXPECT_FALSE(busybox.capabilities().contains(sandboxio::Capability::StatefulCode))
      << "an image without python3 declared code contexts";
  auto off = sandboxio::sync::Sandbox::create(kDsn + "?agent=off");
  EXPECT_FALSE(off.capabilities().contains(sandboxio::Capability::StatefulCode));
  for (auto* sb : {&busybox, &off}) {
    try {
      (void)sb->create_context();
      ADD_FAILURE() << "create_context() without the capability";
    } catch (const sandboxio::Error& e) {
      EXPECT_EQ(e.code(), sandboxio::errc::CapabilityNotSupported) << e.what();
    }
  }
}

}  // namespace

namespace {

// docker://IMAGE?runtime=runsc: the engine's gVisor runtime (scripts/docker-env registers
// Debian's runsc). The tier says GVISOR, require_isolation=GVISOR holds there and only there,
// and the agent serves the sandbox from inside gVisor's kernel.
TEST(DockerGvisor, RunscIsTheGvisorTierAndTheAgentServesUnderIt) {
  SBX_REQUIRE_ENGINE();
  sandboxio::CreateOptions strict;
  strict.require_isolation = sandboxio::IsolationTier::Gvisor;
  auto sb = sandboxio::sync::Sandbox::create(kDsn + "?runtime=runsc", strict);
  EXPECT_EQ(sb.tier(), sandboxio::IsolationTier::Gvisor);
  EXPECT_EQ(sb.info().agent.rfind(kAgent, 0), 0u) << sb.info().agent;
  // gVisor's Sentry answers system calls: it reports its own kernel, not this machine's.
  const auto inside = sb.run({"uname", "-r"});
  EXPECT_EQ(inside.stdout_bytes, "4.4.0\n");
  EXPECT_NE(inside.stdout_bytes, sandboxio::testing::capture("uname -r"));
  EXPECT_EQ(sb.run_code("print(6 * 7)").stdout_bytes, "42\n");
  // The same minimum refuses plain docker:// (runc: CONTAINER).
  try {
    (void)sandboxio::sync::Sandbox::create(kDsn, strict);
    ADD_FAILURE() << "plain docker:// passed require_isolation=GVISOR";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::IsolationNotSatisfied) << e.what();
  }
  // A runtime whose isolation sandboxio does not know is refused, not guessed.
  EXPECT_THROW((void)sandboxio::sync::Sandbox::create(kDsn + "?runtime=kata"), sandboxio::Error);
}

}  // namespace
