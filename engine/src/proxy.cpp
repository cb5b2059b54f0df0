// The egress proxy's request head (codec/proxy.hpp). Strict on purpose: one form of each
// thing, CRLF line ends, no folded headers, no request both chunked and sized. A client the
// proxy cannot understand gets a 4xx it can read, never a guess about where it meant to go.
#include "sandboxio/codec/proxy.hpp"

#include <cctype>
#include <charconv>
#include <vector>

#include "text.hpp"

namespace sandboxio::proxy {
namespace {

bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_tchar(c)) return false;
  return true;
}

/// A header value: visible characters, spaces and tabs (no CR, LF or other controls).
bool is_field_value(std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

std::optional<std::uint16_t> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  unsigned value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value == 0 || value > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

bool is_ipv4(std::string_view s) {
  int parts = 0;
  while (true) {
    std::size_t n = 0;
    unsigned value = 0;
    while (n < s.size() && s[n] >= '0' && s[n] <= '9' && n < 4) {
      value = value * 10 + static_cast<unsigned>(s[n] - '0');
      ++n;
    }
    if (n == 0 || n > 3 || value > 255 || (n > 1 && s[0] == '0')) return false;
    ++parts;
    s.remove_prefix(n);
    if (s.empty()) return parts == 4;
    if (s[0] != '.' || parts == 4) return false;
    s.remove_prefix(1);
  }
}

/// RFC 4291's text form: eight groups of 1-4 hex digits, one "::" for a run of zero groups,
/// and an IPv4 address in place of the last two.
bool is_ipv6(std::string_view s) {
  if (s.size() < 2 || s.size() > 45) return false;
  int groups = 0;
  bool gap = false;
  std::size_t i = 0;
  if (s.substr(0, 2) == "::") {
    gap = true;
    i = 2;
    if (i == s.size()) return true;  // "::"
  } else if (s[0] == ':') {
    return false;
  }
  while (i < s.size()) {
    std::size_t n = 0;
    while (i + n < s.size() && n < 5 && std::isxdigit(static_cast<unsigned char>(s[i + n])) != 0)
      ++n;
    if (i + n < s.size() && s[i + n] == '.') {  // the IPv4 tail
      if (!is_ipv4(s.substr(i))) return false;
      groups += 2;
      i = s.size();
      break;
    }
    if (n == 0 || n > 4) return false;
    ++groups;
    i += n;
    if (i == s.size()) break;
    if (s[i] != ':') return false;
    ++i;
    if (i < s.size() && s[i] == ':') {
      if (gap) return false;  // a second "::"
      gap = true;
      ++i;
    } else if (i == s.size()) {
      return false;  // a trailing single ':'
    }
  }
  return gap ? groups < 8 : groups == 8;
}

bool is_dns_name(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  std::size_t label = 0;
  for (char c : s) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    if (!ok || ++label > 63) return false;
  }
  if (label == 0) return false;
  // A last label of digits is no name (no top-level domain is numeric): "01.2.3.4" or "0x7f.1"
  // would be read as an address by a resolver, behind the allow list's back.
  const std::string_view last = s.substr(s.size() - label);
  return last.find_first_not_of("0123456789") != std::string_view::npos;
}

/// "host:port" or "[v6]:port" (the port required when `default_port` is 0).
bool split_authority(std::string_view authority, std::uint16_t default_port, std::string& host,
                     std::uint16_t& port) {
  std::string_view h = authority;
  std::string_view p;
  if (!authority.empty() && authority[0] == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return false;
    h = authority.substr(0, close + 1);
    std::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return false;
      p = rest.substr(1);
      if (p.empty()) return false;
    }
  } else if (const auto colon = authority.rfind(':'); colon != std::string_view::npos) {
    h = authority.substr(0, colon);
    p = authority.substr(colon + 1);
    if (p.empty()) return false;
  }
  auto normal = normalise_host(h);
  if (!normal) return false;
  if (p.empty()) {
    if (default_port == 0) return false;
    port = default_port;
  } else {
    auto n = parse_port(p);
    if (!n) return false;
    port = *n;
  }
  host = std::move(*normal);
  return true;
}

