// An offline test of an agent tool, with the SbxFake fixture. The tool takes a DSN, so the
// same code runs on docker:// or e2b:// in production and on fake:// here.
#include <sandboxio/fake_gtest.hpp>

// ---- the tool under test ----
struct Answer {
  std::string text;
  bool ok = false;
};

Answer run_python_tool(const std::string& dsn, const std::string& code) {
  auto sandbox = sandboxio::sync::Sandbox::create(dsn);
  sandbox.write_file("/tmp/main.py", code);
  sandboxio::Command command;
  command.argv = {"python3", "/tmp/main.py"};
  command.timeout = std::chrono::seconds(10);
  const auto result = sandbox.run(command);
  return {result.ok() ? result.stdout_bytes : result.stderr_bytes, result.ok()};
}

// ---- its tests ----
class PythonToolTest : public sandboxio::testing::SbxFake {};

TEST_F(PythonToolTest, ReturnsStdoutOnSuccess) {
  world->on({"python3", "/tmp/main.py"}, {.stdout_bytes = "42\n"});
  const Answer a = run_python_tool(dsn(), "print(6 * 7)");
  EXPECT_TRUE(a.ok);
  EXPECT_EQ(a.text, "42\n");
}

TEST_F(PythonToolTest, ReturnsStderrOnFailure) {
  world->on({"python3", "/tmp/main.py"}, {.stderr_bytes = "NameError: x\n", .exit_code = 1});
  const Answer a = run_python_tool(dsn(), "print(x)");
  EXPECT_FALSE(a.ok);
  EXPECT_EQ(a.text, "NameError: x\n");
}

TEST_F(PythonToolTest, WritesTheCodeThenRunsItWithNoNetwork) {
  world->on({"python3", "/tmp/main.py"}, {});
  (void)run_python_tool(dsn(), "print(1)");
  const auto log = calls();
  ASSERT_EQ(log.size(), 4u);  // create, write_file, run, kill
  EXPECT_EQ(log[1].operation, sandboxio::Operation::WriteFile);
  EXPECT_EQ(log[1].path, "/tmp/main.py");
  EXPECT_EQ(log[2].argv, (std::vector<std::string>{"python3", "/tmp/main.py"}));
  EXPECT_TRUE(log[2].network.denies_all());
  EXPECT_TRUE(world->live_sandboxes().empty());  // the tool cleaned up after itself
}
