// docker:// behaviour beyond the contract suite, against the real engine: the owner lease,
// the deny-egress proof with a canary, labels, and the sandbox's configuration.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "../support/flight_session.hpp"
#include "docker_support.hpp"
#include "sandboxio/sync.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using sandboxio::testing::capture;
using sandboxio::testing::kBusyboxImage;
using sandboxio::testing::kPythonImage;

const std::string kDsn = std::string("docker://") + kPythonImage;

bool container_exists(const std::string& id) {
  int status = 0;
  (void)capture("docker inspect --format '{{.Id}}' " + id + " >/dev/null 2>&1", &status);
  return status == 0;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

TEST(DockerLease, SigkilledOwnerTakesItsContainerWithinTwoSeconds) {
  SBX_REQUIRE_ENGINE();
  sandboxio::testing::expect_sigkilled_owner_ends_sandbox(kDsn);
}

TEST(DockerLease, OnTheExecPathTooASigkilledOwnerTakesItsContainerWithinTwoSeconds) {
  SBX_REQUIRE_ENGINE();
  sandboxio::testing::expect_sigkilled_owner_ends_sandbox(kDsn + "?agent=off");
}

TEST(DockerLease, OutliveOwnerKeepsTheSandboxUntilItsLifetime) {
  SBX_REQUIRE_ENGINE();
  std::string id;
  {
    sandboxio::CreateOptions o;
    o.outlive_owner = true;
    o.lifetime = 2s;
    auto sb = sandboxio::sync::Sandbox::create(kDsn, o);
    id = sb.id();
  }
  EXPECT_TRUE(container_exists(id)) << "an outlive_owner sandbox ended with its handle";
  auto again = sandboxio::sync::Sandbox::connect(kDsn, id);
  EXPECT_TRUE(again.run({"true"}).ok());
  const auto start = std::chrono::steady_clock::now();
  while (container_exists(id) && std::chrono::steady_clock::now() - start < 15s) {
  }
  EXPECT_FALSE(container_exists(id)) << "the lifetime backstop did not end the container";
}

TEST(DockerConfig, LabelsLimitsAndHardening) {
  SBX_REQUIRE_ENGINE();
  sandboxio::CreateOptions o;
  o.resources.memory_bytes = 128ULL << 20;
  o.resources.pids = 64;
  o.resources.cpus = 0.5;
  o.labels["team"] = "agents";
  auto sb = sandboxio::sync::Sandbox::create(kDsn, o);
  const std::string fmt =
      "{{.HostConfig.NetworkMode}} {{.HostConfig.Memory}} {{.HostConfig.MemorySwap}} "
      "{{.HostConfig.PidsLimit}} {{.HostConfig.NanoCpus}} {{.HostConfig.CapDrop}} "
      "{{.HostConfig.SecurityOpt}} {{.HostConfig.Init}} {{index .Config.Labels "
      "\"io.sandboxio.managed\"}} {{index .Config.Labels \"team\"}} {{index .Config.Labels "
      "\"io.sandboxio.lifetime\"}}";
  const std::string got = trim(capture("docker inspect --format '" + fmt + "' " + sb.id()));
  // No Docker init: the agent (the default) is the container's init.
  EXPECT_EQ(
      got, "none 134217728 134217728 64 500000000 [ALL] [no-new-privileges] false true agents 600");
  EXPECT_EQ(trim(capture("docker inspect --format '{{json .Config.Entrypoint}} {{index "
                         ".Config.Labels \"io.sandboxio.agent\"}}' " +
                         sb.id())),
            "[\"/.sandboxio/agent\"] on");
  // The memory limit holds inside: a 300 MB allocation dies.
  auto r = sb.run({"python3", "-c", "b = bytearray(300 * 1024 * 1024); print(len(b))"});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.exit_code, 137);
  EXPECT_EQ(r.termination, sandboxio::Termination::OutOfMemory)
      << "ended as " << to_string(r.termination);
  // A SIGKILL that is not the memory limit stays a signal.
  auto k = sb.run({"sh", "-c", "kill -9 $$"});
  EXPECT_EQ(k.termination, sandboxio::Termination::Signalled);
  EXPECT_EQ(k.signal, 9);
  // ... and the sandbox goes on.
  EXPECT_TRUE(sb.run({"true"}).ok());
}