/// Headers the proxy consumes or replaces instead of forwarding.
bool hop_by_hop(std::string_view name) {
  return detail::iequals(name, "host") || detail::iequals(name, "connection") ||
         detail::iequals(name, "keep-alive") || detail::iequals(name, "proxy-connection") ||
         detail::iequals(name, "proxy-authorization") ||
         detail::iequals(name, "proxy-authenticate") || detail::iequals(name, "te") ||
         detail::iequals(name, "upgrade");
}

}  // namespace

std::optional<std::string> normalise_host(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    if (!is_ipv6(host)) return std::nullopt;
  } else if (is_ipv6(host)) {
    return std::nullopt;  // an IPv6 address is written in brackets
  } else if (!host.empty() && host.back() == '.' && !is_ipv4(host.substr(0, host.size() - 1))) {
    host.remove_suffix(1);  // "pypi.org." is pypi.org; "1.2.3.4." is nothing
  }
  if (!is_ipv4(host) && !is_ipv6(host) && !is_dns_name(host)) return std::nullopt;
  std::string out(host);
  for (char& c : out)
    c = detail::ascii_lower(c);
  return out;
}

bool is_ip_literal(std::string_view host) noexcept {
  return is_ipv4(host) || is_ipv6(host);
}

void HeadParser::fail(int status, errc code, std::string detail) {
  status_ = status;
  error_ = Problem{code, "egress proxy: " + std::move(detail),
                   "Point HTTP_PROXY and HTTPS_PROXY at the sandbox's proxy and let the client "
                   "build the request (CONNECT for https, an absolute http:// URL otherwise)."};
}

std::size_t HeadParser::feed(std::string_view data) {
  if (done_ || error_) return 0;
  // The head ends at the first blank line; look from a little before what is new.
  const std::size_t from = head_.size() >= 3 ? head_.size() - 3 : 0;
  const std::size_t room = limits_.max_head_bytes - head_.size();
  const std::size_t take = std::min(room, data.size());
  head_.append(data.substr(0, take));
  const auto end = head_.find("\r\n\r\n", from);
  if (end == std::string::npos) {
    if (head_.size() >= limits_.max_head_bytes) {
      fail(431, errc::MessageTooLarge,
           "the request head is larger than " + std::to_string(limits_.max_head_bytes) + " bytes");
    }
    return take;
  }
  const std::size_t used = take - (head_.size() - (end + 4));
  head_.resize(end + 4);
  parse();
  return used;
}

