#include <gtest/gtest.h>

#include <string>

#include "sandboxio/redact.hpp"

namespace {

struct Case {
  std::string name;
  std::string input;
  std::string expected;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class Redaction : public testing::TestWithParam<Case> {};

TEST_P(Redaction, RemovesSecrets) {
  sandboxio::Redactor r;
  r.add_secret("hunter2-secret-value");
  r.add_secret("s3");  // short secrets are still secrets
  EXPECT_EQ(r.redact(GetParam().input), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Table, Redaction,
    testing::Values(
        Case{"Plain", "echo hello", "echo hello"}, Case{"Empty", "", ""},
        Case{"SecretValue", "login hunter2-secret-value now", "login *** now"},
        Case{"SecretTwice", "hunter2-secret-valuehunter2-secret-value", "***"},
        Case{"ShortSecret", "as3b", "a***b"},
        Case{"Bearer", "Authorization: Bearer abc.DEF-123_x", "Authorization: Bearer ***"},
        Case{"BearerLower", "authorization: bearer tok/en+=", "authorization: bearer ***"},
        Case{"BearerWordInside", "unbearerable text", "unbearerable text"},
        Case{"E2bKey", "key e2b_0123456789abcdef0123456789ab end", "key e2b_*** end"},
        Case{"E2bShortIsNotKey", "e2b_short", "e2b_short"},
        Case{"ApiKeyAssign", "OPENAI_API_KEY=sk-abc123 python x.py",
             "OPENAI_API_KEY=*** python x.py"},
        Case{"TokenAssign", "export GITHUB_TOKEN=ghp_xyz;", "export GITHUB_TOKEN=***;"},
        Case{"TokenLowercase", "github_token=abc", "github_token=***"},
        Case{"PasswordColon", "DB_PASSWORD: pw123", "DB_PASSWORD: ***"},
        Case{"JsonStyle", R"({"E2B_API_KEY": "k-123", "n": 1})",
             R"({"E2B_API_KEY": "***", "n": 1})"},
        Case{"QuotedAssign", "MY_SECRET='a b c' next", "MY_SECRET='***' next"},
        Case{"QueryString", "?api_key=abc&x=1", "?api_key=***&x=1"},
        Case{"NotSecretName", "PATH=/usr/bin HOME=/root", "PATH=/usr/bin HOME=/root"},
        Case{"TokenizerWordNoAssign", "the TOKEN is here", "the TOKEN is here"},
        Case{"UrlCredentials", "git clone https://bob:pa55@github.com/x",
             "git clone https://bob:***@github.com/x"},
        Case{"UrlTokenUser", "https://ghp_abc@github.com/x", "https://***@github.com/x"},
        Case{"UrlNoCredentials", "see https://example.com/a@b", "see https://example.com/a@b"},
        Case{"UrlEmailInPath", "mailto x https://host/path?u=a@b.c",
             "mailto x https://host/path?u=a@b.c"},
        Case{"Several", "A_TOKEN=1 B_API_KEY=2 Bearer 3", "A_TOKEN=*** B_API_KEY=*** Bearer ***"},
        Case{"NulBytes", std::string("x\0API_TOKEN=v\0y", 15),
             std::string("x\0API_TOKEN=***\0y", 17)},
        Case{"InvalidUtf8", "\xff\xfeTOKEN=\xc3(", "\xff\xfeTOKEN=***"},
        Case{"DanglingAssign", "TOKEN=", "TOKEN="}, Case{"OnlySchemeSep", "://", "://"},
        Case{"AtOnlyUrl", "x://@h", "x://@h"}),
    [](const testing::TestParamInfo<Case>& p) { return p.param.name; });

TEST(Redaction, LongHostileInputIsLinearAndSafe) {
  // 4 MB of near-misses for every rule: must finish (ctest timeout) and not crash.
  std::string text;
  for (int i = 0; i < 200'000; ++i)
    text += "Bearer e2b_://a@TOKEN";
  sandboxio::Redactor r;
  r.add_secret("zz");
  std::string out = r.redact(text);
  EXPECT_FALSE(out.empty());
  EXPECT_EQ(out.find("zz"), std::string::npos);
}

TEST(Redaction, LongestSecretWins) {
  sandboxio::Redactor r;
  r.add_secret("abc");
  r.add_secret("abcdef");
  EXPECT_EQ(r.redact("xabcdefx"), "x***x");
}

TEST(Redaction, SecretNeverSurvivesInAnyPosition) {
  sandboxio::Redactor r;
  const std::string secret = "Zq9-secret";
  r.add_secret(secret);
  for (std::size_t pad = 0; pad < 20; ++pad) {
    const std::string text = std::string(pad, 'x') + secret + std::string(pad, 'y');
    EXPECT_EQ(r.redact(text).find(secret), std::string::npos) << pad;
  }
}

}  // namespace