TEST(DockerConfig, MissingImageIsImageNotFound) {
  SBX_REQUIRE_ENGINE();
  try {
    (void)sandboxio::sync::Sandbox::create("docker://sandboxio-test/no-such-image:1?pull=never");
    FAIL() << "create succeeded";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::ImageNotFound) << e.what();
  }
  EXPECT_TRUE(sandboxio::testing::my_containers().empty());
}

TEST(DockerConfig, UnreachableEngineSaysSo) {
  try {
    (void)sandboxio::sync::Sandbox::create("docker://x?host=unix:///nonexistent/docker.sock");
    FAIL() << "create succeeded";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::BackendUnavailable) << e.what();
    EXPECT_NE(std::string(e.what()).find("/nonexistent/docker.sock"), std::string::npos);
  }
}

TEST(DockerFiles, TmpfsAndReadOnlyRootGoThroughAnExec) {
  SBX_REQUIRE_ENGINE();
  auto sb = sandboxio::sync::Sandbox::create(kDsn + "?read_only=true&tmpfs=/work");
  sb.write_file("/work/sub/a.txt", "on tmpfs");
  EXPECT_EQ(sb.read_file("/work/sub/a.txt"), "on tmpfs");
  EXPECT_EQ(sb.run({"cat", "/work/sub/a.txt"}).stdout_bytes, "on tmpfs");
  const auto listed = sb.list_files("/work");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, "sub");
  EXPECT_EQ(listed[0].type, sandboxio::FileType::Directory);
  try {
    sb.write_file("/etc/x", "y");
    FAIL() << "wrote to a read-only root";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::FilePermissionDenied) << e.what();
  }
}

// ---- deny-egress proof ----
// A canary HTTP server on an --internal network this test creates. A control container with
// the same image and the same probe reaches it (so the probe and the canary work); a
// sandboxio sandbox reaches neither it nor anything else. No traffic leaves the machine: the
// network is internal, and the other target is the canary's own gateway address.
class Egress : public ::testing::Test {
 protected:
  void SetUp() override {
    SBX_REQUIRE_ENGINE();
    net_ = "sbx-egress-" + std::to_string(::getpid());
    int status = 0;
    capture("docker network create --internal " + net_ + " >/dev/null", &status);
    ASSERT_EQ(status, 0) << "could not create the test network";
    canary_ = trim(capture(
        "docker run -d --rm --network " + net_ + " " + kBusyboxImage +
        " sh -c 'mkdir -p /www && echo canary-ok > /www/index.html && exec httpd -f -p 8080 -h "
        "/www'"));
    ASSERT_FALSE(canary_.empty());
    ip_ =
        trim(capture("docker inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}"
                     "{{end}}' " +
                     canary_));
    gateway_ =
        trim(capture("docker network inspect --format '{{range .IPAM.Config}}{{.Gateway}}"
                     "{{end}}' " +
                     net_));
    ASSERT_FALSE(ip_.empty());
  }
  void TearDown() override {
    if (!canary_.empty()) capture("docker rm -f " + canary_ + " >/dev/null 2>&1");
    if (!net_.empty()) capture("docker network rm " + net_ + " >/dev/null 2>&1");
  }
  // python3-minimal has no urllib.request: plain sockets, HTTP/1.0, the body on stdout.
  static std::string probe(const std::string& host) {
    return "import socket; s = socket.create_connection(('" + host +
           "', 8080), timeout=3); s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); "
           "print(s.makefile('rb').read().decode().split('\\r\\n\\r\\n', 1)[1].strip())";
  }
  std::string net_, canary_, ip_, gateway_;
};

