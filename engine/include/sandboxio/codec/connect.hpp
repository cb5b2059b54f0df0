// The Connect protocol (connectrpc.com) with the JSON codec, as E2B's envd speaks it over
// HTTP/1.1: unary calls are plain JSON bodies; a server stream is a sequence of envelopes
// [flags:1][length:4, big-endian][message], ending with an end-stream envelope (flags 0x02)
// whose JSON may carry {"error":{"code","message"}}. Bytes in, values out; no I/O.
//
//   sandboxio::Bytes body = sandboxio::connect::envelope(R"({"process":{"cmd":"ls"}})");
//   sandboxio::connect::EnvelopeReader r;
//   r.feed(bytes);
//   while (auto e = r.next()) { if (e->end_stream()) ...; else handle(e->message); }
//   if (r.error()) return *r.error();          // SBX_E1801 / SBX_E1803, sticky
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sandboxio/codec/json.hpp"
#include "sandboxio/output.hpp"
#include "sandboxio/result.hpp"

namespace sandboxio::connect {

inline constexpr std::uint8_t kCompressed = 0x01;
inline constexpr std::uint8_t kEndStream = 0x02;

/// One envelope of a stream.
struct Envelope {
  std::uint8_t flags = 0;
  Bytes message{};
  [[nodiscard]] bool end_stream() const noexcept { return (flags & kEndStream) != 0; }
};

/// An envelope around `message` (a request body of a server-streaming call).
[[nodiscard]] Bytes envelope(std::string_view message, std::uint8_t flags = 0);

/// Reads the envelopes of a response body as bytes arrive, in any split. A compressed envelope
/// (the client asked for no compression), a message larger than max_message, or anything
/// after the end-stream envelope is an error; errors are sticky and stop the reader.
class EnvelopeReader {
 public:
  explicit EnvelopeReader(std::size_t max_message = std::size_t{16} << 20)
      : max_message_(max_message) {}
  void feed(std::string_view data);
  /// The next complete envelope, if any.
  [[nodiscard]] std::optional<Envelope> next();
  /// The body ended: an error when it ended inside an envelope or before the end-stream one.
  void finish();
  [[nodiscard]] bool ended() const noexcept { return ended_; }
  [[nodiscard]] std::size_t buffered() const noexcept { return buffer_.size() - read_; }
  [[nodiscard]] const std::optional<Problem>& error() const& noexcept { return error_; }

 private:
  void fail(errc code, std::string detail);
  std::size_t max_message_;
  std::string buffer_{};
  std::size_t read_ = 0;
  bool ended_ = false;
  std::optional<Problem> error_{};
};

/// A Connect error: a code name ("not_found", "invalid_argument", ...) and its message.
struct Error {
  std::string code{};
  std::string message{};
};

/// The error of an end-stream message ({"error":{...}}) or of a unary error body
/// ({"code","message"}); nullopt when there is none.
[[nodiscard]] std::optional<Error> error_of(const json::Value& message);

}  // namespace sandboxio::connect