void HeadParser::parse() {
  std::vector<std::string_view> lines;
  std::string_view rest(head_);
  rest.remove_suffix(4);  // the blank line
  while (true) {
    const auto eol = rest.find("\r\n");
    lines.push_back(rest.substr(0, eol));
    if (eol == std::string_view::npos) break;
    rest.remove_prefix(eol + 2);
  }
  for (std::string_view line : lines) {
    if (line.find('\r') != std::string_view::npos || line.find('\n') != std::string_view::npos)
      return fail(400, errc::RemoteProtocolViolation, "a bare CR or LF in the request head");
  }
  if (lines.size() - 1 > limits_.max_headers) {
    return fail(431, errc::MessageTooLarge,
                "more than " + std::to_string(limits_.max_headers) + " header lines");
  }

  // The request line: METHOD SP target SP HTTP/1.x
  const std::string_view line = lines[0];
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, errc::RemoteProtocolViolation,
                "the request line is not METHOD TARGET VERSION");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view uri = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method) || method.size() > 32)
    return fail(400, errc::RemoteProtocolViolation, "the method is not a token");
  if (version != "HTTP/1.1" && version != "HTTP/1.0")
    return fail(505, errc::RemoteProtocolViolation, "only HTTP/1.0 and HTTP/1.1 are proxied");
  target_.method = std::string(method);

  // The headers: checked, and the framing ones remembered.
  std::optional<std::string_view> content_length;
  bool chunked = false;
  std::string forwarded;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::string_view h = lines[i];
    if (!h.empty() && (h[0] == ' ' || h[0] == '\t'))
      return fail(400, errc::RemoteProtocolViolation, "a folded header line");
    const auto colon = h.find(':');
    if (colon == std::string_view::npos || !is_token(h.substr(0, colon)))
      return fail(400, errc::RemoteProtocolViolation, "a header line without a name");
    const std::string_view name = h.substr(0, colon);
    const std::string_view value = trim(h.substr(colon + 1));
    if (!is_field_value(value))
      return fail(400, errc::RemoteProtocolViolation, "a control character in a header value");
    if (detail::iequals(name, "content-length")) {
      if (content_length && *content_length != value)
        return fail(400, errc::RemoteProtocolViolation, "two different Content-Length headers");
      if (value.empty() || value.find_first_not_of("0123456789") != std::string_view::npos)
        return fail(400, errc::RemoteProtocolViolation, "a Content-Length that is not a number");
      content_length = value;
    }
    if (detail::iequals(name, "transfer-encoding")) chunked = true;
    if (!hop_by_hop(name)) {
      forwarded += name;
      forwarded += ": ";
      forwarded += value;
      forwarded += "\r\n";
    }
  }
  if (chunked && content_length) {
    return fail(400, errc::RemoteProtocolViolation,
                "a request both chunked and sized (Transfer-Encoding and Content-Length)");
  }

  if (method == "CONNECT") {
    target_.kind = Target::Kind::Connect;
    if (!split_authority(uri, 0, target_.host, target_.port))
      return fail(400, errc::RemoteProtocolViolation, "CONNECT needs host:port");
    done_ = true;
    return;
  }
  // Anything else: an absolute http:// URL, forwarded in origin form.
  target_.kind = Target::Kind::Forward;
  constexpr std::string_view kScheme = "http://";
  if (uri.size() < kScheme.size() || !detail::iequals(uri.substr(0, kScheme.size()), kScheme)) {
    if (!uri.empty() && uri[0] == '/')
      return fail(400, errc::RemoteProtocolViolation,
                  "not a proxy request (an origin-form target): this is the egress proxy");
    return fail(400, errc::RemoteProtocolViolation,
                "only http:// URLs are forwarded; https goes through CONNECT");
  }
  std::string_view after = uri.substr(kScheme.size());
  const auto path_at = after.find_first_of("/?#");
  const std::string_view authority = after.substr(0, path_at);
  if (authority.find('@') != std::string_view::npos)
    return fail(400, errc::RemoteProtocolViolation,
                "credentials in the URL are not forwarded; send an Authorization header");
  if (!split_authority(authority, 80, target_.host, target_.port))
    return fail(400, errc::RemoteProtocolViolation, "the URL's host is not a host name or address");
  std::string_view path = path_at == std::string_view::npos ? "/" : after.substr(path_at);
  if (const auto hash = path.find('#'); hash != std::string_view::npos) path = path.substr(0, hash);
  target_.path = path.empty() || path[0] != '/' ? "/" + std::string(path) : std::string(path);
  for (char c : target_.path) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return fail(400, errc::RemoteProtocolViolation, "a control character in the URL");
  }
  std::string host_header =
      target_.host.find(':') != std::string::npos ? "[" + target_.host + "]" : target_.host;
  if (target_.port != 80) host_header += ":" + std::to_string(target_.port);
  target_.upstream_head = target_.method + " " + target_.path + " " + std::string(version) +
                          "\r\nHost: " + host_header + "\r\n" + forwarded +
                          "Connection: close\r\n\r\n";
  done_ = true;
}

std::string refusal(int status, std::string_view reason) {
  std::string text;
  for (char c : reason.substr(0, 512)) {
    const auto u = static_cast<unsigned char>(c);
    text += (u < 0x20 || u == 0x7f) ? ' ' : c;
  }
  text += "\n";
  std::string_view phrase = "Bad Request";
  switch (status) {
    case 403:
      phrase = "Forbidden";
      break;
    case 431:
      phrase = "Request Header Fields Too Large";
      break;
    case 502:
      phrase = "Bad Gateway";
      break;
    case 504:
      phrase = "Gateway Timeout";
      break;
    case 505:
      phrase = "HTTP Version Not Supported";
      break;
    default:
      break;
  }
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(phrase) +
         "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
         std::to_string(text.size()) +
         "\r\nConnection: close\r\nX-Sandboxio-Egress: " + (status == 403 ? "denied" : "error") +
         "\r\n\r\n" + text;
}

std::string_view connect_established() noexcept {
  return "HTTP/1.1 200 Connection established\r\n\r\n";
}

}  // namespace sandboxio::proxy