TEST_F(Egress, ControlReachesTheCanaryTheSandboxReachesNothing) {
  // Control: same image, same probe, on the canary's network.
  std::string control;
  const auto start = std::chrono::steady_clock::now();
  do {  // the canary may take a moment to listen
    control = trim(capture("docker run --rm --network " + net_ + " " + kPythonImage +
                           " python3 -c \"" + probe(ip_) + "\" 2>/dev/null"));
  } while (control != "canary-ok" && std::chrono::steady_clock::now() - start < 20s);
  ASSERT_EQ(control, "canary-ok") << "the control container did not reach the canary: the proof "
                                     "would prove nothing";

  auto sb = sandboxio::sync::Sandbox::create(kDsn);
  auto r = sb.run({"python3", "-c", probe(ip_)});
  EXPECT_FALSE(r.ok()) << "the sandbox reached the canary: " << r.stdout_bytes;
  EXPECT_EQ(r.stdout_bytes.find("canary-ok"), std::string::npos);
  if (!gateway_.empty()) {
    auto g = sb.run({"python3", "-c", probe(gateway_)});
    EXPECT_FALSE(g.ok()) << "the sandbox reached the network's gateway";
  }
  // Only the loopback interface exists in the sandbox.
  auto dev = sb.run({"sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"});
  EXPECT_EQ(dev.stdout_bytes, "lo\n");
}

}  // namespace

namespace {

// ---- image pull from a local registry (Debian's docker-registry on loopback) ----
class LocalRegistry : public ::testing::Test {
 protected:
  void SetUp() override {
    SBX_REQUIRE_ENGINE();
    if (::access("/usr/bin/docker-registry", X_OK) != 0) {
      if (const char* req = std::getenv("SBX_REQUIRE_DOCKER"); req && std::string(req) == "1")
        FAIL() << "docker-registry is not installed (scripts/docker-env installs it)";
      GTEST_SKIP() << "docker-registry is not installed";
    }
    dir_ = trim(capture("mktemp -d"));
    port_ = sandboxio::testing::free_loopback_port();
    const std::string config = dir_ + "/config.yml";
    capture("printf 'version: 0.1\\nstorage:\\n  filesystem:\\n    rootdirectory: " + dir_ +
            "/data\\nhttp:\\n  addr: 127.0.0.1:" + std::to_string(port_) + "\\n' > " + config);
    char* args[] = {const_cast<char*>("/usr/bin/docker-registry"), const_cast<char*>("serve"),
                    const_cast<char*>(config.c_str()), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, (dir_ + "/log").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 2, 1);  // its access log too
    ASSERT_EQ(posix_spawn(&pid_, args[0], &actions, nullptr, args, environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    const auto start = std::chrono::steady_clock::now();
    int status = 1;
    while (status != 0 && std::chrono::steady_clock::now() - start < 20s) {
      capture("curl -fsS --max-time 1 http://127.0.0.1:" + std::to_string(port_) +
                  "/v2/ >/dev/null 2>&1",
              &status);
    }
    ASSERT_EQ(status, 0) << "the local registry did not answer";
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    if (!image_.empty()) capture("docker rmi -f " + image_ + " >/dev/null 2>&1");
    if (!dir_.empty()) capture("rm -rf " + dir_);
  }
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = 0;
  std::string image_;
};

TEST_F(LocalRegistry, AnAbsentImageIsPulledThenRuns) {
  image_ = "127.0.0.1:" + std::to_string(port_) + "/sandboxio-test/busybox:pull-" +
           std::to_string(::getpid());
  int status = 0;
  capture("docker tag " + std::string(kBusyboxImage) + " " + image_ + " && docker push " + image_ +
              " >/dev/null && docker rmi " + image_ + " >/dev/null",
          &status);
  ASSERT_EQ(status, 0) << "could not push the test image to the local registry";
  capture("docker image inspect " + image_ + " >/dev/null 2>&1", &status);
  ASSERT_NE(status, 0) << "the image is still present locally";

  auto sb = sandboxio::sync::Sandbox::create("docker://" + image_);
  EXPECT_EQ(sb.run({"echo", "pulled"}).stdout_bytes, "pulled\n");
  capture("docker image inspect " + image_ + " >/dev/null 2>&1", &status);
  EXPECT_EQ(status, 0) << "create() ran without pulling the image";

  // pull=never refuses instead.
  sb.kill();
  capture("docker rmi -f " + image_ + " >/dev/null 2>&1");
  try {
    (void)sandboxio::sync::Sandbox::create("docker://" + image_ + "?pull=never");
    FAIL() << "created without the image";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::ImageNotFound);
  }
}

TEST_F(LocalRegistry, AnImageNoRegistryHoldsIsImageNotFound) {
  try {
    (void)sandboxio::sync::Sandbox::create("docker://127.0.0.1:" + std::to_string(port_) +
                                           "/sandboxio-test/absent:1");
    FAIL() << "created from an image nobody has";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::ImageNotFound) << e.what();
  }
}

}  // namespace

