// GoogleTest binding of the contract suite: one test per case.
//
//   SANDBOXIO_CONTRACT_TESTS(MyBackend, (sandboxio::contract::Target{.name = "mine", .dsn =
//   "mybox://"}));
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "sandboxio/contract.hpp"

namespace sandboxio::contract {

inline std::string test_name_of(std::size_t index) {
  std::string name(cases()[index].row);
  for (char& c : name) {
    if (c == '.') c = '_';
  }
  return name;
}

}  // namespace sandboxio::contract

/// Instantiates the whole contract suite for `target_expr` (a Target, evaluated once).
#define SANDBOXIO_CONTRACT_TESTS(Name, target_expr)                            \
  class Name##Contract : public ::testing::TestWithParam<std::size_t> {        \
   protected:                                                                  \
    static const ::sandboxio::contract::Target& target() {                     \
      static const ::sandboxio::contract::Target t = (target_expr);            \
      return t;                                                                \
    }                                                                          \
  };                                                                           \
  TEST_P(Name##Contract, Case) {                                               \
    const auto& c = ::sandboxio::contract::cases()[GetParam()];                \
    if (auto failure = ::sandboxio::contract::run_case(c, target())) {         \
      FAIL() << failure->row << ": " << failure->message;                      \
    }                                                                          \
  }                                                                            \
  INSTANTIATE_TEST_SUITE_P(                                                    \
      Name, Name##Contract,                                                    \
      ::testing::Range<std::size_t>(0, ::sandboxio::contract::cases().size()), \
      [](const ::testing::TestParamInfo<std::size_t>& p) {                     \
        return ::sandboxio::contract::test_name_of(p.param);                   \
      })
