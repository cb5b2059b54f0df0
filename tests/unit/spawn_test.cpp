// Process endpoints: when a launcher's connection ends, nothing it started is left.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "sandboxio/spawn.hpp"

namespace {

// Whether `pid` names a process that has not ended (a zombie has ended).
bool running(const std::string& pid) {
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

// Reads from `fd` (non-blocking) until `lines` newlines have come, or 10 s have passed.
std::string read_lines(int fd, int lines) {
  std::string got;
  char buf[256];
  while (std::count(got.begin(), got.end(), '\n') < lines) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10'000) <= 0) break;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return got;
}

TEST(Spawn, EndingTheLauncherKillsEveryGenerationBelowIt) {
  // A launcher whose sandbox is three generations deep, like runsc's re-executed self and
  // its Sentry: the deepest process ignores nothing and would outlive a kill of its parents.
  sandboxio::Endpoint endpoint;
  endpoint.kind = sandboxio::Endpoint::Kind::Process;
  endpoint.argv = {"/bin/sh", "-c",
                   "sh -c 'sh -c \"sleep 300 & echo \\$!; wait\" & wait' & echo ready; wait"};
  auto spawned = sandboxio::spawn_connected(endpoint);
  ASSERT_TRUE(spawned) << spawned.problem().describe();
  const std::string said = read_lines(spawned.value().fd, 2);
  const auto ready = said.find("ready\n");
  ASSERT_NE(ready, std::string::npos) << said;
  std::string deepest = said;
  deepest.erase(ready, 6);
  deepest.erase(deepest.find('\n'));
  ASSERT_TRUE(running(deepest)) << said;

  spawned.value().process.end();
  ::close(spawned.value().fd);
  EXPECT_FALSE(running(deepest)) << "pid " << deepest << " outlived its launcher";
}

}  // namespace
