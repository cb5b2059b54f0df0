// Result<T>: the engine's non-throwing return type, a value or a Problem (an SBX code with the
// specifics of this failure). value() throws sandboxio::Error, for callers that prefer exceptions.
//
//   auto r = sandboxio::parse_dsn("docker://python:3.12-slim");
//   if (!r) std::cerr << r.problem().describe();
//   sandboxio::Dsn dsn = std::move(r).value();   // throws sandboxio::Error on failure
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "sandboxio/errors.hpp"

namespace sandboxio {

/// A failure as a value: the code, a message naming the specifics, and a hint. An empty hint
/// means "the catalog's hint".
struct Problem {
  errc code = errc::ConfigurationError;
  std::string detail{};
  std::string hint{};

  /// The hint to show: this problem's own, or the catalog's.
  [[nodiscard]] std::string_view effective_hint() const noexcept;
  /// One line for humans: "SBX_E1001 InvalidDsn: <detail> Hint: <hint>".
  [[nodiscard]] std::string describe() const;
  [[nodiscard]] Error to_error() const { return Error(code, detail, hint); }
  [[noreturn]] void raise() const { throw to_error(); }
  friend bool operator==(const Problem&, const Problem&) = default;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Problem problem) : v_(std::in_place_index<1>, std::move(problem)) {}  // NOLINT

  [[nodiscard]] bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  /// The value; throws sandboxio::Error when this holds a problem.
  [[nodiscard]] T& value() & {
    if (!ok()) std::get<1>(v_).raise();
    return std::get<0>(v_);
  }
  [[nodiscard]] const T& value() const& {
    if (!ok()) std::get<1>(v_).raise();
    return std::get<0>(v_);
  }
  [[nodiscard]] T value() && {
    if (!ok()) std::get<1>(v_).raise();
    return std::move(std::get<0>(v_));
  }
  /// The problem; only valid when !ok().
  [[nodiscard]] const Problem& problem() const& { return std::get<1>(v_); }

 private:
  std::variant<T, Problem> v_{};
};

/// Result of an operation with no value.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Problem problem) : problem_(std::move(problem)), ok_(false) {}  // NOLINT
  [[nodiscard]] bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  void value() const {
    if (!ok_) problem_.raise();
  }
  [[nodiscard]] const Problem& problem() const& { return problem_; }

 private:
  Problem problem_{};
  bool ok_ = true;
};

}  // namespace sandboxio
