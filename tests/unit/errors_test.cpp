#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <string_view>

#include "sandboxio/errors.hpp"
#include "sandboxio/result.hpp"

using sandboxio::errc;

TEST(ErrorCatalog, EveryEntryIsComplete) {
  std::set<std::string_view> names;
  for (const auto& e : sandboxio::error_catalog()) {
    EXPECT_GE(e.code, 1000);
    EXPECT_LT(e.code, 1900);
    EXPECT_EQ(e.id, "SBX_E" + std::to_string(e.code));
    EXPECT_FALSE(e.name.empty());
    EXPECT_TRUE(names.insert(e.name).second) << "duplicate name " << e.name;
    EXPECT_FALSE(e.message.empty()) << e.id;
    EXPECT_GE(e.hint.size(), 20u) << e.id << " needs a hint that tells the user what to do";
    EXPECT_EQ(e.url, SBX_ERROR_URL_BASE + std::string(e.id) + SBX_ERROR_URL_SUFFIX);
    if (std::string_view(SBX_ERROR_URL_BASE) ==
        "docs/errors/") {  // the default: a page in the repository
      EXPECT_TRUE(
          std::ifstream(std::string(SBX_DOCS_DIR) + "/errors/" + std::string(e.id) + ".md").good())
          << e.url << " is not a page of the repository";
    }
    EXPECT_EQ(e.message.back(), '.') << e.id;
  }
}

TEST(ErrorCatalog, EveryFamilyHasItsBaseCode) {
  for (int family = 1000; family <= 1800; family += 100) {
    EXPECT_NE(sandboxio::find_error(family), nullptr) << family;
  }
  EXPECT_EQ(sandboxio::find_error(999), nullptr);
  EXPECT_EQ(sandboxio::find_error(1099), nullptr);
}

TEST(ErrorCatalog, NamedCodesFromTheDesign) {
  EXPECT_EQ(static_cast<int>(errc::BackendNotFound), 1100);
  EXPECT_EQ(static_cast<int>(errc::BackendNotInstalled), 1101);
  EXPECT_EQ(static_cast<int>(errc::CreateTimeout), 1203);
  EXPECT_EQ(static_cast<int>(errc::SandboxGone), 1204);
  EXPECT_EQ(static_cast<int>(errc::ExecutionTimeout), 1302);
  EXPECT_EQ(static_cast<int>(errc::CapabilityNotSupported), 1401);
  EXPECT_EQ(static_cast<int>(errc::IsolationNotSatisfied), 1402);
  EXPECT_EQ(static_cast<int>(errc::PolicyUnenforceable), 1403);
  EXPECT_EQ(static_cast<int>(errc::RemoteProtocolViolation), 1801);
  EXPECT_EQ(static_cast<int>(errc::ConnectionLost), 1802);
  EXPECT_EQ(static_cast<int>(errc::MessageTooLarge), 1803);
}

TEST(ErrorCategory, ErrorCodesCompareAndDescribe) {
  std::error_code ec = errc::SandboxGone;
  EXPECT_EQ(ec.category().name(), std::string("sandboxio"));
  EXPECT_EQ(ec, errc::SandboxGone);
  EXPECT_NE(ec, errc::CreateTimeout);
  EXPECT_NE(ec.message().find("SBX_E1204 SandboxGone"), std::string::npos);
  EXPECT_EQ(&ec.category(), &sandboxio::sandbox_category());
  EXPECT_NE(std::error_code(4242, sandboxio::sandbox_category()).message().find("unknown"),
            std::string::npos);
}

TEST(ErrorException, CarriesCodeHintCauseAndUrl) {
  std::exception_ptr cause;
  try {
    throw std::runtime_error("socket closed");
  } catch (...) {
    cause = std::current_exception();
  }
  sandboxio::Error e(errc::ConnectionLost, "the exec stream closed after 12 bytes", {}, cause);
  EXPECT_EQ(e.code(), errc::ConnectionLost);
  EXPECT_EQ(e.sbx_code(), errc::ConnectionLost);
  EXPECT_EQ(e.hint(), sandboxio::error_info(errc::ConnectionLost).hint);
  EXPECT_EQ(e.url(), SBX_ERROR_URL_BASE + std::string("SBX_E1802") + SBX_ERROR_URL_SUFFIX);
  const std::string what = e.what();
  EXPECT_NE(what.find("SBX_E1802 ConnectionLost: the exec stream closed after 12 bytes"),
            std::string::npos);
  EXPECT_NE(what.find("Hint: "), std::string::npos);
  EXPECT_NE(what.find(SBX_ERROR_URL_BASE + std::string("SBX_E1802") + SBX_ERROR_URL_SUFFIX),
            std::string::npos);
  ASSERT_TRUE(e.cause());
  EXPECT_THROW(std::rethrow_exception(e.cause()), std::runtime_error);
  // Catchable as std::system_error, the Asio way.
  try {
    throw e;
  } catch (const std::system_error& se) {
    EXPECT_EQ(se.code(), errc::ConnectionLost);
  }
}

TEST(ErrorException, SpecificHintOverridesCatalog) {
  sandboxio::Error e(errc::BackendNotInstalled, "docker",
                     "rebuild with -DSANDBOXIO_WITH_DOCKER=ON");
  EXPECT_EQ(e.hint(), "rebuild with -DSANDBOXIO_WITH_DOCKER=ON");
}

TEST(ResultType, ValueAndProblem) {
  sandboxio::Result<int> good = 3;
  EXPECT_TRUE(good.ok());
  EXPECT_EQ(good.value(), 3);
  sandboxio::Result<int> bad = sandboxio::Problem{errc::InvalidOption, "x", ""};
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.problem().effective_hint(), sandboxio::error_info(errc::InvalidOption).hint);
  EXPECT_THROW((void)bad.value(), sandboxio::Error);
  sandboxio::Result<void> v;
  EXPECT_NO_THROW(v.value());
  sandboxio::Result<void> vbad = sandboxio::Problem{errc::SandboxGone, "gone", ""};
  EXPECT_THROW(vbad.value(), sandboxio::Error);
}

TEST(ErrorException, CatchPatternOfTheErrorPages) {
  // docs/errors/SBX_E*.md all show this pattern; it must hold for every code.
  for (const auto& info : sandboxio::error_catalog()) {
    const auto code = static_cast<errc>(info.code);
    try {
      throw sandboxio::Error(code, "example");
    } catch (const sandboxio::Error& e) {
      EXPECT_TRUE(e.code() == code) << info.id;
      EXPECT_EQ(e.hint(), info.hint);
      EXPECT_EQ(e.url(), info.url);
    }
  }
}
