#include <gtest/gtest.h>

#include "sandboxio/capabilities.hpp"
#include "sandboxio/create_options.hpp"
#include "sandboxio/duration.hpp"
#include "sandboxio/exec_result.hpp"
#include "sandboxio/file_info.hpp"
#include "sandboxio/isolation.hpp"
#include "sandboxio/managed_sandbox.hpp"

using sandboxio::Capability;
using sandboxio::IsolationTier;

TEST(IsolationTier, EveryTierIsRankedTenApart) {
  const IsolationTier tiers[] = {IsolationTier::Unknown, IsolationTier::Container,
                                 IsolationTier::Gvisor, IsolationTier::Microvm};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(tiers[i].rank(), i * 10);
    EXPECT_EQ(IsolationTier::parse(tiers[i].name()), tiers[i]);
  }
  EXPECT_FALSE(IsolationTier::parse("Container"));
  EXPECT_LT(IsolationTier(IsolationTier::Container), IsolationTier(IsolationTier::Microvm));
}

TEST(IsolationTier, Satisfies) {
  IsolationTier container = IsolationTier::Container;
  EXPECT_TRUE(container.satisfies(IsolationTier::Container));
  EXPECT_FALSE(container.satisfies(IsolationTier::Gvisor));
  EXPECT_FALSE(container.satisfies(IsolationTier::Microvm));
  EXPECT_TRUE(IsolationTier(IsolationTier::Microvm).satisfies(IsolationTier::Container));
  // Unknown satisfies nothing, not even "no requirement".
  EXPECT_FALSE(IsolationTier(IsolationTier::Unknown).satisfies(IsolationTier::Unknown));
  EXPECT_FALSE(IsolationTier(IsolationTier::Unknown).satisfies(IsolationTier::Container));
  EXPECT_TRUE(container.satisfies(IsolationTier::Unknown));
}

TEST(Capabilities, SetOperationsAndNames) {
  sandboxio::CapabilitySet caps{Capability::Filesystem, Capability::Streaming};
  EXPECT_TRUE(caps.contains(Capability::Filesystem));
  EXPECT_FALSE(caps.contains(Capability::StatefulCode));
  caps.erase(Capability::Filesystem);
  EXPECT_EQ(caps, (sandboxio::CapabilitySet{Capability::Streaming}));
  for (Capability c : sandboxio::kAllCapabilities) {
    EXPECT_TRUE(sandboxio::CapabilitySet::all().contains(c));
    EXPECT_EQ(sandboxio::parse_capability(sandboxio::to_string(c)), c);
  }
  EXPECT_FALSE(sandboxio::parse_capability("teleport"));
}

TEST(NetworkPolicy, DenyByDefault) {
  sandboxio::NetworkPolicy p;
  EXPECT_TRUE(p.denies_all());
  EXPECT_FALSE(p.allows("example.com"));
  EXPECT_EQ(p.describe(), "deny-all");
  EXPECT_EQ(p, sandboxio::NetworkPolicy::deny_all());
}

TEST(NetworkPolicy, AllowListMatching) {
  auto p = sandboxio::NetworkPolicy::allowing({"pypi.org", "*.pythonhosted.org"});
  EXPECT_TRUE(p.allows("pypi.org"));
  EXPECT_TRUE(p.allows("PyPI.org"));
  EXPECT_FALSE(p.allows("evil-pypi.org"));
  EXPECT_FALSE(p.allows("pypi.org.evil.com"));
  EXPECT_TRUE(p.allows("files.pythonhosted.org"));
  EXPECT_FALSE(p.allows("pythonhosted.org"));  // the wildcard means sub-domains only
  EXPECT_TRUE(p.validate().ok());
  for (const char* bad : {"", "*", "*.", "a..b", "exa mple.com", "http://x.com", "x.com/path"}) {
    EXPECT_FALSE(sandboxio::NetworkPolicy::allowing({bad}).validate().ok()) << bad;
  }
}

TEST(Resources, Validation) {
  EXPECT_TRUE(sandboxio::Resources{}.validate().ok());
  EXPECT_TRUE(sandboxio::Resources{}.empty());
  sandboxio::Resources ok{.cpus = 1.5, .memory_bytes = 512ULL << 20, .pids = 128, .disk_bytes = {}};
  EXPECT_TRUE(ok.validate().ok());
  EXPECT_FALSE((sandboxio::Resources{.cpus = 0.0}).validate().ok());
  EXPECT_FALSE((sandboxio::Resources{.cpus = -1.0}).validate().ok());
  EXPECT_FALSE((sandboxio::Resources{.memory_bytes = 1024}).validate().ok());
  EXPECT_FALSE((sandboxio::Resources{.pids = 1}).validate().ok());
}

