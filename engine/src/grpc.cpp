// gRPC framing and answers, after grpc/doc/PROTOCOL-HTTP2.md and http-grpc-status-mapping.md.
#include "sandboxio/codec/grpc.hpp"

#include <algorithm>
#include <charconv>

#include "text.hpp"

namespace sandboxio::grpc {
namespace {

const std::string* find(const std::vector<http::Header>& headers, std::string_view name) {
  for (const auto& h : headers)
    if (h.name == name) return &h.value;
  return nullptr;
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// grpc-message is percent-encoded; a malformed escape is kept as it is (the spec asks
// clients not to fail on it).
std::string percent_decoded(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int a = hex(s[i + 1]), b = hex(s[i + 2]);
      if (a >= 0 && b >= 0) {
        out.push_back(static_cast<char>(a * 16 + b));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

// An HTTP status other than 200, as the gRPC status it stands for.
Code code_for_http(int status) {
  switch (status) {
    case 400:
      return Code::Internal;
    case 401:
      return Code::Unauthenticated;
    case 403:
      return Code::PermissionDenied;
    case 404:
      return Code::Unimplemented;
    case 429:
    case 502:
    case 503:
    case 504:
      return Code::Unavailable;
    default:
      return Code::Unknown;
  }
}

// A reset stream (RFC 9113 error codes), as the gRPC status it stands for.
Code code_for_reset(std::uint32_t error) {
  switch (error) {
    case 0x7:
      return Code::Unavailable;  // REFUSED_STREAM: not processed
    case 0x8:
      return Code::Cancelled;  // CANCEL
    case 0xb:
      return Code::ResourceExhausted;  // ENHANCE_YOUR_CALM
    case 0xc:
      return Code::PermissionDenied;  // INADEQUATE_SECURITY
    default:
      return Code::Internal;
  }
}

}  // namespace

std::string code_name(Code code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const auto i = static_cast<std::size_t>(code);
  return i < std::size(kNames) ? kNames[i] : "CODE_" + std::to_string(i);
}

std::string timeout_value(std::chrono::milliseconds timeout) {
  const std::int64_t ms = std::max<std::int64_t>(timeout.count(), 0);
  constexpr std::int64_t kMax = 99'999'999;  // eight digits
  if (ms <= kMax) return std::to_string(ms) + "m";
  const std::int64_t s = (ms + 999) / 1000;
  if (s <= kMax) return std::to_string(s) + "S";
  const std::int64_t m = (s + 59) / 60;
  if (m <= kMax) return std::to_string(m) + "M";
  return std::to_string(std::min<std::int64_t>((m + 59) / 60, kMax)) + "H";
}

http2::Request request(std::string authority, std::string path, std::vector<http::Header> metadata,
                       std::optional<std::chrono::milliseconds> timeout, std::string scheme) {
  http2::Request r{"POST", std::move(scheme), std::move(authority), std::move(path), {}};
  r.headers.push_back({"content-type", "application/grpc"});
  r.headers.push_back({"te", "trailers"});
  if (timeout) r.headers.push_back({"grpc-timeout", timeout_value(*timeout)});
  for (auto& h : metadata)
    r.headers.push_back({detail::ascii_lowered(h.name), std::move(h.value)});
  return r;
}

std::string frame(std::string_view message) {
  const auto n = static_cast<std::uint32_t>(message.size());
  std::string out{'\0', static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                  static_cast<char>(n >> 8), static_cast<char>(n)};
  out.append(message);
  return out;
}

void CallReader::finish(Status status) {
  if (!status_) status_ = std::move(status);
  buf_.clear();
  at_ = 0;
}

void CallReader::fail(Code code, Problem problem) {
  if (status_) return;
  Status s{code, problem.detail, {}, true};
  problem_ = std::move(problem);
  finish(std::move(s));
}

void CallReader::parse() {
  while (!status_ && buf_.size() - at_ >= 5) {
    const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + at_);
    const std::uint32_t len = (std::uint32_t{p[1]} << 24) | (std::uint32_t{p[2]} << 16) |
                              (std::uint32_t{p[3]} << 8) | std::uint32_t{p[4]};
    if ((p[0] & 1) != 0)
      return fail(Code::Internal, Problem{errc::RemoteProtocolViolation,
                                          "the gRPC server sent a compressed message, though no "
                                          "compression was offered",
                                          {}});
    if (p[0] != 0)
      return fail(Code::Internal,
                  Problem{errc::RemoteProtocolViolation,
                          "a gRPC message prefix with unknown flags " + std::to_string(p[0]),
                          {}});
    if (len > max_)
      return fail(Code::ResourceExhausted,
                  Problem{errc::MessageTooLarge,
                          "a gRPC message of " + std::to_string(len) + " bytes, over the " +
                              std::to_string(max_) + "-byte limit",
                          {}});
    if (buf_.size() - at_ - 5 < len) break;
    ready_.emplace_back(buf_, at_ + 5, len);
    at_ += 5 + len;
  }
  if (at_ > 0 && (at_ == buf_.size() || at_ >= (1 << 16))) {
    buf_.erase(0, at_);
    at_ = 0;
  }
}

void CallReader::on(const http2::Event& event) {
  if (status_) return;
  if (const auto* r = std::get_if<http2::Response>(&event)) {
    if (r->status != 200)
      return fail(code_for_http(r->status),
                  Problem{errc::RemoteProtocolViolation,
                          "the gRPC server answered HTTP " + std::to_string(r->status),
                          {}});
    const std::string* type = find(r->headers, "content-type");
    if (type == nullptr || !type->starts_with("application/grpc"))
      return fail(Code::Unknown, Problem{errc::RemoteProtocolViolation,
                                         "the server answered a gRPC call with content-type \"" +
                                             (type ? *type : std::string()) + "\"",
                                         {}});
    head_ = true;
    // Trailers-Only: the status rides in the head, and End follows.
    if (find(r->headers, "grpc-status") != nullptr) on(http2::Trailers{r->stream, r->headers});
    return;
  }
  if (const auto* d = std::get_if<http2::Data>(&event)) {
    if (!head_)
      return fail(Code::Internal,
                  Problem{errc::RemoteProtocolViolation, "gRPC data before the answer's head", {}});
    buf_.append(d->bytes);
    parse();
    return;
  }
  if (const auto* t = std::get_if<http2::Trailers>(&event)) {
    if (buf_.size() > at_)
      return fail(
          Code::Internal,
          Problem{errc::RemoteProtocolViolation, "the gRPC answer ended inside a message", {}});
    const std::string* code = find(t->headers, "grpc-status");
    int value = -1;
    if (code != nullptr) std::from_chars(code->data(), code->data() + code->size(), value);
    if (value < 0 || value > 255)
      return fail(Code::Internal, Problem{errc::RemoteProtocolViolation,
                                          "the gRPC answer's trailers have no valid grpc-status",
                                          {}});
    const std::string* message = find(t->headers, "grpc-message");
    finish(Status{static_cast<Code>(value), message ? percent_decoded(*message) : std::string(),
                  t->headers, false});
    return;
  }
  if (std::holds_alternative<http2::End>(event)) {
    fail(Code::Internal, Problem{errc::RemoteProtocolViolation,
                                 head_ ? "the gRPC answer ended without a status"
                                       : "the gRPC answer ended without a head",
                                 {}});
    return;
  }
  if (const auto* r = std::get_if<http2::Reset>(&event)) {
    Problem p = r->problem;
    fail(code_for_reset(r->error_code), std::move(p));
  }
}

std::optional<std::string> CallReader::next_message() {
  if (next_ >= ready_.size()) {
    ready_.clear();
    next_ = 0;
    return std::nullopt;
  }
  return std::move(ready_[next_++]);
}

}  // namespace sandboxio::grpc
