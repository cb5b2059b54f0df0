// The fake backend's built-in shell and mini-Python: deterministic interpreters that turn a
// command into a timeline of output over virtual time. Private to backends/fake.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sandboxio/exec_result.hpp"
#include "sandboxio/network_policy.hpp"
#include "sandboxio/output.hpp"

namespace sandboxio::fake::detail {

struct Node {
  bool dir = false;
  Bytes data{};
  std::uint32_t mode = 0644;
};

/// A sandbox's file system: absolute normalised paths to nodes.
class Vfs {
 public:
  Vfs();
  [[nodiscard]] static std::string normalise(const std::string& cwd, const std::string& path);
  [[nodiscard]] const Node* get(const std::string& path) const;
  [[nodiscard]] bool parent_is_dir(const std::string& path) const;
  void put_file(const std::string& path, Bytes data, std::uint32_t mode = 0644);
  void make_dir(const std::string& path);
  void make_dirs(const std::string& path);
  /// Removes a node and, when recursive, everything below it. False when it does not exist.
  bool remove(const std::string& path, bool recursive);
  [[nodiscard]] bool has_children(const std::string& path) const;
  [[nodiscard]] std::vector<std::string> children(const std::string& path) const;
  [[nodiscard]] std::uint64_t total_bytes() const;

 private:
  std::map<std::string, Node> nodes_;
};

struct Step {
  std::chrono::nanoseconds at{0};  // virtual time since the command started
  StreamKind stream = StreamKind::Stdout;
  Bytes data{};
};

/// A background child started with `&`: it runs until `ends_at` unless killed.
struct Background {
  std::chrono::nanoseconds ends_at{0};
  std::string what{};  // its command line, for pgrep
};

struct Outcome {
  std::vector<Step> steps{};
  std::chrono::nanoseconds duration{0};
  int exit_code = 0;
  std::optional<int> signal{};
  std::vector<Background> background{};
  std::vector<std::string> network_attempts{};
  std::optional<CodeError> code_error{};  // run_python: the exception it raised
};

struct ShellEnv {
  Vfs* fs = nullptr;
  std::map<std::string, std::string> env{};
  std::string cwd = "/home/user";
  const NetworkPolicy* policy = nullptr;
  int pid = 100;
  Bytes stdin_data{};
  std::map<std::string, std::string>* python_vars = nullptr;  // a stateful code context
  /// pids of the live processes whose command line contains a pattern (for pgrep -f).
  std::function<std::vector<int>(const std::string&)> find_processes{};
};

/// Runs argv as an exec would (no shell unless argv[0] is one).
[[nodiscard]] Outcome run_argv(ShellEnv& env, const std::vector<std::string>& argv);
/// Runs Python code (the subset described in fake.hpp); `result` gets the value of a final
/// bare expression, as a notebook would show it.
[[nodiscard]] Outcome run_python(ShellEnv& env, const std::string& code,
                                 std::optional<std::string>* result = nullptr);

}  // namespace sandboxio::fake::detail
