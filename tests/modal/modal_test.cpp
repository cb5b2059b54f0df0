// modal:// against the local Modal-compatible server (tests/modal/server), which Modal's official
// JS SDK has proven faithful first (modal.official_sdk_flow): the contract suite through the
// blocking and the Asio transports, and what is Modal's own.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "../support/flight_session.hpp"
#include "sandboxio/contract.hpp"
#include "sandboxio/contract_gtest.hpp"
#include "sandboxio/modal.hpp"
#include "sandboxio/sync.hpp"

namespace {

using sandboxio::contract::Target;

// The local server's h2c port, from the fixture's ports.json; 0 when it is not running.
int server_port() {
  const char* dir = std::getenv("SBX_MODAL_DIR");
  if (!dir) return 0;
  std::ifstream in(std::string(dir) + "/ports.json");
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const auto at = s.find("\"grpc\":");
  return at == std::string::npos ? 0 : std::atoi(s.c_str() + at + 7);
}

// The local server's credentials, as a user's MODAL_TOKEN_ID and MODAL_TOKEN_SECRET would be,
// and no profile file of this machine's user.
const bool credentials_set = [] {
  setenv("MODAL_TOKEN_ID", "ak-local-test", 1);
  setenv("MODAL_TOKEN_SECRET", "as-local-test", 1);
  setenv("MODAL_CONFIG_PATH", "/nonexistent", 1);
  return true;
}();

// This test process's own app, so that what it counts as its sandboxes is its own while other
// test processes use the server too.
const std::string kApp = "sbx-test-" + std::to_string(::getpid());

std::string dsn(const std::string& image = "sandboxio-test/python:bookworm",
                const std::string& app = kApp) {
  return "modal://" + image + "?server_url=http://127.0.0.1:" + std::to_string(server_port()) +
         "&app=" + app;
}

std::string shell(const std::string& command) {
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[4096];
    std::size_t n = 0;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0)
      out.append(buf, n);
    pclose(p);
  }
  return out;
}

// The sandboxes the local server runs now for this process's apps: one container each,
// labelled with its id and its app.
std::vector<std::string> live_sandboxes() {
  std::vector<std::string> ids;
  std::istringstream lines(
      shell("docker ps --filter label=io.sandboxio.test.modal-sandbox "
            "--format '{{.Label \"io.sandboxio.test.modal-app\"}} "
            "{{.Label \"io.sandboxio.test.modal-sandbox\"}}' 2>/dev/null | grep -E '^(" +
            kApp + "|sbx-slow-create-" + std::to_string(::getpid()) + ") ' | cut -d' ' -f2"));
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) ids.push_back(line);
  return ids;
}

#define SBX_REQUIRE_MODAL_SERVER()                                                              \
  do {                                                                                          \
    if (server_port() == 0) {                                                                   \
      if (std::getenv("SBX_REQUIRE_DOCKER")) FAIL() << "the local Modal server is not running"; \
      GTEST_SKIP() << "*** the local Modal server is not running (ctest's modal fixture) ***";  \
    }                                                                                           \
  } while (0)

Target modal_target(std::shared_ptr<sandboxio::contract::Transport> transport) {
  Target t;
  t.name = "modal";
  t.dsn = dsn();
  t.transport = std::move(transport);
  t.alive_probe = [](const std::string& marker) {
    return std::vector<std::string>{"pgrep", "-f", "--", marker};
  };
  // Exits 0 when the sandbox has a route out; a UDP connect() sends no packet.
  t.egress_probe = {"python3", "-c",
                    "import socket; socket.socket(socket.AF_INET, "
                    "socket.SOCK_DGRAM).connect(('192.0.2.1', 9))"};
  t.live_sandboxes = live_sandboxes;
  // The local server takes three seconds to create in this app.
  t.slow_create_dsn =
      dsn("sandboxio-test/python:bookworm", "sbx-slow-create-" + std::to_string(::getpid()));
  return t;
}

class ModalContract : public ::testing::TestWithParam<std::tuple<std::string, std::size_t>> {
 protected:
  void SetUp() override { SBX_REQUIRE_MODAL_SERVER(); }
  static const Target& target(const std::string& via) {
    static const Target blocking = modal_target(sandboxio::contract::blocking_transport());
    static const Target asio = modal_target(sandboxio::contract::asio_transport());
    return via == "Blocking" ? blocking : asio;
  }
};