TEST(CreateOptions, DefaultsAreSafeAndValid) {
  sandboxio::CreateOptions o;
  EXPECT_TRUE(o.validate().ok());
  EXPECT_TRUE(o.network.denies_all());
  EXPECT_EQ(o.lifetime, std::chrono::seconds(600));
  EXPECT_FALSE(o.audit.capture_commands);
  EXPECT_FALSE(o.outlive_owner);
  EXPECT_EQ(o, sandboxio::CreateOptions{});
}

TEST(CreateOptions, RefusesBadValues) {
  auto check_bad = [](auto mutate) {
    sandboxio::CreateOptions o;
    mutate(o);
    auto r = o.validate();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.problem().code, sandboxio::errc::InvalidCreateOptions);
  };
  check_bad([](auto& o) { o.lifetime = std::chrono::seconds(0); });
  check_bad([](auto& o) { o.lifetime = std::chrono::hours(25); });
  check_bad([](auto& o) { o.workdir = "relative/dir"; });
  check_bad([](auto& o) { o.labels["io.sandboxio.owner"] = "me"; });
  check_bad([](auto& o) { o.env.set("1BAD", "x"); });
  check_bad([](auto& o) { o.env.set("A=B", "x"); });
  check_bad([](auto& o) { o.env.set("OK", std::string("a\0b", 3)); });
  check_bad([](auto& o) { o.network.allow = {"not a host"}; });
  check_bad([](auto& o) { o.resources.pids = 2; });
}

TEST(Env, SecretMarkingSticks) {
  sandboxio::Env env;
  env.set("A", "1");
  env.set_secret("KEY", "k1");
  env.set("KEY", "k2");  // replacing a secret keeps it secret
  ASSERT_NE(env.find("KEY"), nullptr);
  EXPECT_TRUE(env.find("KEY")->secret);
  EXPECT_EQ(env.find("KEY")->value, "k2");
  EXPECT_EQ(env.secret_values(), std::vector<std::string>{"k2"});
  EXPECT_EQ(env.vars().size(), 2u);
}

TEST(ExecResult, OkOnlyForExitZero) {
  sandboxio::ExecResult r;
  r.exit_code = 0;
  EXPECT_TRUE(r.ok());
  r.termination = sandboxio::Termination::Timeout;
  EXPECT_FALSE(r.ok());
  sandboxio::ExecResult killed{
      .exit_code = 137, .termination = sandboxio::Termination::Signalled, .signal = 9};
  EXPECT_FALSE(killed.ok());
  EXPECT_EQ(sandboxio::to_string(sandboxio::Termination::OutOfMemory), "out_of_memory");
  sandboxio::ExecResult same = killed;
  EXPECT_EQ(same, killed);
  same.stdout_bytes = std::string("\0", 1);
  EXPECT_NE(same, killed);
}

TEST(ManagedSandbox, Expiry) {
  sandboxio::ManagedSandbox s{
      .backend = "docker", .id = "abc", .created_unix = 1000, .lifetime = std::chrono::seconds(60)};
  EXPECT_FALSE(s.expired_at(1059));
  EXPECT_TRUE(s.expired_at(1060));
}

TEST(Duration, ParseAndFormat) {
  using std::chrono::milliseconds;
  EXPECT_EQ(sandboxio::parse_duration("500ms").value(), milliseconds(500));
  EXPECT_EQ(sandboxio::parse_duration("5").value(), milliseconds(5000));
  EXPECT_EQ(sandboxio::parse_duration("2m").value(), milliseconds(120000));
  EXPECT_EQ(sandboxio::parse_duration("1h").value(), milliseconds(3600000));
  for (const char* bad : {"", "s", "5x", "-5s", "1.5s", "99999999999999999999", "721h", " 5s"}) {
    EXPECT_FALSE(sandboxio::parse_duration(bad).ok()) << bad;
  }
  EXPECT_EQ(sandboxio::format_duration(std::chrono::milliseconds(250)), "250ms");
  EXPECT_EQ(sandboxio::format_duration(std::chrono::milliseconds(1500)), "1.5s");
  EXPECT_EQ(sandboxio::format_duration(std::chrono::minutes(2)), "2m");
}
