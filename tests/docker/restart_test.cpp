// Fault injection: dockerd killed (SIGKILL) in the middle of an exec, then started again. The
// command ends with a coded error or a typed termination by its deadline, the output already
// received is kept, nothing hangs, and once the engine is back nothing is left behind. Runs
// alone (RUN_SERIAL): every other Docker test would see the engine vanish.
#include <gtest/gtest.h>
#include <signal.h>

#include "docker_support.hpp"
#include "sandboxio/sync.hpp"

namespace {

using namespace std::chrono_literals;
using sandboxio::errc;
using Clock = std::chrono::steady_clock;

TEST(DockerRestart, DockerdKilledMidExecThenStartedAgain) {
  SBX_REQUIRE_ENGINE();
  const std::string dsn = std::string("docker://") + sandboxio::testing::kPythonImage;
  std::string id;
  {
    auto sb = sandboxio::sync::Sandbox::create(dsn);
    id = sb.id();
    sandboxio::Command c;
    c.argv = {"sh", "-c", "echo first; sleep 3181"};
    c.timeout = 10s;
    auto p = sb.stream(c);
    auto chunk = p.next();
    ASSERT_TRUE(chunk.has_value());
    EXPECT_EQ(chunk->data, "first\n");

    const std::string pid = sandboxio::testing::capture("pidof dockerd");
    ASSERT_FALSE(pid.empty()) << "no dockerd process to kill";
    const auto killed_at = Clock::now();
    ASSERT_EQ(::kill(std::stoi(pid), SIGKILL), 0);

    std::string rest;
    try {
      while (auto more = p.next())
        rest += more->data;
      const auto r = p.wait();
      EXPECT_TRUE(r.termination == sandboxio::Termination::Timeout ||
                  r.termination == sandboxio::Termination::SandboxGone)
          << "ended as " << to_string(r.termination);
      std::printf("the exec ended as %s\n", std::string(to_string(r.termination)).c_str());
    } catch (const sandboxio::Error& e) {
      EXPECT_TRUE(e.code() == errc::BackendUnavailable || e.code() == errc::ConnectionLost ||
                  e.code() == errc::SandboxGone)
          << e.what();
      std::printf("the exec ended with %s\n", e.what());
    }
    EXPECT_LT(Clock::now() - killed_at, c.timeout + 10s) << "the command outlived its deadline";
    EXPECT_TRUE(rest.empty()) << rest;

    // The engine comes back (scripts/docker-env starts it with the same flags).
    int status = 0;
    sandboxio::testing::capture(std::string(SBX_SOURCE_DIR) + "/scripts/docker-env >&2", &status);
    ASSERT_EQ(status, 0) << "dockerd did not start again";
    // The sandbox either still works or says it is gone; it never hangs.
    try {
      const auto r = sb.run({"true"});
      std::printf("after the restart, run() ended as %s\n",
                  std::string(to_string(r.termination)).c_str());
    } catch (const sandboxio::Error& e) {
      EXPECT_TRUE(e.code() == errc::SandboxGone || e.code() == errc::BackendUnavailable)
          << e.what();
      std::printf("after the restart, run() failed with %s\n", e.what());
    }
  }  // the handle's teardown removes what is left
  if (!sandboxio::testing::none_left_within(30s)) {
    // What the engine says about it, and what its log says (scripts/docker-env writes the log).
    ADD_FAILURE() << "container " << id << " was left behind:\n"
                  << sandboxio::testing::capture(
                         "docker inspect --format '{{.State.Status}} {{.State.Error}}' " + id +
                         " 2>&1; grep " + id.substr(0, 12) +
                         " /var/log/sandboxio-dockerd.log 2>/dev/null | tail -20");
  }
}

}  // namespace
