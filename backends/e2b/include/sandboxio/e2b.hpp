// e2b://: sandboxes as E2B microVMs, spoken to through E2B's REST control plane, envd (the
// Connect protocol with the JSON codec over HTTP/1.1, and /files) and the code interpreter
// (NDJSON). The machine is sans-I/O like every backend; the transports own TLS and sockets.
//
//   auto sb = sandboxio::sync::Sandbox::create("e2b://code-interpreter-v1");   // E2B_API_KEY
//   auto r = sb.run({"python3", "-c", "print(6 * 7)"});
//
// DSN: e2b://TEMPLATE[?option=value...]
//   api_url=https://api.e2b.app     control plane (default: E2B_API_URL, else https://api.DOMAIN)
//   sandbox_url=URL                 one origin for envd and the code interpreter (default:
//                                   E2B_SANDBOX_URL, else https://PORT-ID.DOMAIN per sandbox)
//   domain=e2b.app                  (default: E2B_DOMAIN, else e2b.app)
//   ca=FILE                         PEM trust anchors for TLS (default: SSL_CERT_FILE, else the
//                                   system store)
//   lease=30s                       the owner lease: E2B's timeout is kept this short and
//                                   renewed every third of it while the owner lives, so an
//                                   abandoned sandbox ends within it (not with outlive_owner)
// The API key is read from E2B_API_KEY only, never from a DSN (DSNs reach logs).
// What it declares and refuses: docs/reference/backends/e2b.md.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "sandboxio/dsn.hpp"
#include "sandboxio/machine.hpp"
#include "sandboxio/registry.hpp"

namespace sandboxio::e2b {

/// An HTTP origin: where to connect and what to send as Host.
struct Origin {
  Endpoint endpoint{};
  std::string host{};  // "api.e2b.app" or "127.0.0.1:3000"
};

/// Everything the machine needs from outside, as values (it reads no environment and no clock:
/// wall time comes through Machine::handle_wall_clock).
struct Config {
  std::string template_id{};
  /// E2B_API_KEY; empty makes every control-plane call fail with SBX_E1501.
  std::string api_key{};
  Origin api{};
  /// One origin for envd and the code interpreter (E2B_SANDBOX_URL); otherwise each sandbox is
  /// reached at https://PORT-ID.DOMAIN.
  std::optional<Origin> sandbox{};
  std::string domain = "e2b.app";
  std::string ca_file{};
  /// "host:pid" of this process, for the owner metadata.
  std::string owner{};
  /// Random per process: metadata and command tokens.
  std::string session{};
  /// The owner lease (see the DSN's lease=): E2B's timeout while the owner holds the sandbox.
  std::chrono::seconds lease{30};
};

/// Reads the DSN's options and E2B's own variables (E2B_API_KEY, E2B_DOMAIN, E2B_API_URL,
/// E2B_SANDBOX_URL) and fills owner and session.
[[nodiscard]] Result<Config> config_for(const Dsn& dsn);

/// Parses http://HOST[:PORT] or https://HOST[:PORT] (no path) into an origin.
[[nodiscard]] Result<Origin> parse_origin(std::string_view url, const std::string& ca_file);

/// The machine for one sandbox.
[[nodiscard]] std::unique_ptr<Machine> make_machine(Config config);

/// What e2b:// offers beyond the portable interface. Reach it through the transports'
/// native_call:
///   sb.native_call([](Machine& m, Instant now) { return e2b::extensions(m).submit_pause(now); });
class Extensions {
 public:
  virtual ~Extensions() = default;
  /// Pauses the sandbox: E2B keeps its memory and files, and its lifetime stops running.
  /// Commands fail with SBX_E1204 until submit_resume. Completes with std::monostate.
  virtual OpId submit_pause(Instant now) = 0;
  /// Resumes a paused sandbox; it then ends `lifetime` after now (the lifetime asked at
  /// create when zero). Completes with SandboxInfo.
  virtual OpId submit_resume(std::chrono::seconds lifetime, Instant now) = 0;
  /// Moves the end of the sandbox's life to `lifetime` after now (E2B's set-timeout).
  /// Completes with std::monostate.
  virtual OpId submit_set_lifetime(std::chrono::seconds lifetime, Instant now) = 0;
  /// Runs a command on a pseudo-terminal of cols x rows (programs that need a terminal). The
  /// terminal's bytes come back as stdout_bytes. Completes with ExecResult.
  virtual OpId submit_run_pty(Command command, std::uint16_t cols, std::uint16_t rows,
                              Instant now) = 0;
};

/// The extensions of an e2b:// machine; SBX_E1401 CapabilityNotSupported for another backend.
[[nodiscard]] Extensions& extensions(Machine& machine);

/// The capabilities e2b:// declares.
[[nodiscard]] CapabilitySet declared_capabilities();

/// The registry entry for e2b://.
[[nodiscard]] BackendEntry backend_entry();

}  // namespace sandboxio::e2b
