// modal://: sandboxes on Modal, spoken to in gRPC over HTTP/2: Modal's control plane
// (modal.client.ModalClient) creates and ends them, and each sandbox's task command router
// (modal.task_command_router.TaskCommandRouter) runs its commands; files go through Modal's
// fs-tools program inside the sandbox, as Modal's SDKs do. The machine is sans-I/O like every
// backend; the transports own TLS and sockets.
//
//   auto sb = sandboxio::sync::Sandbox::create("modal://python:3.12-slim");  // MODAL_TOKEN_*
//   auto r = sb.run({"python3", "-c", "print(6 * 7)"});
//
// DSN: modal://IMAGE[?option=value...]      IMAGE: a registry name Modal pulls, or im-... (an
//                                           image id Modal has)
//   app=sandboxio           the Modal app the sandboxes belong to (made when missing)
//   environment=NAME        the Modal environment (default MODAL_ENVIRONMENT, else the profile's,
//                           else the workspace default)
//   server_url=URL          control plane (default MODAL_SERVER_URL, else the profile's, else
//                           https://api.modal.com)
//   ca=FILE                 PEM trust anchors for TLS (default: the system store)
// Credentials come as Modal's SDKs find them, never from a DSN (DSNs reach logs):
// MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, else the active profile of ~/.modal.toml
// (MODAL_CONFIG_PATH, MODAL_PROFILE). What it declares and refuses:
// docs/reference/backends/modal.md.
#pragma once

#include <memory>
#include <string>

#include "sandboxio/backend/grpc_calls.hpp"
#include "sandboxio/dsn.hpp"
#include "sandboxio/machine.hpp"
#include "sandboxio/registry.hpp"

namespace sandboxio::modal {

/// Everything the machine needs from outside, as values (it reads no environment, no file and
/// no clock).
struct Config {
  std::string image{};  // registry name or image id; may be empty for connect()
  std::string app = "sandboxio";
  std::string environment{};
  backend::GrpcTarget server{};
  /// The control plane is on this machine (localhost, 127.0.0.1, ::1): the SDKs then dial the
  /// command router in plaintext, whatever its URL says, and so does this.
  bool local_server = false;
  std::string token_id{};      // empty: every call fails with SBX_E1501
  std::string token_secret{};  // never printed
  std::string ca_file{};
  /// Where the credentials came from, for messages ("MODAL_TOKEN_ID", "~/.modal.toml [dev]").
  std::string credentials_source{};
  std::string host{};     // x-modal-host
  std::string session{};  // random per process: exec ids
};

/// Reads the DSN's options, Modal's variables and its profile file.
[[nodiscard]] Result<Config> config_for(const Dsn& dsn);
/// Parses http://HOST[:PORT] (h2c) or https://HOST[:PORT] (TLS, ALPN h2) into a target.
[[nodiscard]] Result<backend::GrpcTarget> parse_server_url(std::string_view url,
                                                           const std::string& ca_file);
/// The machine for one sandbox.
[[nodiscard]] std::unique_ptr<Machine> make_machine(Config config);
/// The capabilities modal:// declares.
[[nodiscard]] CapabilitySet declared_capabilities();
/// The registry entry for modal://.
[[nodiscard]] BackendEntry backend_entry();

}  // namespace sandboxio::modal
