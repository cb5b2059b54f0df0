#include <gtest/gtest.h>

#include <string>

#include "sandboxio/dsn.hpp"

using sandboxio::errc;
using sandboxio::parse_dsn;

namespace {

struct Good {
  std::string text;
  std::string scheme;
  std::string target;
  std::vector<sandboxio::Dsn::Option> options;
};

void PrintTo(const Good& c, std::ostream* os) {
  *os << c.text;
}

class DsnGood : public testing::TestWithParam<Good> {};

TEST_P(DsnGood, Parses) {
  const Good& g = GetParam();
  auto r = parse_dsn(g.text);
  ASSERT_TRUE(r.ok()) << r.problem().describe();
  EXPECT_EQ(r.value().scheme, g.scheme);
  EXPECT_EQ(r.value().target, g.target);
  EXPECT_EQ(r.value().options, g.options);
  // The canonical text parses back to the same value.
  auto again = parse_dsn(r.value().to_string());
  ASSERT_TRUE(again.ok()) << r.value().to_string();
  EXPECT_EQ(again.value(), r.value());
}

INSTANTIATE_TEST_SUITE_P(
    Table, DsnGood,
    testing::Values(
        Good{"fake://", "fake", "", {}},
        Good{"docker://python:3.12-slim", "docker", "python:3.12-slim", {}},
        Good{"docker://registry:5000/team/img:1.0", "docker", "registry:5000/team/img:1.0", {}},
        Good{"docker://img?pull=never&user=1000",
             "docker",
             "img",
             {{"pull", "never"}, {"user", "1000"}}},
        Good{"e2b://base", "e2b", "base", {}},
        Good{"docker://img?readonly", "docker", "img", {{"readonly", "true"}}},
        Good{"fake://a%20b", "fake", "a b", {}},
        Good{"fake://x?v=a%26b%3Dc", "fake", "x", {{"v", "a&b=c"}}},
        Good{"fake://x?v=1+2", "fake", "x", {{"v", "1+2"}}},
        Good{"fake://caf%C3%A9", "fake", "caf\xC3\xA9", {}},
        Good{"fake://\xE2\x9C\x93", "fake", "\xE2\x9C\x93", {}},
        Good{"my-box+v2.x://t", "my-box+v2.x", "t", {}},
        Good{"fake://x?empty=", "fake", "x", {{"empty", ""}}}));

struct Bad {
  std::string name;
  std::string text;
  errc code;
  std::string detail_contains;
};

void PrintTo(const Bad& c, std::ostream* os) {
  *os << c.name;
}

class DsnBad : public testing::TestWithParam<Bad> {};

TEST_P(DsnBad, RefusedWithCodeAndHint) {
  const Bad& b = GetParam();
  auto r = parse_dsn(b.text);
  ASSERT_FALSE(r.ok()) << "accepted: " << b.text;
  EXPECT_EQ(r.problem().code, b.code) << r.problem().describe();
  EXPECT_NE(r.problem().detail.find(b.detail_contains), std::string::npos)
      << r.problem().describe();
  EXPECT_FALSE(r.problem().effective_hint().empty());
  // The message is printable: hostile bytes never reach the terminal raw.
  for (char c : r.problem().describe()) {
    EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 || c == '\n') << r.problem().describe();
  }
}

const std::string kLong(sandboxio::kMaxDsnLength + 1, 'a');

