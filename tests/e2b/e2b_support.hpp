// Helpers for the tests that run against the local E2B-compatible server (tests/e2b/server):
// where it listens, the DSNs that reach it, and what it holds (asked over plain HTTP with curl,
// independently of the code under test).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../docker/docker_support.hpp"
#include "sandboxio/create_options.hpp"

namespace sandboxio::testing {

inline constexpr const char* kE2bApiKey = "e2b_local_test_key";
inline constexpr const char* kTestCa = "/var/lib/sandboxio-test/tls/ca.pem";

struct E2bServer {
  int api = 0, sandbox = 0, api_tls = 0, sandbox_tls = 0;
  [[nodiscard]] bool up() const { return api != 0; }
  /// The DSN for a template over TLS (the default) or plain HTTP.
  [[nodiscard]] std::string dsn(const std::string& tmpl = "base", bool tls = true) const {
    const std::string scheme = tls ? "https" : "http";
    return "e2b://" + tmpl + "?api_url=" + scheme +
           "://127.0.0.1:" + std::to_string(tls ? api_tls : api) + "&sandbox_url=" + scheme +
           "://127.0.0.1:" + std::to_string(tls ? sandbox_tls : sandbox) +
           (tls ? std::string("&ca=") + kTestCa : "");
  }
};

/// The server the ctest fixture started (SBX_E2B_DIR/ports.json), or a zero one.
inline E2bServer e2b_server() {
  const char* dir = std::getenv("SBX_E2B_DIR");
  E2bServer s;
  if (!dir) return s;
  std::ifstream in(std::string(dir) + "/ports.json");
  std::stringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  auto port = [&](const std::string& key) {
    std::smatch m;
    const std::regex re("\"" + key + "\":([0-9]+)");
    return std::regex_search(json, m, re) ? std::stoi(m[1]) : 0;
  };
  s.api = port("api");
  s.sandbox = port("sandbox");
  s.api_tls = port("apiTls");
  s.sandbox_tls = port("sandboxTls");
  return s;
}

/// Skips loudly without the server, unless SBX_REQUIRE_DOCKER=1 (CI), where it fails. Sets
/// E2B_API_KEY for the code under test.
#define SBX_REQUIRE_E2B_SERVER()                                                            \
  do {                                                                                      \
    if (!::sandboxio::testing::e2b_server().up()) {                                         \
      const char* req = std::getenv("SBX_REQUIRE_DOCKER");                                  \
      if (req && std::string(req) == "1") FAIL() << "the local E2B server is not running";  \
      std::fprintf(stderr,                                                                  \
                   "\n*** SKIPPED: the local E2B server is not running (it needs root and " \
                   "scripts/e2b-env). ***\n\n");                                            \
      GTEST_SKIP() << "no local E2B server";                                                \
    }                                                                                       \
    ::setenv("E2B_API_KEY", ::sandboxio::testing::kE2bApiKey, 1);                           \
  } while (0)

/// The ids of the running sandboxes this process owns on the local server.
inline std::vector<std::string> my_e2b_sandboxes() {
  const E2bServer s = e2b_server();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string owner = std::string(host) + ":" + std::to_string(::getpid());
  const std::string out = capture("curl -fsS -H 'X-API-KEY: " + std::string(kE2bApiKey) +
                                  "' 'http://127.0.0.1:" + std::to_string(s.api) +
                                  "/v2/sandboxes?metadata=io.sandboxio.owner%3D" + owner + "'");
  std::vector<std::string> ids;
  const std::regex re("\"sandboxID\":\"([^\"]+)\"");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
    ids.push_back((*it)[1]);
  return ids;
}

/// The local server's test resolver for one sandbox (an extension of that server; E2B has
/// none): inside a sandbox whose metadata carries the returned label, `name` and
/// unlisted.sandboxio.test resolve to 198.18.0.1 (a benchmarking address, routed nowhere),
/// whose ports 80 and 443 lead to the canaries on this machine's loopback. Adds the label to
/// `options` and returns the address (Target::route_canary).
inline std::string route_e2b_canary(CreateOptions& options, const std::string& name, int http_port,
                                    int tls_port) {
  const std::string address = "198.18.0.1";
  std::string routes = "\"" + address + ":80\":\"127.0.0.1:" + std::to_string(http_port) + "\"";
  if (tls_port != 0)
    routes += ",\"" + address + ":443\":\"127.0.0.1:" + std::to_string(tls_port) + "\"";
  const std::string body = "{\"names\":{\"" + name + "\":\"" + address +
                           "\",\"unlisted.sandboxio.test\":\"" + address + "\"},\"routes\":{" +
                           routes + "}}";
  const std::string out = capture("curl -fsS -X POST -H 'X-API-KEY: " + std::string(kE2bApiKey) +
                                  "' -H 'Content-Type: application/json' --data '" + body +
                                  "' 'http://127.0.0.1:" + std::to_string(e2b_server().api) +
                                  "/_sandboxio/test-network'");
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("\"token\":\"([0-9a-f]+)\"")))
    throw std::runtime_error("the local E2B server took no test network: " + out);
  options.labels["sandboxio-test-network"] = m[1];
  return address;
}

inline bool no_e2b_sandbox_left_within(std::chrono::milliseconds bound = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!my_e2b_sandboxes().empty()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

}  // namespace sandboxio::testing
