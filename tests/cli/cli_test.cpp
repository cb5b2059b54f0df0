// The sandboxio command line, run as a user runs it: exit codes, separate streams, --json
// parsed, colour only on a terminal (checked under a pseudo-terminal), doctor's verdict when
// the engine is unreachable, and routing check.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <simdjson.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../docker/docker_support.hpp"
#include "sandboxio/sync.hpp"

extern char** environ;

namespace {

struct Ran {
  int status = -1;
  std::string out, err;
};

std::string drain(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof buf)) > 0)
    s.append(buf, static_cast<std::size_t>(n));
  return s;
}

std::vector<char*> env_with(const std::vector<std::string>& extra, std::vector<std::string>& keep) {
  keep.clear();
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    bool overridden = false;
    for (const auto& x : extra)
      overridden = overridden || kv.substr(0, kv.find('=')) == x.substr(0, x.find('='));
    if (!overridden) keep.push_back(kv);
  }
  for (const auto& x : extra)
    keep.push_back(x);
  std::vector<char*> out;
  for (auto& s : keep)
    out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Runs the CLI with separate pipes for stdout and stderr (read one after the other: the
// outputs here are small).
Ran cli(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
  int out[2], err[2];
  EXPECT_EQ(::pipe(out), 0);
  EXPECT_EQ(::pipe(err), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addclose(&fa, err[0]);
  args.insert(args.begin(), SBX_CLI);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> keep;
  auto envp = env_with(env, keep);
  pid_t pid = 0;
  Ran r;
  if (posix_spawn(&pid, SBX_CLI, &fa, nullptr, argv.data(), envp.data()) != 0) return r;
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  ::close(err[1]);
  r.out = drain(out[0]);
  r.err = drain(err[0]);
  ::close(out[0]);
  ::close(err[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Runs the CLI on a pseudo-terminal: what a person sees. A shell prints an end marker with
// the exit status after the CLI has ended, and the test keeps its own handle on the terminal:
// reading stops at the marker, never at the hang-up, which on Linux can race ahead of output
// still in flight from the terminal's other side.
Ran on_terminal(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
  Ran r;
  int master = -1, slave = -1;
  if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) return r;
  std::vector<std::string> keep;
  auto envp = env_with(env, keep);
  const std::string script = "\"$0\" \"$@\"; printf '\\n@@end %d@@' $?";
  args.insert(args.begin(), {"/bin/sh", "-c", script, SBX_CLI});
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(master);
    ::setsid();
    if (::ioctl(slave, TIOCSCTTY, 0) != 0) ::_exit(126);
    for (int fd = 0; fd < 3; ++fd)
      ::dup2(slave, fd);
    ::close(slave);
    ::execve("/bin/sh", argv.data(), envp.data());
    ::_exit(127);
  }
  static const std::string marker = "\n@@end ";
  char buf[4096];
  std::size_t at = std::string::npos;
  while (at == std::string::npos || r.out.find("@@", at + marker.size()) == std::string::npos) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 60'000) <= 0) {
      ADD_FAILURE() << "no end marker from the CLI within 60 s: " << r.out;
      break;
    }
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;
    r.out.append(buf, static_cast<std::size_t>(n));
    at = r.out.find("@@end ");
    if (at != std::string::npos) at = r.out.rfind('\n', at);
  }
  ::close(master);
  ::close(slave);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (at != std::string::npos) {
    r.status = std::atoi(r.out.c_str() + at + marker.size());
    r.out.resize(at);
  }
  return r;
}

simdjson::dom::element parse(simdjson::dom::parser& p, const std::string& text) {
  simdjson::dom::element e;
  EXPECT_FALSE(p.parse(text).get(e)) << text;
  return e;
}

TEST(Cli, RunPropagatesExitCodesAndKeepsStreamsApart) {
  const Ran r = cli({"run", "-b", "fake://", "--", "sh", "-c", "echo out; echo err >&2; exit 7"});
  EXPECT_EQ(r.status, 7);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_NE(r.err.find("err\n"), std::string::npos);
  EXPECT_EQ(r.err.find("out"), std::string::npos);
  EXPECT_EQ(cli({"run", "-b", "fake://", "--", "true"}).status, 0);
  const Ran timeout = cli({"run", "-b", "fake://", "-t", "0.2", "--", "sleep", "30"});
  EXPECT_EQ(timeout.status, 124);
  EXPECT_NE(timeout.err.find("timeout"), std::string::npos);
}

TEST(Cli, RunJsonIsOneParsableResult) {
  const Ran r = cli({"run", "--json", "-b", "fake://", "-e", "WHO=json", "--", "sh", "-c",
                     "echo $WHO; echo e >&2; exit 3"});
  EXPECT_EQ(r.status, 3);
  simdjson::dom::parser p;
  auto doc = parse(p, r.out);
  EXPECT_EQ(int64_t(doc["exit_code"]), 3);
  EXPECT_EQ(std::string_view(doc["termination"]), "exited");
  EXPECT_EQ(std::string_view(doc["stdout"]), "json\n");
  EXPECT_EQ(std::string_view(doc["stderr"]), "e\n");
  EXPECT_EQ(std::string_view(doc["backend"]), "fake");
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(cli({}).status, 2);
  EXPECT_EQ(cli({"run"}).status, 2);
  EXPECT_EQ(cli({"frobnicate"}).status, 2);
  EXPECT_EQ(cli({"run", "-b", "fake://", "--env", "NOEQUALS", "--", "true"}).status, 2);
}

TEST(Cli, RunOnDockerWithAFileCopiedIn) {
  SBX_REQUIRE_ENGINE();
  const std::string local = "/tmp/sbx-cli-test-" + std::to_string(::getpid());
  std::ofstream(local) << "from the host\n";
  const Ran r =
      cli({"run", "-b", std::string("docker://") + sandboxio::testing::kPythonImage, "--file",
           local + ":/tmp/in.txt", "--", "sh", "-c", "cat /tmp/in.txt; echo to-err >&2; exit 5"});
  ::unlink(local.c_str());
  EXPECT_EQ(r.status, 5) << r.err;
  EXPECT_EQ(r.out, "from the host\n");
  EXPECT_EQ(r.err, "to-err\n");
}

TEST(Cli, DoctorFailsWithAHintWhenTheEngineIsUnreachable) {
  const Ran r = cli({"doctor", "--json"}, {"DOCKER_HOST=unix:///nonexistent/docker.sock"});
  EXPECT_EQ(r.status, 1);
  simdjson::dom::parser p;
  auto doc = parse(p, r.out);
  EXPECT_FALSE(bool(doc["ok"]));
  simdjson::dom::array backends = doc["backends"];
  bool found = false;
  for (auto b : backends) {
    if (std::string_view(b["backend"]) != "docker") continue;
    found = true;
    EXPECT_FALSE(bool(b["ok"]));
    auto first = simdjson::dom::array(b["checks"]).at(0);
    EXPECT_FALSE(bool(first["ok"]));
    EXPECT_NE(std::string_view(first["hint"]).find("dockerd"), std::string_view::npos);
  }
  EXPECT_TRUE(found);
  // Credentials are named, never printed.
  const Ran k = cli({"doctor"}, {"DOCKER_HOST=unix:///nonexistent/docker.sock",
                                 "E2B_API_KEY=e2b_secret_value_123"});
  EXPECT_EQ(k.out.find("e2b_secret_value_123"), std::string::npos);
  EXPECT_NE(k.out.find("E2B_API_KEY"), std::string::npos);
}

// doctor's OpenTelemetry line: off without OTEL_*, failing (and naming why) when the collector
// cannot be reached or a variable cannot be used.
TEST(Cli, DoctorSaysWhetherTracesReachTheCollector) {
  auto telemetry_check = [](const std::vector<std::string>& env) {
    std::vector<std::string> all = {"DOCKER_HOST=unix:///nonexistent/docker.sock"};
    all.insert(all.end(), env.begin(), env.end());
    const Ran r = cli({"doctor", "--json"}, all);
    simdjson::dom::parser p;
    auto doc = parse(p, r.out);
    for (auto b : simdjson::dom::array(doc["backends"])) {
      if (std::string_view(b["backend"]) != "opentelemetry") continue;
      auto c = simdjson::dom::array(b["checks"]).at(0);
      return std::pair<bool, std::string>(bool(c["ok"]),
                                          std::string(std::string_view(c["detail"])));
    }
    ADD_FAILURE() << "no opentelemetry verdict: " << r.out;
    return std::pair<bool, std::string>(false, "");
  };
  auto off = telemetry_check({});
  EXPECT_TRUE(off.first);
  EXPECT_NE(off.second.find("off"), std::string::npos) << off.second;
  // Port 1 on loopback: nobody listens there.
  auto dead = telemetry_check({"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1"});
  EXPECT_FALSE(dead.first);
  EXPECT_NE(dead.second.find("refused"), std::string::npos) << dead.second;
  auto bad = telemetry_check(
      {"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"});
  EXPECT_FALSE(bad.first);
  EXPECT_NE(bad.second.find("OTEL_EXPORTER_OTLP_PROTOCOL"), std::string::npos) << bad.second;
}

TEST(Cli, ColourOnlyOnATerminalAndNeverWithNoColor) {
  const std::vector<std::string> env{"DOCKER_HOST=unix:///nonexistent/docker.sock", "NO_COLOR="};
  const Ran tty = on_terminal({"doctor"}, env);
  EXPECT_NE(tty.out.find("\033[32m"), std::string::npos) << tty.out;
  const Ran no_color =
      on_terminal({"doctor"}, {"DOCKER_HOST=unix:///nonexistent/docker.sock", "NO_COLOR=1"});
  EXPECT_EQ(no_color.out.find("\033["), std::string::npos) << no_color.out;
  const Ran piped = cli({"doctor"}, env);
  EXPECT_EQ(piped.out.find("\033["), std::string::npos);
}

TEST(Cli, WithoutABackendRunSaysWhichItPickedAndWhy) {
  // SBX_BACKEND is the default's first source; the terminal shows the choice and its reason.
  const Ran tty = on_terminal({"run", "--", "true"}, {"SBX_BACKEND=fake://"});
  EXPECT_NE(tty.out.find("running on fake:// (SBX_BACKEND)"), std::string::npos) << tty.out;
  // With neither a flag nor SBX_BACKEND, and no engine: local://, never fake://.
  const Ran demo = on_terminal({"demo"}, {"DOCKER_HOST=", "SBX_BACKEND="});
  if (demo.out.find("docker://") == std::string::npos) {
    EXPECT_NE(demo.out.find("sandboxio demo on local://"), std::string::npos) << demo.out;
  }
  EXPECT_EQ(demo.out.find("fake://"), std::string::npos) << demo.out;
}

TEST(Cli, ProgressShowsOnATerminalNeverInPipesOrJson) {
  const Ran tty = on_terminal({"run", "-b", "fake://", "--", "true"});
  EXPECT_NE(tty.out.find("creating the sandbox"), std::string::npos) << tty.out;
  const Ran piped = cli({"run", "-b", "fake://", "--", "true"});
  EXPECT_EQ(piped.err.find("creating the sandbox"), std::string::npos);
  const Ran json = on_terminal({"run", "--json", "-b", "fake://", "--", "true"});
  EXPECT_EQ(json.out.find("creating the sandbox"), std::string::npos);
}

TEST(Cli, RoutingCheckValidatesAndPointsAtTheLine) {
  const std::string dir = "/tmp/sbx-routing-" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0700);
  std::ofstream(dir + "/good.yaml") << "default_class: a\nclasses:\n  a: {backend: \"fake://\"}\n";
  std::ofstream(dir + "/bad.yaml")
      << "default_class: a\nclasses:\n  a:\n    backend: fake://\n    netwrok: deny\n";
  const Ran good = cli({"routing", "check", dir + "/good.yaml"});
  EXPECT_EQ(good.status, 0) << good.err;
  const Ran bad = cli({"routing", "check", dir + "/bad.yaml"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("bad.yaml:5:"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("SBX_E1005"), std::string::npos) << bad.err;
  simdjson::dom::parser p;
  auto doc = parse(p, cli({"routing", "check", "--json", dir + "/good.yaml"}).out);
  EXPECT_EQ(std::string_view(doc["default_class"]), "a");
  std::system(("rm -rf " + dir).c_str());
}

TEST(Cli, RunLearnPrintsExactlyTheHostsTriedAsASnippetRoutingCheckAccepts) {
  if (::access("/usr/bin/bwrap", X_OK) != 0)
    GTEST_SKIP() << "*** no bubblewrap here: `sandboxio run --learn` is not tested (CI has it) ***";
  // Three hosts, one of them twice, through the proxy the sandbox's environment names; every
  // attempt is refused (learning), so nothing leaves this machine.
  const std::string script =
      "import os, socket\n"
      "host, port = os.environ['https_proxy'].split('//')[1].split(':')\n"
      "for target in ['pypi.org:443', 'files.pythonhosted.org:443', 'pypi.org:443',\n"
      "               'example.com:80']:\n"
      "    s = socket.create_connection((host, int(port)))\n"
      "    s.sendall(('CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (target, "
      "target)).encode())\n"
      "    print(s.recv(100).split(b'\\r\\n')[0].decode())\n";
  const Ran r = cli({"run", "--learn", "-b", "local://", "--", "python3", "-c", script});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out,
            "HTTP/1.1 403 Forbidden\nHTTP/1.1 403 Forbidden\nHTTP/1.1 403 Forbidden\n"
            "HTTP/1.1 403 Forbidden\n");
  std::vector<std::string> listed;
  std::string snippet;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  ", 0) == 0 && line.find("--allow") == std::string::npos &&
        line.find("network:") == std::string::npos)
      listed.push_back(line.substr(2));
    if (line.find("network: [") != std::string::npos) snippet = line;
  }
  EXPECT_EQ(listed, (std::vector<std::string>{"example.com:80", "files.pythonhosted.org:443",
                                              "pypi.org:443"}))
      << r.err;
  ASSERT_FALSE(snippet.empty()) << r.err;
  const std::string file = "/tmp/sbx-learned-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(file) << "default_class: learned\nclasses:\n  learned:\n    backend: "
                         "\"local://\"\n"
                      << snippet << "\n";
  const Ran check = cli({"routing", "check", "--json", file});
  ::unlink(file.c_str());
  ASSERT_EQ(check.status, 0) << check.err;
  EXPECT_NE(check.out.find("allow: example.com:80, files.pythonhosted.org:443, pypi.org:443"),
            std::string::npos)
      << check.out;
}

