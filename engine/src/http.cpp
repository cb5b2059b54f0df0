#include "sandboxio/codec/http.hpp"

#include <llhttp.h>

#include <algorithm>

#include "text.hpp"

namespace sandboxio::http {

struct ResponseParser::State {
  llhttp_t parser{};
  llhttp_settings_t settings{};
};

namespace {

bool has_crlf(std::string_view s) {
  return s.find_first_of("\r\n") != std::string_view::npos;
}

}  // namespace

// llhttp calls these with the parser's `data` pointing at the ResponseParser.
struct Callbacks {
  static ResponseParser& self(llhttp_t* p) { return *static_cast<ResponseParser*>(p->data); }

  static int head_bytes(ResponseParser& r, std::size_t n) {
    r.head_bytes_ += n;
    if (r.head_bytes_ > r.limits_.max_head_bytes) {
      r.error_ = Problem{
          errc::MessageTooLarge,
          "the response head exceeds " + std::to_string(r.limits_.max_head_bytes) + " bytes",
          {}};
      return -1;
    }
    return 0;
  }
  static int on_status(llhttp_t* p, const char*, std::size_t n) { return head_bytes(self(p), n); }
  static int on_url(llhttp_t* p, const char* at, std::size_t n) {
    ResponseParser& r = self(p);
    r.target_.append(at, n);
    return head_bytes(r, n);
  }
  static int on_header_field(llhttp_t* p, const char* at, std::size_t n) {
    ResponseParser& r = self(p);
    if (r.headers_.empty() || r.in_value_) r.headers_.push_back({});
    r.in_value_ = false;
    r.headers_.back().name.append(at, n);
    return head_bytes(r, n);
  }
  static int on_header_value(llhttp_t* p, const char* at, std::size_t n) {
    ResponseParser& r = self(p);
    if (r.headers_.empty()) return -1;
    r.in_value_ = true;
    r.headers_.back().value.append(at, n);
    return head_bytes(r, n);
  }
  static int on_headers_complete(llhttp_t* p) {
    ResponseParser& r = self(p);
    r.head_done_ = true;
    r.status_ = p->status_code;
    if (r.requests_) r.method_ = llhttp_method_name(static_cast<llhttp_method_t>(p->method));
    r.keep_alive_ = llhttp_should_keep_alive(p) != 0;
    // 1: this response has no body (HEAD); an upgrade is handled by llhttp itself.
    return r.no_body_ ? 1 : 0;
  }
  static int on_body(llhttp_t* p, const char* at, std::size_t n) {
    ResponseParser& r = self(p);
    r.body_.append(at, n);
    if (r.body_.size() >= r.limits_.max_buffered_body) {
      r.body_full_ = true;
      return HPE_PAUSED;  // backpressure: the caller takes the body, then feeds the rest
    }
    return 0;
  }
  static int on_message_complete(llhttp_t* p) {
    ResponseParser& r = self(p);
    if (p->upgrade != 0) return 0;  // llhttp stops with HPE_PAUSED_UPGRADE right after this
    r.complete_ = true;
    r.keep_alive_ = llhttp_should_keep_alive(p) != 0;
    return HPE_PAUSED;  // one response at a time
  }
};

ResponseParser::ResponseParser(ParserLimits limits) : ResponseParser(limits, false) {}

ResponseParser::ResponseParser(ParserLimits limits, bool requests)
    : requests_(requests), limits_(limits), state_(new State) {
  reset();
}
ResponseParser::~ResponseParser() {
  delete state_;
}

void ResponseParser::reset() {
  llhttp_settings_init(&state_->settings);
  state_->settings.on_status = &Callbacks::on_status;
  state_->settings.on_url = &Callbacks::on_url;
  state_->settings.on_header_field = &Callbacks::on_header_field;
  state_->settings.on_header_value = &Callbacks::on_header_value;
  state_->settings.on_headers_complete = &Callbacks::on_headers_complete;
  state_->settings.on_body = &Callbacks::on_body;
  state_->settings.on_message_complete = &Callbacks::on_message_complete;
  llhttp_init(&state_->parser, requests_ ? HTTP_REQUEST : HTTP_RESPONSE, &state_->settings);
  state_->parser.data = this;
  no_body_ = false;
  head_done_ = complete_ = upgraded_ = keep_alive_ = body_full_ = in_value_ = false;
  status_ = 0;
  head_bytes_ = 0;
  headers_.clear();
  body_.clear();
  method_.clear();
  target_.clear();
  error_.reset();
}

std::size_t ResponseParser::feed(std::string_view data) {
  if (error_ || complete_ || upgraded_ || body_full_ || data.empty()) return 0;
  if (head_done_) {
    // Backpressure: never take more body than there is room for (framing bytes count too).
    const std::size_t room =
        limits_.max_buffered_body > body_.size() ? limits_.max_buffered_body - body_.size() : 0;
    if (room == 0) return 0;
    data = data.substr(0, room);
  }
  const llhttp_errno_t err = llhttp_execute(&state_->parser, data.data(), data.size());
  if (err == HPE_OK) return data.size();
  const char* pos = llhttp_get_error_pos(&state_->parser);
  const std::size_t used = pos != nullptr ? static_cast<std::size_t>(pos - data.data()) : 0;
  if (err == HPE_PAUSED_UPGRADE) {
    upgraded_ = true;
    return used;
  }
  if (err == HPE_PAUSED) {
    if (body_full_ && !complete_) llhttp_resume(&state_->parser);  // resumes at the next feed
    return used;
  }
  if (!error_) {
    error_ = Problem{errc::RemoteProtocolViolation,
                     std::string("malformed HTTP response: ") + llhttp_errno_name(err) + " (" +
                         (state_->parser.reason != nullptr ? state_->parser.reason : "") + ")",
                     {}};
  }
  return used;
}

void ResponseParser::feed_eof() {
  if (error_ || complete_ || upgraded_) return;
  const llhttp_errno_t err = llhttp_finish(&state_->parser);
  if ((err == HPE_OK || err == HPE_PAUSED) && complete_) return;
  error_ = Problem{errc::ConnectionLost,
                   head_done_ ? "the connection closed in the middle of the response body"
                              : "the connection closed before a complete response head",
                   {}};
}

std::optional<std::string_view> ResponseParser::header(std::string_view name) const {
  for (const Header& h : headers_) {
    if (detail::iequals(h.name, name)) return std::string_view(h.value);
  }
  return std::nullopt;
}

Bytes ResponseParser::take_body() {
  body_full_ = false;
  return std::exchange(body_, {});
}

Result<std::string> write_request(const Request& request, std::string_view host) {
  auto out = write_request_head(request, host, request.body.size());
  if (out) out.value().append(request.body);
  return out;
}

Result<std::string> write_request_head(const Request& request, std::string_view host,
                                       std::size_t content_length) {
  if (request.method.empty() || has_crlf(request.method) || request.target.empty() ||
      request.target[0] != '/' || has_crlf(request.target) ||
      request.target.find(' ') != std::string::npos || has_crlf(host)) {
    return Problem{errc::ConfigurationError, "refusing to write a malformed HTTP request line", {}};
  }
  std::string out;
  out.reserve(128 + content_length);
  out.append(request.method)
      .append(" ")
      .append(request.target)
      .append(" HTTP/1.1\r\nHost: ")
      .append(host)
      .append("\r\n");
  for (const Header& h : request.headers) {
    if (h.name.empty() || has_crlf(h.name) || has_crlf(h.value) ||
        h.name.find(':') != std::string::npos) {
      return Problem{errc::ConfigurationError,
                     "refusing to write header \"" + h.name + "\": it would inject a header",
                     {}};
    }
    out.append(h.name).append(": ").append(h.value).append("\r\n");
  }
  if (content_length != 0 || request.method == "POST" || request.method == "PUT") {
    out.append("Content-Length: ").append(std::to_string(content_length)).append("\r\n");
  }
  out.append("\r\n");
  return out;
}

void LineSplitter::feed(std::string_view data) {
  if (error_) return;
  buffer_.append(data);
}

std::optional<std::string> LineSplitter::next_line() {
  if (error_) return std::nullopt;
  const std::size_t nl = buffer_.find('\n', scanned_);
  if (nl == std::string::npos) {
    scanned_ = buffer_.size();
    if (buffer_.size() > max_line_) {
      error_ = Problem{errc::MessageTooLarge,
                       "a line of the stream exceeds " + std::to_string(max_line_) + " bytes",
                       {}};
    }
    return std::nullopt;
  }
  if (nl > max_line_) {
    error_ = Problem{errc::MessageTooLarge,
                     "a line of the stream exceeds " + std::to_string(max_line_) + " bytes",
                     {}};
    return std::nullopt;
  }
  std::string line = buffer_.substr(0, nl);
  buffer_.erase(0, nl + 1);
  scanned_ = 0;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

std::optional<std::string> LineSplitter::finish() {
  if (error_ || buffer_.empty()) return std::nullopt;
  std::string rest = std::exchange(buffer_, {});
  scanned_ = 0;
  if (!rest.empty() && rest.back() == '\r') rest.pop_back();
  return rest;
}

}  // namespace sandboxio::http
