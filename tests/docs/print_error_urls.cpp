// Throws every error of the catalog and prints what the exception says, one per line. It is
// built with its own copy of engine/src/errors.cpp, compiled with the error-URL base the docs
// site test configures, so the links it prints are exactly the ones a user's build with that
// setting prints (tests/docs/site_test.py requests each one from the built site).
#include <iostream>

#include "sandboxio/errors.hpp"

int main() {
  int count = 0;
  for (const sandboxio::ErrorInfo& info : sandboxio::error_catalog()) {
    try {
      throw sandboxio::Error(static_cast<sandboxio::errc>(info.code), "");
    } catch (const sandboxio::Error& e) {
      std::cout << e.what() << "\n";
      ++count;
    }
  }
  return count > 0 ? 0 : 1;
}