namespace {

TEST(DockerSweep, UnstartedContainersOfGoneOwnersAreRemovedOthersKept) {
  SBX_REQUIRE_ENGINE();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a pid that is surely gone
  auto make = [&](const std::string& owner) {
    return trim(
        capture("docker create --label io.sandboxio.managed=true --label "
                "io.sandboxio.owner=" +
                owner + " " + kBusyboxImage + " true"));
  };
  const std::string orphan = make(std::string(host) + ":" + std::to_string(child));
  const std::string living = make(std::string(host) + ":1");  // init never dies
  const std::string foreign = make("another-host:" + std::to_string(child));
  ASSERT_FALSE(orphan.empty());
  {
    auto sb = sandboxio::sync::Sandbox::create(kDsn);
    const auto start = std::chrono::steady_clock::now();
    while (container_exists(orphan) && std::chrono::steady_clock::now() - start < 10s) {
    }
  }
  EXPECT_FALSE(container_exists(orphan)) << "an unstarted container of a gone owner remains";
  EXPECT_TRUE(container_exists(living)) << "the sweep removed a living owner's container";
  EXPECT_TRUE(container_exists(foreign)) << "the sweep judged another host's owner";
  capture("docker rm -f " + living + " " + foreign + " >/dev/null 2>&1");
}

}  // namespace

namespace {

// The flight recorder against the real engine: a session (create, run, stream, a 1 MiB file
// round trip, a timeout, code, kill) recorded through the sync API replays offline, with no
// daemon asked, to the same results and records byte for byte; its trace is under twice the
// bytes the session moved. Through the agent's direct socket, and through the daemon's own
// exec API (agent=off), whose HTTP exchanges are all the machine's.
class DockerFlight : public testing::TestWithParam<const char*> {};

TEST_P(DockerFlight, ARecordedSessionReplaysOfflineIdenticallyInATraceUnderTwiceItsBytes) {
  SBX_REQUIRE_ENGINE();
  namespace t = sandboxio::testing;
  const std::string dsn = std::string("docker://") + kPythonImage + GetParam();
  const auto s = t::expect_identical_replay(dsn, true, std::size_t{1} << 20);
  const std::uint64_t moved = s.recorded.bytes_in + s.recorded.bytes_out;
  EXPECT_GT(moved, std::uint64_t{2} << 20);
  EXPECT_LT(s.recorded.trace_bytes, 2 * moved) << "the trace keeps what came in, once";
  EXPECT_GT(s.requests, 5u);
}

INSTANTIATE_TEST_SUITE_P(Paths, DockerFlight, testing::Values("", "?agent=off"),
                         [](const testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param[0] ? "ExecApi" : "Agent");
                         });

}  // namespace
