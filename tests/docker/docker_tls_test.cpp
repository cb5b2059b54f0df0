// docker:// over tcp:// with TLS client certificates, against the loopback TLS listener that
// scripts/docker-env gives dockerd (certificates it generated). The lifecycle and run rows of
// the contract suite, through both transports, plus the failures a user must be told about.
#include <gtest/gtest.h>

#include <cstdlib>

#include "docker_support.hpp"
#include "sandboxio/contract.hpp"
#include "sandboxio/contract_gtest.hpp"
#include "sandboxio/sync.hpp"

namespace {

const std::string kTlsDir = [] {
  const char* d = std::getenv("SBX_TLS_DIR");
  return std::string(d && *d ? d : "/var/lib/sandboxio-test/tls");
}();
const std::string kDsn =
    std::string("docker://") + sandboxio::testing::kPythonImage + "?host=tcp://127.0.0.1:2376";

bool tls_engine_answers() {
  int status = 0;
  sandboxio::testing::capture("curl -fsS --max-time 2 --cacert " + kTlsDir + "/ca.pem --cert " +
                                  kTlsDir + "/cert.pem --key " + kTlsDir +
                                  "/key.pem https://127.0.0.1:2376/_ping >/dev/null 2>&1",
                              &status);
  return status == 0;
}

// The DOCKER_* variables a test sets end with it (other tests in the process use plain tcp://).
class DockerTls : public ::testing::Test {
 protected:
  void TearDown() override {
    ::unsetenv("DOCKER_TLS_VERIFY");
    ::unsetenv("DOCKER_CERT_PATH");
  }
};

void use_docker_tls_env() {
  ::setenv("DOCKER_TLS_VERIFY", "1", 1);
  ::setenv("DOCKER_CERT_PATH", kTlsDir.c_str(), 1);
}

#define SBX_REQUIRE_TLS_ENGINE()                                                        \
  do {                                                                                  \
    SBX_REQUIRE_ENGINE();                                                               \
    if (!tls_engine_answers()) {                                                        \
      const char* req = std::getenv("SBX_REQUIRE_DOCKER");                              \
      if (req && std::string(req) == "1")                                               \
        FAIL() << "dockerd has no TLS listener on 127.0.0.1:2376 (scripts/docker-env)"; \
      std::fprintf(stderr, "\n*** SKIPPED: no TLS listener on 127.0.0.1:2376 ***\n\n"); \
      GTEST_SKIP() << "no TLS listener";                                                \
    }                                                                                   \
    use_docker_tls_env();                                                               \
  } while (0)

class DockerTlsContract : public ::testing::TestWithParam<std::tuple<std::string, std::size_t>> {
 protected:
  void TearDown() override {
    ::unsetenv("DOCKER_TLS_VERIFY");
    ::unsetenv("DOCKER_CERT_PATH");
  }
  static const sandboxio::contract::Target& target(const std::string& via) {
    static const auto make = [](std::shared_ptr<sandboxio::contract::Transport> tr) {
      sandboxio::contract::Target t;
      t.name = "docker-tls";
      t.dsn = kDsn;
      t.transport = std::move(tr);
      t.alive_probe = [](const std::string& marker) {
        return std::vector<std::string>{"pgrep", "-f", "--", marker};
      };
      t.live_sandboxes = [] { return sandboxio::testing::my_containers(); };
      return t;
    };
    static const auto blocking = make(sandboxio::contract::blocking_transport());
    static const auto asio = make(sandboxio::contract::asio_transport());
    return via == "Blocking" ? blocking : asio;
  }
};

TEST_P(DockerTlsContract, Case) {
  SBX_REQUIRE_TLS_ENGINE();
  const auto& [via, index] = GetParam();
  const auto& c = sandboxio::contract::cases()[index];
  const std::string row(c.row);
  if (!row.starts_with("lifecycle.") && !row.starts_with("run.")) GTEST_SKIP() << "not in scope";
  if (auto failure = sandboxio::contract::run_case(c, target(via))) {
    FAIL() << failure->row << ": " << failure->message;
  }
  EXPECT_TRUE(sandboxio::testing::none_left_within()) << row << " left a container";
}

std::vector<std::size_t> lifecycle_and_run_rows() {
  std::vector<std::size_t> rows;
  for (std::size_t i = 0; i < sandboxio::contract::cases().size(); ++i) {
    const std::string_view row = sandboxio::contract::cases()[i].row;
    if (row.starts_with("lifecycle.") || row.starts_with("run.")) rows.push_back(i);
  }
  return rows;
}

INSTANTIATE_TEST_SUITE_P(DockerTls, DockerTlsContract,
                         ::testing::Combine(::testing::Values("Blocking", "Asio"),
                                            ::testing::ValuesIn(lifecycle_and_run_rows())),
                         [](const auto& param_info) {
                           return std::get<0>(param_info.param) + "_" +
                                  sandboxio::contract::test_name_of(std::get<1>(param_info.param));
                         });

TEST_F(DockerTls, AWrongCaIsATlsErrorNamingTheCheck) {
  SBX_REQUIRE_TLS_ENGINE();
  // A directory whose ca.pem is not the CA that signed the server: verification must fail.
  const std::string dir = sandboxio::testing::capture("mktemp -d");
  const std::string d = dir.substr(0, dir.size() - 1);
  sandboxio::testing::capture(
      "cd " + d +
      " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
      "-subj /CN=other -keyout other-key.pem -out ca.pem 2>/dev/null && cp " +
      kTlsDir + "/cert.pem " + kTlsDir + "/key.pem .");
  ::setenv("DOCKER_CERT_PATH", d.c_str(), 1);
  try {
    (void)sandboxio::sync::Sandbox::create(kDsn);
    FAIL() << "connected to a server the CA does not vouch for";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::TlsError) << e.what();
    EXPECT_NE(std::string(e.what()).find("certificate"), std::string::npos) << e.what();
  }
  sandboxio::testing::capture("rm -rf " + d);
}

TEST_F(DockerTls, NoClientCertificateIsRefused) {
  SBX_REQUIRE_TLS_ENGINE();
  const std::string dir = sandboxio::testing::capture("mktemp -d");
  const std::string d = dir.substr(0, dir.size() - 1);
  sandboxio::testing::capture("cp " + kTlsDir + "/ca.pem " + d);
  ::setenv("DOCKER_CERT_PATH", d.c_str(), 1);
  try {
    (void)sandboxio::sync::Sandbox::create(kDsn);
    FAIL() << "connected without a client certificate";
  } catch (const sandboxio::Error& e) {
    EXPECT_EQ(e.code(), sandboxio::errc::TlsError) << e.what();
  }
  sandboxio::testing::capture("rm -rf " + d);
}

// The owner lease on a remote engine: the holder speaks TLS to tcp://127.0.0.1:2376 and is
// SIGKILLed; the kernel closes its connection, the engine closes the container's stdin, and
// the container ends (the agent, the default, sees its stream end; on the exec path the
// container's main process does).
TEST_F(DockerTls, LeaseASigkilledOwnerTakesItsContainerWithinTwoSeconds) {
  SBX_REQUIRE_TLS_ENGINE();
  sandboxio::testing::expect_sigkilled_owner_ends_sandbox(kDsn);
}

TEST_F(DockerTls, LeaseOnTheExecPathASigkilledOwnerTakesItsContainerWithinTwoSeconds) {
  SBX_REQUIRE_TLS_ENGINE();
  sandboxio::testing::expect_sigkilled_owner_ends_sandbox(kDsn + "&agent=off");
}

}  // namespace