TEST(Cli, RunWithARoutingFileTakesTheClass) {
  const std::string file = "/tmp/sbx-route-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(file) << "default_class: a\nclasses:\n  a: {backend: \"fake://\"}\n";
  const Ran r = cli({"run", "--routing", file, "--tool", "x", "--json", "--", "true"});
  ::unlink(file.c_str());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"backend\":\"fake\""), std::string::npos) << r.out;
}

TEST(Cli, ReapFindsWhatWasLeftBehindAndRemovesItOnlyWithKill) {
  SBX_REQUIRE_ENGINE();
  const std::string tag = "cli-reap-" + std::to_string(::getpid());
  std::string id;
  {
    sandboxio::CreateOptions o;
    o.outlive_owner = true;  // left behind on purpose
    o.lifetime = std::chrono::minutes(5);
    o.labels["sbx-test"] = tag;
    auto sb = sandboxio::sync::Sandbox::create(
        std::string("docker://") + sandboxio::testing::kPythonImage, o);
    id = sb.id();
  }
  const Ran dry = cli({"reap", "--json", "--label", "sbx-test=" + tag});
  EXPECT_EQ(dry.status, 0) << dry.err;
  simdjson::dom::parser p;
  auto doc = parse(p, dry.out);
  simdjson::dom::array found = doc["sandboxes"];
  ASSERT_EQ(found.size(), 1u) << dry.out;
  EXPECT_EQ(std::string_view(found.at(0)["id"]), id);
  EXPECT_EQ(std::string_view(found.at(0)["state"]), "running");
  EXPECT_TRUE(bool(doc["dry_run"]));
  int status = 0;
  sandboxio::testing::capture("docker inspect " + id + " >/dev/null 2>&1", &status);
  EXPECT_EQ(status, 0) << "the dry run removed the sandbox";
  // The leak check of a CI job: finding one is exit 3, and it stays a dry run.
  const Ran check = cli({"reap", "--check", "--label", "sbx-test=" + tag});
  EXPECT_EQ(check.status, 3) << check.out << check.err;
  EXPECT_NE(check.err.find("leak check"), std::string::npos) << check.err;

  const Ran kill = cli({"reap", "--kill", "--label", "sbx-test=" + tag});
  EXPECT_EQ(kill.status, 0) << kill.err;
  EXPECT_NE(kill.out.find(id.substr(0, 12)), std::string::npos) << kill.out;
  const auto start = std::chrono::steady_clock::now();
  do {
    sandboxio::testing::capture("docker inspect " + id + " >/dev/null 2>&1", &status);
  } while (status == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  EXPECT_NE(status, 0) << "reap --kill left the sandbox";
  const Ran after = cli({"reap", "--json", "--check", "--label", "sbx-test=" + tag});
  EXPECT_NE(after.out.find("\"sandboxes\":[]"), std::string::npos) << after.out;
  EXPECT_EQ(after.status, 0) << "--check with nothing left is a pass";
}

TEST(Cli, ReapSaysSoWhenTheEngineIsUnreachable) {
  const Ran r = cli({"reap"}, {"DOCKER_HOST=unix:///nonexistent/docker.sock"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("SBX_E1102"), std::string::npos) << r.err;
}

// `sandboxio bench DSN`: every measure, with a spread that is ordered and a stream that moved
// what it should, on fake:// and on a real backend (local://: bubblewrap, no daemon).
void expect_bench_json(const std::string& dsn) {
  const Ran r = cli({"bench", dsn, "--json", "--runs", "2", "--rounds", "3", "--mib", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  simdjson::dom::parser p;
  auto doc = parse(p, r.out);
  EXPECT_EQ(std::string_view(doc["backend"]), dsn);
  EXPECT_EQ(int64_t(doc["runs"]), 2);
  EXPECT_EQ(int64_t(doc["rounds"]), 3);
  for (const char* key : {"create_ms", "run_ms", "first_output_ms", "stream_mib_s", "kill_ms"}) {
    const double lo = double(doc[key]["min"]), mid = double(doc[key]["median"]),
                 hi = double(doc[key]["max"]);
    EXPECT_GT(lo, 0) << key;
    EXPECT_LE(lo, mid) << key;
    EXPECT_LE(mid, hi) << key;
  }
  // A stream that brought fewer bytes than asked would have failed the command: 2 MiB took
  // some time, so the rate is finite.
  EXPECT_LT(double(doc["stream_mib_s"]["max"]), 1e6);
}

TEST(Cli, BenchMeasuresEveryStepOnFake) {
  expect_bench_json("fake://");
  const Ran text = cli({"bench", "fake://", "--runs", "1", "--rounds", "2", "--mib", "1"});
  EXPECT_EQ(text.status, 0) << text.err;
  for (const char* label : {"create", "run({\"true\"})", "nothing to first output", "stdout stream",
                            "MiB/s", "kill", "median"})
    EXPECT_NE(text.out.find(label), std::string::npos) << label << " in\n" << text.out;
  EXPECT_EQ(cli({"bench", "fake://", "--runs", "0"}).status, 2);
}

TEST(Cli, BenchMeasuresEveryStepOnLocal) {
  if (::access("/usr/bin/bwrap", X_OK) != 0) {
    if (std::getenv("SBX_REQUIRE_LOCAL")) FAIL() << "SBX_REQUIRE_LOCAL is set but bwrap is missing";
    GTEST_SKIP()
        << "*** no bubblewrap here: `sandboxio bench local://` is not tested (CI has it) ***";
  }
  expect_bench_json("local://");
}

}  // namespace
