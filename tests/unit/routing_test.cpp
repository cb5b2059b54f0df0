// The routing file: the samples in docs/ parse, routes resolve first-match, and every malformed
// file gives SBX_E1005 with the line and column of the fault.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sandboxio/routing.hpp"

namespace {

using sandboxio::RoutingTable;

const char* kSample = R"(default_class: standard
classes:
  standard:
    backend: docker://python:3.12-slim
    min_tier: container
    network: deny
    resources: {cpus: 1.5, memory: 512MiB, pids: 128}
    lifetime: 10m
  untrusted:
    backend: e2b://code-interpreter-v1
    min_tier: microvm
  open:
    backend: fake://
    network: [pypi.org, files.pythonhosted.org]
routes:
  - {tool: run_code, tenant: "*", class: untrusted}
  - {tool: "*", tenant: ci, class: open}
)";

TEST(Routing, ParsesClassesAndRoutesFirstMatchWins) {
  auto t = RoutingTable::parse(kSample);
  ASSERT_TRUE(t) << t.problem().detail;
  const RoutingTable& table = t.value();
  EXPECT_EQ(table.route_for("run_code", "ci").name, "untrusted");  // first match wins
  EXPECT_EQ(table.route_for("write_file", "ci").name, "open");
  EXPECT_EQ(table.route_for("write_file", "acme").name, "standard");
  const auto& std_class = table.default_class();
  EXPECT_EQ(std_class.resources.memory_bytes, 512ULL << 20);
  EXPECT_EQ(std_class.resources.cpus, 1.5);
  EXPECT_EQ(std_class.resources.pids, 128u);
  EXPECT_EQ(std_class.lifetime, std::chrono::minutes(10));
  const auto o = table.route_for("run_code", "x").create_options();
  ASSERT_TRUE(o.require_isolation);
  EXPECT_EQ(o.require_isolation->value(), sandboxio::IsolationTier::Microvm);
  EXPECT_EQ(table.route_for("x", "ci").network.allow.size(), 2u);
}

struct Bad {
  const char* yaml;
  int line;
  const char* says;
};

TEST(Routing, MalformedFilesNameLineAndColumn) {
  const Bad cases[] = {
      {"classes:\n  a: {backend: fake://}\n", 1, "default_class is mandatory"},
      {"default_class: b\nclasses:\n  a: {backend: \"fake://\"}\n", 1, "is not a class"},
      {"default_class: a\nclasses:\n  a:\n    backend: fake://\n    netwrok: deny\n", 5,
       "unknown key \"netwrok\""},
      {"default_class: a\nclasses:\n  a:\n    backend: \"not a dsn\"\n", 4, "DSN"},
      {"default_class: a\nclasses:\n  a:\n    backend: fake://\n    lifetime: 3d\n", 5, "lifetime"},
      {"default_class: a\nclasses:\n  a:\n    backend: fake://\n    resources: {memory: 12XB}\n", 5,
       "memory unit"},
      {"default_class: a\nclasses:\n  a: {backend: \"fake://\"}\nroutes:\n  - {tool: x, class: "
       "nope}\n",
       5, "not defined"},
      {"default_class: a\nclasses:\n  a: {backend: \"fake://\"\n", 4, ""},  // YAML syntax
      {"default_class: a\nclasses:\n  a:\n    backend: fake://\n    min_tier: vm\n", 5, "min_tier"},
      {"- just\n- a list\n", 1, "mapping"},
  };
  for (const Bad& b : cases) {
    auto t = RoutingTable::parse(b.yaml, "r.yaml");
    ASSERT_FALSE(t) << b.yaml;
    const auto& p = t.problem();
    EXPECT_EQ(p.code, sandboxio::errc::InvalidRoutingFile);
    EXPECT_NE(p.detail.find("r.yaml:" + std::to_string(b.line) + ":"), std::string::npos)
        << "expected line " << b.line << " in: " << p.detail;
    EXPECT_NE(p.detail.find(b.says), std::string::npos) << p.detail;
  }
}

TEST(Routing, LoadOfAMissingFileIsACodedError) {
  try {
    (void)RoutingTable::load("/nonexistent/sandboxio-routing.yaml");
    FAIL();
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::InvalidRoutingFile);
  }
}

// Every ```yaml block in docs/ that has a default_class is a routing sample: it must parse.
TEST(Routing, EverySampleInTheDocsParses) {
  int samples = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(SBX_DOCS_DIR)) {
    if (entry.path().extension() != ".md") continue;
    std::ifstream in(entry.path());
    std::string line, block;
    bool inside = false;
    int line_no = 0, start = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (!inside && line.rfind("```yaml", 0) == 0) {
        inside = true;
        block.clear();
        start = line_no;
        continue;
      }
      if (inside && line.rfind("```", 0) == 0) {
        inside = false;
        if (block.find("default_class") == std::string::npos) continue;
        ++samples;
        auto t = RoutingTable::parse(block, entry.path().string());
        EXPECT_TRUE(t) << entry.path() << ":" << start << ": " << t.problem().detail;
        continue;
      }
      if (inside) block += line + "\n";
    }
  }
  EXPECT_GE(samples, 1) << "no routing sample found under docs/";
}

}  // namespace
