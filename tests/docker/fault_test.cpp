// Fault injection on the real Docker engine: each fault ends in a typed termination within its
// deadline, with no hang, no leaked container and no lost output that was already received.
// (A client killed by SIGKILL and a process that exhausts the sandbox's memory are in
// docker_test.cpp: DockerLease.* and DockerConfig.*.)
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "docker_support.hpp"
#include "sandboxio/sync.hpp"

namespace {

using namespace std::chrono_literals;
using sandboxio::errc;
using sandboxio::Termination;
using sandboxio::testing::kPythonImage;
using Clock = std::chrono::steady_clock;

const std::string kDsn = std::string("docker://") + kPythonImage;

bool running_in(sandboxio::sync::Sandbox& sb, const std::string& marker) {
  return sb.run({"pgrep", "-f", "--", marker}).exit_code == 0;
}

class DockerFault : public ::testing::Test {
 protected:
  void SetUp() override { SBX_REQUIRE_ENGINE(); }
  void TearDown() override {
    EXPECT_TRUE(sandboxio::testing::none_left_within(10s)) << "a container was left behind";
  }
};

TEST_F(DockerFault, ACommandThatClosesStdoutButRunsEndsAtItsTimeout) {
  auto sb = sandboxio::sync::Sandbox::create(kDsn);
  sandboxio::Command c;
  c.argv = {"sh", "-c", "echo before; exec >&- 2>&-; sleep 3172"};
  c.timeout = 1500ms;
  const auto start = Clock::now();
  const auto r = sb.run(c);
  EXPECT_EQ(r.termination, Termination::Timeout);
  EXPECT_EQ(r.stdout_bytes, "before\n");
  EXPECT_LT(Clock::now() - start, 8s);
  EXPECT_FALSE(running_in(sb, "sleep 3172"));
}

TEST_F(DockerFault, OutputWithoutNewlinesStreamsAsItComes) {
  auto sb = sandboxio::sync::Sandbox::create(kDsn);
  auto p = sb.stream({"sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' x; sleep 1; printf y"});
  std::size_t total = 0, chunks = 0;
  bool all_x = true;
  std::size_t before_end = 0;
  while (auto c = p.next()) {
    ++chunks;
    if (c->data == "y") {
      before_end = total;
      continue;
    }
    all_x = all_x && c->data.find_first_not_of('x') == std::string::npos;
    total += c->data.size();
  }
  EXPECT_TRUE(p.wait().ok());
  EXPECT_EQ(total, 20000000u);
  EXPECT_EQ(before_end, 20000000u) << "the output without newlines did not arrive before the end";
  EXPECT_TRUE(all_x);
  EXPECT_GT(chunks, 10u);
}

}  // namespace
