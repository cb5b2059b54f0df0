// The egress proxy's request head: what a program in a sandbox sends to the HTTP proxy its
// HTTP_PROXY / HTTPS_PROXY point at, parsed on the host side before any policy is checked.
// Two forms are accepted: CONNECT host:port (a tunnel, for TLS) and an absolute-form http://
// request, which is forwarded as an origin-form request with `Connection: close` (one request
// per upstream connection: a client that wants another host opens another connection). Bytes
// in, values out; no I/O. Anything else is refused with the HTTP status the client should see.
//
//   sandboxio::proxy::HeadParser p;
//   std::size_t used = p.feed(bytes);        // stops at the end of the head
//   if (p.error()) reply(sandboxio::proxy::refusal(p.error_status(), p.error()->detail));
//   if (p.done()) p.target().host, p.target().port;   // "pypi.org", 443
//   // bytes after `used`: the tunnel's (CONNECT) or the request body's, relayed as they are
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sandboxio/result.hpp"

namespace sandboxio::proxy {

struct Limits {
  std::size_t max_head_bytes = 16 * 1024;  // request line and headers
  std::size_t max_headers = 100;
};

struct Target {
  enum class Kind { Connect, Forward };
  Kind kind = Kind::Connect;
  std::string method{};  // "CONNECT", "GET", ...
  /// Lower-case, without a trailing dot; an IPv6 literal without its brackets.
  std::string host{};
  std::uint16_t port = 0;
  /// Forward: the head to send upstream (origin-form target, Host from the URI, no Proxy-*,
  /// Connection or Keep-Alive headers, `Connection: close`). Empty for Connect.
  std::string upstream_head{};
  /// Forward: the path and query, for records (without the host).
  std::string path{};
};

/// Parses one request head. feed() consumes bytes up to the head's end and returns how many;
/// once done() or error(), it consumes nothing more. Errors are sticky and coded SBX_E1803
/// (a limit) or SBX_E1801 (malformed); error_status() is the HTTP status to answer with.
class HeadParser {
 public:
  explicit HeadParser(Limits limits = {}) : limits_(limits) {}
  std::size_t feed(std::string_view data);
  [[nodiscard]] bool done() const noexcept { return done_; }
  [[nodiscard]] const Target& target() const& noexcept { return target_; }
  [[nodiscard]] const std::optional<Problem>& error() const& noexcept { return error_; }
  [[nodiscard]] int error_status() const noexcept { return status_; }

 private:
  void parse();
  void fail(int status, errc code, std::string detail);

  Limits limits_;
  std::string head_{};
  bool done_ = false;
  Target target_{};
  std::optional<Problem> error_{};
  int status_ = 0;
};

/// A host as the proxy accepts it: a DNS name (normalised to lower case, one trailing dot
/// dropped; its last label not all digits), an IPv4 address in dotted decimal, or an IPv6
/// address in brackets (returned without them); nullopt else.
[[nodiscard]] std::optional<std::string> normalise_host(std::string_view host);
/// True for an IPv4 or IPv6 literal (as normalise_host() returns it).
[[nodiscard]] bool is_ip_literal(std::string_view host) noexcept;

/// The whole response for a refused request: the status line, `Connection: close`, a
/// text/plain body with the reason, and `X-Sandboxio-Egress: denied` so that scripts can tell
/// the proxy's refusal from the server's. The reason is made printable and bounded.
[[nodiscard]] std::string refusal(int status, std::string_view reason);
/// What a CONNECT gets once the upstream connection is open.
[[nodiscard]] std::string_view connect_established() noexcept;

}  // namespace sandboxio::proxy
