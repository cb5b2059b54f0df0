// The backend contract suite: the behaviour every backend must show, written once and run
// against any backend and transport, including a third party's. Each case is a plain function
// over a Target; capability-dependent cases check both directions (a declared capability
// works, an undeclared one is refused with SBX_E1401).
//
//   sandboxio::contract::Target t{.name = "fake", .dsn = "fake://",
//                                 .transport = sandboxio::contract::blocking_transport(),
//                                 .alive_probe = [](auto& m) { return
//                                 std::vector<std::string>{"pgrep", "-f", m}; }, .egress_probe =
//                                 {"curl", "-sS", "https://example.com"}};
//   for (const auto& failure : sandboxio::contract::run_all(t)) std::cerr << failure.row << "\n";
//
// With GoogleTest, SANDBOXIO_CONTRACT_TESTS(Name, target) (sandboxio/contract_gtest.hpp)
// makes one test per case.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "sandboxio/link.hpp"

struct ssl_ctx_st;  // SSL_CTX, for TlsCanary

namespace sandboxio::contract {

/// A running stream, whatever the transport.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual std::optional<OutputChunk> next() = 0;
  virtual ExecResult wait() = 0;
  virtual void kill() = 0;
};

/// A sandbox, whatever the transport. Errors are thrown as sandboxio::Error.
class Box {
 public:
  virtual ~Box() = default;
  [[nodiscard]] virtual const std::string& id() const = 0;
  [[nodiscard]] virtual CapabilitySet capabilities() const = 0;
  [[nodiscard]] virtual IsolationTier tier() const = 0;
  [[nodiscard]] virtual std::vector<Problem> warnings() const = 0;
  virtual SandboxInfo info() = 0;
  virtual ExecResult run(Command command) = 0;
  ExecResult run(std::vector<std::string> argv) {
    Command c;
    c.argv = std::move(argv);
    return run(std::move(c));
  }
  virtual std::unique_ptr<Stream> stream(Command command) = 0;
  std::unique_ptr<Stream> stream(std::vector<std::string> argv) {
    Command c;
    c.argv = std::move(argv);
    return stream(std::move(c));
  }
  virtual ExecResult run_code(CodeRequest request) = 0;
  ExecResult run_code(std::string code) {
    CodeRequest r;
    r.code = std::move(code);
    return run_code(std::move(r));
  }
  virtual CodeContext create_context() = 0;
  virtual void write_file(std::string path, Bytes data) = 0;
  virtual Bytes read_file(std::string path) = 0;
  virtual std::vector<FileInfo> list_files(std::string path) = 0;
  virtual void remove_file(std::string path) = 0;
  virtual void kill() = 0;
  /// Starts `command`, calls `running()` from the caller's thread until it returns true, then
  /// cancels the command and returns how it completed (operation_aborted is right).
  /// Transports without per-operation cancellation return nullopt.
  virtual std::optional<std::error_code> run_and_cancel(Command command,
                                                        const std::function<bool()>& running) = 0;
};

/// How boxes are made: the blocking transport, the simulated one, Asio, or a third party's.
class Transport {
 public:
  virtual ~Transport() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  virtual std::unique_ptr<Box> create(const std::string& dsn, CreateOptions options) = 0;
  virtual std::unique_ptr<Box> connect(const std::string& dsn, std::string id,
                                       CreateOptions options) = 0;
  /// Starts create() and cancels it after `after`; returns how it completed (operation_aborted
  /// is right), or nullopt when the transport has no per-operation cancellation.
  virtual std::optional<std::error_code> create_and_cancel(const std::string& dsn,
                                                           CreateOptions options,
                                                           std::chrono::milliseconds after) = 0;
};

/// The sync API over a Link made by `make_link` (null: the POSIX link).
[[nodiscard]] std::shared_ptr<Transport> blocking_transport(
    std::function<std::unique_ptr<Link>()> make_link = {});
/// The async API over the Asio transport, with an io_context on its own thread.
[[nodiscard]] std::shared_ptr<Transport> asio_transport();