TEST_P(ModalContract, Case) {
  const auto& [via, index] = GetParam();
  const auto& c = sandboxio::contract::cases()[index];
  if (auto failure = sandboxio::contract::run_case(c, target(via))) {
    FAIL() << failure->row << ": " << failure->message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modal, ModalContract,
    ::testing::Combine(::testing::Values("Blocking", "Asio"),
                       ::testing::Range<std::size_t>(0, sandboxio::contract::cases().size())),
    [](const auto& param_info) {
      return std::get<0>(param_info.param) + "_" +
             sandboxio::contract::test_name_of(std::get<1>(param_info.param));
    });

// ---- what is Modal's own ----

TEST(Modal, ACommandRunsInAGvisorSandboxOnTheRouter) {
  SBX_REQUIRE_MODAL_SERVER();
  auto sb = sandboxio::sync::Sandbox::create(dsn());
  EXPECT_EQ(sb.info().tier, sandboxio::IsolationTier::Gvisor);
  auto r = sb.run({"sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.stdout_bytes, "out\n");
  EXPECT_EQ(r.stderr_bytes, "err\n");
  EXPECT_EQ(r.exit_code, 3);
  sb.kill();
}

// Modal runs every sandbox under gVisor: require_isolation up to gvisor is met, microvm is not.
TEST(Modal, RequireIsolationGvisorIsMetAndMicrovmRefused) {
  SBX_REQUIRE_MODAL_SERVER();
  sandboxio::CreateOptions o;
  o.require_isolation = sandboxio::IsolationTier::Gvisor;
  auto sb = sandboxio::sync::Sandbox::create(dsn(), o);
  EXPECT_TRUE(sb.run({"true"}).ok());
  sb.kill();
  o.require_isolation = sandboxio::IsolationTier::Microvm;
  try {
    (void)sandboxio::sync::Sandbox::create(dsn(), o);
    ADD_FAILURE() << "microvm was said to be met";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.sbx_code(), sandboxio::errc::IsolationNotSatisfied) << e.what();
  }
}

// A session recorded on modal:// (HTTP/2 and gRPC underneath) replays offline identically:
// results, file bytes and records.
TEST(Modal, ARecordedSessionReplaysIdentically) {
  SBX_REQUIRE_MODAL_SERVER();
  const auto summary = sandboxio::testing::expect_identical_replay(dsn(), true, 300 * 1024);
  EXPECT_GT(summary.inputs, 10u);
}

TEST(Modal, WithoutCredentialsCreateSaysWhichAreMissing) {
  SBX_REQUIRE_MODAL_SERVER();
  const std::string id = std::getenv("MODAL_TOKEN_ID") ? std::getenv("MODAL_TOKEN_ID") : "";
  unsetenv("MODAL_TOKEN_ID");
  try {
    (void)sandboxio::sync::Sandbox::create(dsn());
    ADD_FAILURE() << "create() without credentials succeeded";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.sbx_code(), sandboxio::errc::CredentialsMissing) << e.what();
  }
  setenv("MODAL_TOKEN_ID", id.c_str(), 1);
}

TEST(Modal, WrongCredentialsAreAnAuthenticationError) {
  SBX_REQUIRE_MODAL_SERVER();
  const std::string secret = std::getenv("MODAL_TOKEN_SECRET");
  setenv("MODAL_TOKEN_SECRET", "as-wrong", 1);
  try {
    (void)sandboxio::sync::Sandbox::create(dsn());
    ADD_FAILURE() << "create() with a wrong secret succeeded";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.sbx_code(), sandboxio::errc::AuthenticationError) << e.what();
    EXPECT_EQ(std::string(e.what()).find("as-wrong"), std::string::npos) << "the secret leaked";
  }
  setenv("MODAL_TOKEN_SECRET", secret.c_str(), 1);
}

// The control plane over TLS: the transports' TLS channel offers h2 by ALPN, the server agrees,
// and gRPC runs on it (the router, on this machine, is dialled in plaintext as the SDKs do).
TEST(Modal, OverTlsTheControlPlaneAgreesToH2ByAlpn) {
  SBX_REQUIRE_MODAL_SERVER();
  const char* dir = std::getenv("SBX_MODAL_DIR");
  std::ifstream in(std::string(dir) + "/ports.json");
  std::stringstream text;
  text << in.rdbuf();
  const auto at = text.str().find("\"grpcTls\":");
  if (at == std::string::npos) GTEST_SKIP() << "*** the local Modal server has no TLS port ***";
  const int tls_port = std::atoi(text.str().c_str() + at + 10);
  const std::string ca = "/var/lib/sandboxio-test/tls/ca.pem";
  auto sb = sandboxio::sync::Sandbox::create(
      "modal://sandboxio-test/python:bookworm?server_url=https://127.0.0.1:" +
      std::to_string(tls_port) + "&ca=" + ca);
  EXPECT_EQ(sb.run({"echo", "over tls"}).stdout_bytes, "over tls\n");
  sb.kill();
  // A server certificate the trust anchors given do not vouch for: a coded TLS error.
  try {
    (void)sandboxio::sync::Sandbox::create(
        "modal://sandboxio-test/python:bookworm?server_url=https://127.0.0.1:" +
        std::to_string(tls_port) + "&ca=/etc/ssl/certs/ca-certificates.crt");
    ADD_FAILURE() << "a server certificate outside the trust anchors was accepted";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.sbx_code(), sandboxio::errc::TlsError) << e.what();
  }
}

