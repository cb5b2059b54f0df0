// HTTP/1.1 client codec: request writing and an incremental response parser on llhttp. Bytes
// in, values out; no I/O. Used by the Docker and E2B machines and the MCP server.
//
//   std::string wire = sandboxio::http::write_request({"GET", "/v1.41/_ping", {}, {}}, "docker");
//   sandboxio::http::ResponseParser p;
//   std::size_t used = p.feed(bytes);            // consumes what it can
//   if (p.head_done()) p.status();               // 200
//   sandboxio::Bytes body = p.take_body();       // body bytes so far (chunked decoded)
//   if (p.complete()) p.reset();                 // keep-alive: the next response
//   if (p.upgraded()) /* bytes after `used` belong to the raw stream (101) */;
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxio/output.hpp"
#include "sandboxio/result.hpp"

namespace sandboxio::http {

struct Header {
  std::string name{};
  std::string value{};
  friend bool operator==(const Header&, const Header&) = default;
};

struct Request {
  std::string method{};
  std::string target{};  // "/v1.41/containers/create?name=x"
  std::vector<Header> headers{};
  Bytes body{};
};

/// The request bytes: request line, Host, the given headers, Content-Length when there is a
/// body. Header names and values with CR or LF are refused (header injection): SBX_E1000.
[[nodiscard]] Result<std::string> write_request(const Request& request, std::string_view host);
/// Only the head of that request (its body ignored) for a body of `content_length` bytes that
/// the caller appends itself: a large body is then written once, straight after the head.
[[nodiscard]] Result<std::string> write_request_head(const Request& request, std::string_view host,
                                                     std::size_t content_length);

struct ParserLimits {
  std::size_t max_head_bytes = 64 * 1024;  // status line and headers
  /// Body bytes not yet taken; then the parser pauses. The head and the first body bytes can
  /// arrive in one feed(), so the bound may be passed once, by at most that feed's size.
  std::size_t max_buffered_body = 1 << 20;
};

/// Parses one response at a time. feed() consumes bytes and returns how many; it stops early
/// when the response is complete (call reset() for the next one on a keep-alive connection),
/// at a 101 upgrade (the remaining bytes belong to the raw stream), or when unread body
/// reached max_buffered_body (take_body() and feed the rest). Errors are sticky.
class ResponseParser {
 public:
  explicit ResponseParser(ParserLimits limits = {});
  ~ResponseParser();
  ResponseParser(const ResponseParser&) = delete;
  ResponseParser& operator=(const ResponseParser&) = delete;

  /// The next response answers a HEAD request (it has no body whatever its headers say).
  void expect_no_body() noexcept { no_body_ = true; }
  std::size_t feed(std::string_view data);
  /// The connection ended: completes a response delimited by EOF, or fails one cut short.
  void feed_eof();
  void reset();

  [[nodiscard]] bool head_done() const noexcept { return head_done_; }
  [[nodiscard]] int status() const noexcept { return status_; }
  [[nodiscard]] const std::vector<Header>& headers() const& noexcept { return headers_; }
  /// The first header with this name (case-insensitive).
  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const;
  [[nodiscard]] Bytes take_body();
  [[nodiscard]] bool complete() const noexcept { return complete_; }
  [[nodiscard]] bool upgraded() const noexcept { return upgraded_; }
  [[nodiscard]] bool keep_alive() const noexcept { return keep_alive_; }
  [[nodiscard]] const std::optional<Problem>& error() const& noexcept { return error_; }

  struct State;  // llhttp's parser and settings (private)

 protected:
  ResponseParser(ParserLimits limits, bool requests);
  std::string method_{}, target_{};

 private:
  friend struct Callbacks;
  bool requests_ = false;
  ParserLimits limits_;
  State* state_;
  bool no_body_ = false;
  bool head_done_ = false, complete_ = false, upgraded_ = false, keep_alive_ = false;
  bool body_full_ = false;
  int status_ = 0;
  std::size_t head_bytes_ = 0;
  std::vector<Header> headers_;
  bool in_value_ = false;
  Bytes body_;
  std::optional<Problem> error_;
};

/// Parses requests (the MCP server's Streamable HTTP) with the same interface; status() is 0.
class RequestParser : public ResponseParser {
 public:
  explicit RequestParser(ParserLimits limits = {}) : ResponseParser(limits, true) {}
  /// "POST", "GET", ... once head_done().
  [[nodiscard]] const std::string& method() const& noexcept { return method_; }
  /// The request target, "/mcp?x=1".
  [[nodiscard]] const std::string& target() const& noexcept { return target_; }
};

/// Splits a byte stream into lines on '\n' (not on chunk boundaries), for NDJSON streams.
/// A line longer than max_line is a coded error (SBX_E1803), and the splitter stops.
class LineSplitter {
 public:
  explicit LineSplitter(std::size_t max_line = 1 << 20) : max_line_(max_line) {}
  /// Appends bytes; complete lines become available through next_line().
  void feed(std::string_view data);
  /// The next complete line without its '\n' (a trailing '\r' is removed too).
  [[nodiscard]] std::optional<std::string> next_line();
  /// At end of stream: the unterminated rest, if any.
  [[nodiscard]] std::optional<std::string> finish();
  [[nodiscard]] const std::optional<Problem>& error() const& noexcept { return error_; }

 private:
  std::size_t max_line_;
  std::string buffer_;
  std::size_t scanned_ = 0;
  std::optional<Problem> error_;
};

}  // namespace sandboxio::http
