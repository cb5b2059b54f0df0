// The MCP server: six tools over one sandbox per process, for any agent that speaks the Model
// Context Protocol. Transports: newline-delimited JSON-RPC on stdio, and Streamable HTTP on a
// loopback port. It answers both the initialize handshake (revisions 2025-11-25, 2025-06-18,
// 2025-03-26) and the stateless revision 2026-07-28 (per-request _meta, server/discover).
//
//   sandboxio::mcp::ServerOptions o;
//   o.backend = "docker://python:3.12-slim";
//   return sandboxio::mcp::serve_stdio(o);          // until stdin ends or a signal
//
// Configuration is fixed at start: no tool changes the backend, the network policy or the
// limits, and nothing is ever executed on the host. The sandbox is created on first use and
// torn down when the server stops.
#pragma once

#include <asio/any_io_executor.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "sandboxio/create_options.hpp"

namespace sandboxio::mcp {

/// The protocol revisions served: the stateless one, then the initialize-handshake ones.
inline constexpr std::string_view kStatelessVersion = "2026-07-28";
inline constexpr std::string_view kLegacyVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};

struct ServerOptions {
  std::string backend = "fake://";
  CreateOptions create{};
  /// The most output a tool result carries per stream; the rest is cut with a note.
  std::size_t max_output_bytes = 100 * 1024;
};

/// Where one request's messages go: notifications about it and then its response.
struct Reply {
  std::function<void(std::string json)> message;
  /// No more messages will come for this request; `http_status` is what an HTTP transport
  /// answers with (200, 202 for notifications, 400/404 for the stateless revision's errors).
  std::function<void(int http_status)> end;
};

/// Request metadata a transport knows (HTTP headers, names lower-cased); empty for stdio.
struct Transport {
  bool http = false;
  std::map<std::string, std::string> headers{};
};

class Server {
 public:
  Server(asio::any_io_executor executor, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// One incoming JSON-RPC message. Must be called on the executor's thread.
  void handle(std::string_view text, const Transport& transport, Reply reply);
  /// Kills the sandbox (if one was made) and calls `done`.
  void close(std::function<void()> done);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

/// Serves stdio until stdin ends or SIGINT/SIGTERM; tears the sandbox down; returns 0.
int serve_stdio(const ServerOptions& options);
/// Serves Streamable HTTP on `address` ("127.0.0.1:PORT"; loopback only) until SIGINT/SIGTERM.
/// `ready` is called with the bound port (useful with port 0).
int serve_http(const ServerOptions& options, const std::string& address,
               const std::function<void(unsigned short port)>& ready = {});

}  // namespace sandboxio::mcp