// doctor: the credentials named by where they came from, never shown; the control plane asked
// one free question (an id that does not exist), which proves it accepts them.
TEST(Modal, DoctorNamesTheCredentialsAndAsksTheControlPlaneForFree) {
  SBX_REQUIRE_MODAL_SERVER();
  const std::string env = "MODAL_SERVER_URL=http://127.0.0.1:" + std::to_string(server_port()) +
                          " MODAL_CONFIG_PATH=/nonexistent DOCKER_HOST=unix:///nonexistent ";
  const std::string ok =
      shell(env + "MODAL_TOKEN_ID=ak-local-test MODAL_TOKEN_SECRET=as-local-test " + SBX_CLI +
            " doctor 2>&1");
  EXPECT_NE(ok.find("modal: ok"), std::string::npos) << ok;
  EXPECT_NE(ok.find("from MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"), std::string::npos) << ok;
  EXPECT_EQ(ok.find("as-local-test"), std::string::npos) << "the secret was printed";
  const std::string bad = shell(env + "MODAL_TOKEN_ID=ak-local-test MODAL_TOKEN_SECRET=as-wrong " +
                                SBX_CLI + " doctor 2>&1");
  EXPECT_NE(bad.find("modal: FAILING"), std::string::npos) << bad;
  EXPECT_NE(bad.find("SBX_E1500"), std::string::npos) << bad;
  EXPECT_EQ(bad.find("as-wrong"), std::string::npos) << "the secret was printed";
  const std::string none =
      shell(env + "MODAL_TOKEN_ID= MODAL_TOKEN_SECRET= " + SBX_CLI + " doctor 2>&1");
  EXPECT_NE(none.find("modal: not available"), std::string::npos) << none;
  EXPECT_EQ(live_sandboxes().size(), 0u) << "doctor made a sandbox";
}

// Credentials from the active profile of the file the SDKs read, when the variables are unset.
TEST(Modal, CredentialsComeFromTheActiveProfileOfModalToml) {
  SBX_REQUIRE_MODAL_SERVER();
  const std::string file = ::testing::TempDir() + "modal.toml";
  std::ofstream(file) << "[other]\ntoken_id = \"ak-wrong\"\ntoken_secret = \"as-wrong\"\n\n"
                         "[local]\ntoken_id = \"ak-local-test\"\ntoken_secret = 'as-local-test'\n"
                         "active = true  # the one in use\n";
  unsetenv("MODAL_TOKEN_ID");
  unsetenv("MODAL_TOKEN_SECRET");
  setenv("MODAL_CONFIG_PATH", file.c_str(), 1);
  auto dsn_ = sandboxio::parse_dsn(dsn()).value();
  auto config = sandboxio::modal::config_for(dsn_);
  EXPECT_TRUE(config.ok());
  if (config.ok()) {
    EXPECT_EQ(config.value().token_id, "ak-local-test");
    EXPECT_EQ(config.value().token_secret, "as-local-test");
    EXPECT_EQ(config.value().credentials_source, file + " [local]");
  }
  {
    auto sb = sandboxio::sync::Sandbox::create(dsn());
    EXPECT_TRUE(sb.run({"true"}).ok());
  }
  setenv("MODAL_PROFILE", "other", 1);
  try {
    (void)sandboxio::sync::Sandbox::create(dsn());
    ADD_FAILURE() << "the profile MODAL_PROFILE names was not used";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.sbx_code(), sandboxio::errc::AuthenticationError) << e.what();
    EXPECT_NE(std::string(e.what()).find("[other]"), std::string::npos) << e.what();
  }
  unsetenv("MODAL_PROFILE");
  setenv("MODAL_TOKEN_ID", "ak-local-test", 1);
  setenv("MODAL_TOKEN_SECRET", "as-local-test", 1);
  setenv("MODAL_CONFIG_PATH", "/nonexistent", 1);
}

TEST(Modal, AnImageTheServerCannotGetIsImageNotFound) {
  SBX_REQUIRE_MODAL_SERVER();
  try {
    (void)sandboxio::sync::Sandbox::create(dsn("sandboxio-test/no-such-image:1"));
    ADD_FAILURE() << "create() of a missing image succeeded";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.sbx_code(), sandboxio::errc::ImageNotFound) << e.what();
  }
}

}  // namespace