INSTANTIATE_TEST_SUITE_P(
    Table, DsnBad,
    testing::Values(
        Bad{"Empty", "", errc::InvalidDsn, "empty"},
        Bad{"NoSeparator", "docker", errc::InvalidDsn, "://"},
        Bad{"OneSlash", "docker:/img", errc::InvalidDsn, "://"},
        Bad{"EmptyScheme", "://img", errc::InvalidDsn, "scheme"},
        Bad{"UpperScheme", "Docker://img", errc::InvalidDsn, "lowercase"},
        Bad{"DigitScheme", "9p://x", errc::InvalidDsn, "lowercase"},
        Bad{"SpaceInScheme", "doc ker://x", errc::InvalidDsn, "scheme"},
        Bad{"TooLong", "fake://" + kLong, errc::InvalidDsn, "limit"},
        Bad{"VeryLong", std::string(1 << 20, 'x'), errc::InvalidDsn, "limit"},
        Bad{"NulInTarget", std::string("fake://a\0b", 10), errc::InvalidDsn, "NUL"},
        Bad{"NulInScheme", std::string("fa\0ke://", 8), errc::InvalidDsn, "scheme"},
        Bad{"EscapedNul", "fake://a%00b", errc::InvalidDsn, "NUL"},
        Bad{"EscapedControl", "fake://a%0Ab", errc::InvalidDsn, "control"},
        Bad{"RawNewline", "fake://a\nb", errc::InvalidDsn, "byte 0x0A"},
        Bad{"RawSpace", "fake://a b", errc::InvalidDsn, "byte 0x20"},
        Bad{"BadEscapeHex", "fake://a%zz", errc::InvalidDsn, "bad percent escape"},
        Bad{"TruncatedEscape", "fake://a%4", errc::InvalidDsn, "truncated"},
        Bad{"TruncatedEscapeEnd", "fake://a%", errc::InvalidDsn, "truncated"},
        Bad{"BadEscapeInValue", "fake://x?a=%G1", errc::InvalidDsn, "bad percent escape"},
        Bad{"Latin1Byte", "fake://caf\xE9", errc::InvalidDsn, "UTF-8"},
        Bad{"EscapedInvalidUtf8", "fake://%FF%FE", errc::InvalidDsn, "UTF-8"},
        Bad{"OverlongUtf8", "fake://%C0%AF", errc::InvalidDsn, "UTF-8"},
        Bad{"Surrogate", "fake://%ED%A0%80", errc::InvalidDsn, "UTF-8"},
        Bad{"InvalidUtf8InValue", "fake://x?a=\xC3", errc::InvalidDsn, "UTF-8"},
        Bad{"Fragment", "fake://x#frag", errc::InvalidDsn, "'#'"},
        Bad{"TrailingQuestion", "fake://x?", errc::InvalidDsn, "'?'"},
        Bad{"DuplicateOption", "fake://x?a=1&a=2", errc::InvalidOption, "twice"},
        Bad{"EmptyOption", "fake://x?a=1&&b=2", errc::InvalidOption, "empty option"},
        Bad{"TrailingAmp", "fake://x?a=1&", errc::InvalidOption, "empty option"},
        Bad{"NamelessOption", "fake://x?=1", errc::InvalidOption, "no name"},
        Bad{"UpperOptionName", "fake://x?Pull=1", errc::InvalidOption, "option name"},
        Bad{"EscapedOptionName", "fake://x?a%41=1", errc::InvalidOption, "option name"}),
    [](const testing::TestParamInfo<Bad>& p) { return p.param.name; });

TEST(Dsn, TooManyOptionsRefused) {
  std::string text = "fake://x?";
  for (std::size_t i = 0; i <= sandboxio::kMaxDsnOptions; ++i) {
    text += (i ? "&o" : "o") + std::to_string(i) + "=1";
  }
  auto r = parse_dsn(text);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.problem().code, errc::InvalidOption);
}

TEST(Dsn, TypedOptions) {
  auto dsn = parse_dsn("docker://img?pull=never&readonly=yes&pids=64&grace=250ms").value();
  auto typed = dsn.typed({{"pull", sandboxio::OptionType::String},
                          {"readonly", sandboxio::OptionType::Bool},
                          {"pids", sandboxio::OptionType::Int},
                          {"grace", sandboxio::OptionType::Duration},
                          {"user", sandboxio::OptionType::String}});
  ASSERT_TRUE(typed.ok()) << typed.problem().describe();
  EXPECT_EQ(typed.value().string("pull"), "never");
  EXPECT_TRUE(typed.value().boolean("readonly"));
  EXPECT_EQ(typed.value().integer("pids"), 64);
  EXPECT_EQ(typed.value().duration("grace"), std::chrono::milliseconds(250));
  EXPECT_FALSE(typed.value().has("user"));
  EXPECT_EQ(typed.value().string("user", "root"), "root");
}

