#include "sandboxio/codec/connect.hpp"

namespace sandboxio::connect {

Bytes envelope(std::string_view message, std::uint8_t flags) {
  Bytes out;
  out.reserve(message.size() + 5);
  out.push_back(static_cast<char>(flags));
  const auto n = static_cast<std::uint32_t>(message.size());
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((n >> shift) & 0xFF));
  out.append(message);
  return out;
}

void EnvelopeReader::fail(errc code, std::string detail) {
  if (!error_) error_ = Problem{code, std::move(detail), {}};
}

void EnvelopeReader::feed(std::string_view data) {
  if (error_ || data.empty()) return;
  if (ended_) return fail(errc::RemoteProtocolViolation, "bytes after the end-stream envelope");
  if (read_ > 0 && read_ == buffer_.size()) {
    buffer_.clear();
    read_ = 0;
  } else if (read_ > (std::size_t{64} << 10) && read_ * 2 > buffer_.size()) {
    buffer_.erase(0, read_);
    read_ = 0;
  }
  buffer_.append(data);
}

std::optional<Envelope> EnvelopeReader::next() {
  if (error_ || ended_) return std::nullopt;
  const std::size_t have = buffer_.size() - read_;
  if (have < 5) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + read_);
  const std::uint8_t flags = p[0];
  const std::size_t length = std::size_t{p[1]} << 24 | std::size_t{p[2]} << 16 |
                             std::size_t{p[3]} << 8 | std::size_t{p[4]};
  if ((flags & kCompressed) != 0) {
    fail(errc::RemoteProtocolViolation, "a compressed envelope, though none was asked for");
    return std::nullopt;
  }
  if ((flags & ~(kCompressed | kEndStream)) != 0) {
    fail(errc::RemoteProtocolViolation, "an envelope with unknown flags " + std::to_string(flags));
    return std::nullopt;
  }
  if (length > max_message_) {
    fail(errc::MessageTooLarge, "an envelope of " + std::to_string(length) +
                                    " bytes, more than the bound of " +
                                    std::to_string(max_message_));
    return std::nullopt;
  }
  if (have - 5 < length) return std::nullopt;
  Envelope e;
  e.flags = flags;
  e.message.assign(buffer_, read_ + 5, length);
  read_ += 5 + length;
  if (e.end_stream()) {
    ended_ = true;
    if (read_ != buffer_.size())
      fail(errc::RemoteProtocolViolation, "bytes after the end-stream envelope");
  }
  return e;
}

void EnvelopeReader::finish() {
  if (error_ || ended_) return;
  if (buffer_.size() != read_) {
    fail(errc::ConnectionLost, "the stream ended inside an envelope");
  } else {
    fail(errc::ConnectionLost, "the stream ended without its end-stream envelope");
  }
}

std::optional<Error> error_of(const json::Value& message) {
  const json::Value* e = message.find("error");
  const json::Value& body = e && e->is_object() ? *e : message;
  const auto code = body.string_at("code");
  if (!code) return std::nullopt;
  return Error{std::string(*code), std::string(body.string_at("message").value_or(""))};
}

}  // namespace sandboxio::connect
