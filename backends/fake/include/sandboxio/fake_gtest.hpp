// SbxFake: a GoogleTest fixture for offline tests of your own agent tools. Each test gets its
// own fake World (sandboxes, scripted answers, call log); pass dsn() to the code under test.
//
//   class MyToolTest : public sandboxio::testing::SbxFake {};
//   TEST_F(MyToolTest, CountsLines) {
//     world->on({"wc", "-l", "/tmp/in"}, {.stdout_bytes = "3\n"});
//     EXPECT_EQ(my_tool(dsn()), 3);
//     EXPECT_EQ(calls().back().argv[0], "wc");
//   }
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "sandboxio/fake.hpp"
#include "sandboxio/sync.hpp"

namespace sandboxio::testing {

class SbxFake : public ::testing::Test {
 protected:
  /// This test's world. Set its profile (tier, capabilities) before creating sandboxes.
  std::shared_ptr<fake::World> world = fake::World::create();

  /// The DSN that names this test's world.
  [[nodiscard]] std::string dsn() const { return world->dsn(); }
  /// A sandbox in this test's world.
  [[nodiscard]] sync::Sandbox sandbox(CreateOptions options = {}) const {
    return sync::Sandbox::create(dsn(), std::move(options));
  }
  /// Every call the code under test made.
  [[nodiscard]] std::vector<fake::Call> calls() const { return world->calls(); }

  void TearDown() override {
    // Nothing the code under test created may outlive the test, unless it detached on purpose.
    EXPECT_EQ(world->running_processes(), 0u) << "processes still running at the end of the test";
  }
};

}  // namespace sandboxio::testing
