// A recorded docker:// session replays offline, with no daemon, at every split size, and gives
// the same transcript (results, outputs, error codes and operation records) byte for byte.
// SBX_REPLAY_LOG names another recording (CI records a fresh one against its engine first).
#include <gtest/gtest.h>

#include <cstdlib>

#include "scenario.hpp"
#include "session_log.hpp"

namespace sandboxio::replay {
namespace {

std::shared_ptr<const Log> recording() {
  const char* env = std::getenv("SBX_REPLAY_LOG");
  return Log::load(env && *env ? env : SBX_REPLAY_FIXTURE);
}

TEST(Replay, ARecordedDockerSessionReplaysAtEverySplitSize) {
  const auto log = recording();
  ASSERT_FALSE(log->transcript.empty());
  set_identity(log->session, log->owner);
  for (std::size_t split : {0, 1, 2, 3, 7, 64, 1000, 65536}) {
    std::string replayed;
    try {
      replayed = docker_scenario(replay_link(log, split));
    } catch (const std::exception& e) {
      FAIL() << "split " << split << ": " << e.what();
    }
    EXPECT_EQ(replayed, log->transcript) << "split " << split;
  }
}

TEST(Replay, TheRecordingCoversTheOperationsItClaims) {
  const auto log = recording();
  for (const char* want :
       {"create tier=container", "run exit=3 termination=exited stdout=[out\n]",
        "termination=timeout", "read_back_equal=yes", "SBX_E1701", "after exit=0"}) {
    EXPECT_NE(log->transcript.find(want), std::string::npos) << want << "\n" << log->transcript;
  }
}

TEST(Replay, AMachineThatAsksForSomethingElseIsCaught) {
  auto log = std::make_shared<Log>(*recording());
  for (auto& e : log->entries) {
    if (e.tag == 'b' && e.data.starts_with("HTTP/1.1 201") &&
        e.data.find("\"Id\"") != std::string::npos) {  // the created container's id
      e.data[e.data.find("\"Id\"") + 7] ^= 1;  // another container id: other requests follow
      break;
    }
  }
  set_identity(log->session, log->owner);
  EXPECT_THROW((void)docker_scenario(replay_link(log, 0)), std::exception);
}

}  // namespace
}  // namespace sandboxio::replay