TEST(Dsn, UnknownOptionListsKnownOnes) {
  auto dsn = parse_dsn("docker://img?pul=never").value();
  auto typed =
      dsn.typed({{"pull", sandboxio::OptionType::String}, {"user", sandboxio::OptionType::String}});
  ASSERT_FALSE(typed.ok());
  EXPECT_EQ(typed.problem().code, errc::InvalidOption);
  EXPECT_NE(typed.problem().detail.find("pul"), std::string::npos);
  EXPECT_NE(typed.problem().hint.find("pull, user"), std::string::npos);
}

TEST(Dsn, BadlyTypedOptionsRefused) {
  const std::pair<const char*, sandboxio::OptionType> cases[] = {
      {"fake://x?o=maybe", sandboxio::OptionType::Bool},
      {"fake://x?o=12a", sandboxio::OptionType::Int},
      {"fake://x?o=99999999999999999999999", sandboxio::OptionType::Int},
      {"fake://x?o=", sandboxio::OptionType::Int},
      {"fake://x?o=5days", sandboxio::OptionType::Duration},
      {"fake://x?o=-1s", sandboxio::OptionType::Duration},
      {"fake://x?o=99999999h", sandboxio::OptionType::Duration},
  };
  for (const auto& [text, type] : cases) {
    auto dsn = parse_dsn(text).value();
    auto typed = dsn.typed({{"o", type}});
    ASSERT_FALSE(typed.ok()) << text;
    EXPECT_EQ(typed.problem().code, errc::InvalidOption) << text;
  }
}

TEST(Dsn, ValueThrowsTheCodedError) {
  try {
    (void)parse_dsn("nope").value();
    FAIL() << "no exception";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), errc::InvalidDsn);
    EXPECT_NE(std::string(e.what()).find("SBX_E1001"), std::string::npos);
    EXPECT_FALSE(e.hint().empty());
  }
}

TEST(Dsn, EveryPrefixOfAValidDsnIsHandled) {
  // No crash and no acceptance of garbage for any truncation (cheap stand-in until the fuzzer).
  const std::string text = "docker://reg:5000/img%20x:tag?pull=never&grace=5s";
  for (std::size_t n = 0; n <= text.size(); ++n) {
    auto r = parse_dsn(text.substr(0, n));
    if (r.ok()) {
      EXPECT_FALSE(r.value().scheme.empty());
    }
  }
}

}  // namespace

namespace {

TEST(Dsn, PercentEncodeBuildsDsnsFromArbitraryValues) {
  const std::string value = std::string("a b&c=d#e%f?g/\xc3\xa9\x01", 17);
  EXPECT_EQ(sandboxio::percent_encode("python:3.12-slim", ":"), "python:3.12-slim");
  EXPECT_EQ(sandboxio::percent_encode("a b"), "a%20b");
  const std::string encoded = sandboxio::percent_encode(value);
  EXPECT_EQ(encoded.find_first_of(" &=#?"), std::string::npos);
  // Control bytes are encoded too, and the parser refuses them after decoding: values built
  // this way are exact, never silently changed.
  auto r = sandboxio::parse_dsn("fake://x?v=" + encoded);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.problem().code, errc::InvalidDsn);
  const std::string printable = value.substr(0, 16);  // without the control byte
  auto ok = sandboxio::parse_dsn("fake://" + sandboxio::percent_encode(printable) +
                                 "?v=" + sandboxio::percent_encode(printable));
  ASSERT_TRUE(ok.ok()) << ok.problem().describe();
  EXPECT_EQ(ok.value().target, printable);
  EXPECT_EQ(*ok.value().option("v"), printable);
}

}  // namespace