struct Target {
  std::string name;
  std::string dsn;
  std::shared_ptr<Transport> transport = blocking_transport();
  /// A command that exits 0 when a process whose command line contains `marker` is running.
  std::function<std::vector<std::string>(const std::string& marker)> alive_probe{};
  /// A command that exits 0 only if it reached the network.
  std::vector<std::string> egress_probe{};
  /// A DSN whose create() takes more than a second (for the create timeout and cancellation
  /// cases). Empty means those cases rely on a 1 ms create timeout, which only a backend that
  /// can never create that fast may do (fake:// can: give it "?create_delay=10s").
  std::string slow_create_dsn{};
  /// A DSN whose teardown outlasts SBX_TEARDOWN_GRACE (for the grace-expiry case); empty skips
  /// that case's orphan check.
  std::string slow_teardown_dsn{};
  /// False for an image without python3 (busybox): run_code's stateless case is skipped there.
  bool has_python = true;
  /// False where run_code's python is not CPython (fake:// interprets a subset): the rows
  /// that define classes with _repr_*_ methods are skipped there.
  bool full_python = true;
  /// A command that fetches `url` (http://) the way ordinary programs do, through the proxy
  /// variables of the sandbox's environment, prints the body and exits 0, or exits nonzero.
  /// Empty skips the allow-list rows.
  std::function<std::vector<std::string>(const std::string& url)> fetch_probe{};
  /// A command that fetches `url` (https://) through the proxy (CONNECT, then TLS trusting only
  /// the PEM file `ca_file`), prints the body and exits 0, or exits nonzero. Empty skips the
  /// TLS row.
  std::function<std::vector<std::string>(const std::string& url, const std::string& ca_file)>
      tls_fetch_probe{};
  /// A command that exits 0 only if `name` resolved inside the sandbox.
  std::function<std::vector<std::string>(const std::string& name)> resolve_probe{};
  /// For a backend whose sandbox resolves names itself and whose network matches host names
  /// on the standard ports only, as E2B's does (the Host header on 80, the TLS SNI on 443):
  /// makes `name` (and `unlisted.sandboxio.test`) resolve inside a sandbox created with
  /// `options`, with that address's ports 80 and 443 leading to the canaries' ports on this
  /// machine's loopback, and returns the address. The allow-list rows then list the name
  /// without a port and fetch it on the standard ports. Empty: a proxy backend, where the rows
  /// list `name:PORT` and pin the name (NetworkPolicy::pinned).
  std::function<std::string(CreateOptions& options, const std::string& name, int http_port,
                            int tls_port)>
      route_canary{};
  /// Ids of the sandboxes this target's backend holds, for "nothing orphaned" checks.
  std::function<std::vector<std::string>()> live_sandboxes{};
};

/// A canary web server on this machine's loopback: every request gets body() (plus `extra`
/// bytes of 'x' when it asks for /big), and each one is counted. The allow-list rows reach it
/// by a name only the test resolves (a pinned name), so no test sends anything anywhere but
/// loopback.
class HttpCanary {
 public:
  explicit HttpCanary(std::size_t extra = 0);
  HttpCanary(const HttpCanary&) = delete;
  HttpCanary& operator=(const HttpCanary&) = delete;
  ~HttpCanary();
  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] int requests() const { return requests_; }
  [[nodiscard]] const std::string& body() const { return body_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::size_t big_ = 0;
  std::string body_;
  std::atomic<int> requests_{0};
  std::thread thread_;
};

/// A TLS web server on this machine's loopback for `name`, with a certificate made for this
/// process (self-signed: ca_pem() is the only anchor that trusts it). Every request gets body().
class TlsCanary {
 public:
  explicit TlsCanary(const std::string& name);
  TlsCanary(const TlsCanary&) = delete;
  TlsCanary& operator=(const TlsCanary&) = delete;
  ~TlsCanary();
  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] int sessions() const { return sessions_; }
  [[nodiscard]] const std::string& body() const { return body_; }
  [[nodiscard]] const std::string& ca_pem() const { return ca_pem_; }

 private:
  ::ssl_ctx_st* ctx_ = nullptr;  // OpenSSL's SSL_CTX
  int fd_ = -1;
  int port_ = 0;
  std::string body_, ca_pem_;
  std::atomic<int> sessions_{0};
  std::thread thread_;
};

/// Target::tls_fetch_probe for images with python3 and its ssl module.
[[nodiscard]] std::vector<std::string> python_tls_fetch(const std::string& url,
                                                        const std::string& ca_file);

/// Target::fetch_probe for images with python3 (urllib honours the proxy variables).
[[nodiscard]] std::vector<std::string> python_fetch(const std::string& url);
/// Target::resolve_probe for images with python3.
[[nodiscard]] std::vector<std::string> python_resolve(const std::string& name);

/// Thrown by a case whose expectation does not hold.
class CaseFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Case {
  std::string_view row;  // "run.exit_codes"
  void (*run)(const Target&);
};

/// Every case, in a stable order.
[[nodiscard]] std::span<const Case> cases();

struct Failure {
  std::string row;
  std::string message;
};

/// Runs one case; returns the failure, if any (exceptions other than CaseFailure count as
/// failures too, with their message).
[[nodiscard]] std::optional<Failure> run_case(const Case& c, const Target& target);
/// Runs every case and returns the failures.
[[nodiscard]] std::vector<Failure> run_all(const Target& target);

}  // namespace sandboxio::contract
