// The backend contract suite: the behaviour every backend must show, written once and run
// against any backend, including a third party's. Each case is a plain function over a
// Target; capability-dependent cases check both directions (a declared capability works, an
// undeclared one is refused with SBX_E1401).
//
//   sandboxio::contract::Target t{.name = "fake", .dsn = "fake://",
//                                 .alive_probe = [](auto& m) { return
//                                 std::vector<std::string>{"pgrep", "-f", m}; }, .egress_probe =
//                                 {"curl", "-sS", "https://example.com"}};
//   for (const auto& failure : sandboxio::contract::run_all(t)) std::cerr << failure.row << "\n";
//
// With GoogleTest, SANDBOXIO_CONTRACT_TESTS(Name, target) (sandboxio/contract_gtest.hpp)
// makes one test per case.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/link.hpp"

namespace sandboxio::contract {

struct Target {
  std::string name;
  std::string dsn;
  /// The link to drive the sandbox over; null means the POSIX link.
  std::function<std::unique_ptr<Link>()> make_link{};
  /// A command that exits 0 when a process whose command line contains `marker` is running.
  std::function<std::vector<std::string>(const std::string& marker)> alive_probe{};
  /// A command that exits 0 only if it reached the network.
  std::vector<std::string> egress_probe{};
  /// A DSN whose create() takes more than a second (for the create-timeout case). Empty means
  /// the case relies on a 1 ms create timeout, which only a backend that can never create
  /// that fast may do (fake:// can: give it "?create_delay=10s").
  std::string slow_create_dsn{};
};

/// Thrown by a case whose expectation does not hold.
class CaseFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Case {
  std::string_view row;  // "run.exit_codes"
  void (*run)(const Target&);
};

/// Every case, in a stable order.
[[nodiscard]] std::span<const Case> cases();

struct Failure {
  std::string row;
  std::string message;
};

/// Runs one case; returns the failure, if any (exceptions other than CaseFailure count as
/// failures too, with their message).
[[nodiscard]] std::optional<Failure> run_case(const Case& c, const Target& target);
/// Runs every case and returns the failures.
[[nodiscard]] std::vector<Failure> run_all(const Target& target);

}  // namespace sandboxio::contract
