// Test helpers for the HTTP/2 codec: frames built by hand (a hostile peer's bytes), and an
// event log that is the same whatever sizes the peer's bytes arrived in.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sandboxio/codec/http2.hpp"

namespace sandboxio::test::h2 {

enum Type : std::uint8_t {
  kData = 0,
  kHeaders = 1,
  kRstStream = 3,
  kSettings = 4,
  kPushPromise = 5,
  kPing = 6,
  kGoAway = 7,
  kWindowUpdate = 8,
  kContinuation = 9
};
enum Flag : std::uint8_t { kEndStream = 1, kAck = 1, kEndHeaders = 4 };

inline std::string u32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

/// One frame: the 9-byte header, then the payload.
inline std::string frame(std::uint8_t type, std::uint8_t flags, std::uint32_t stream,
                         std::string_view payload) {
  const auto n = static_cast<std::uint32_t>(payload.size());
  std::string f{static_cast<char>(n >> 16), static_cast<char>(n >> 8), static_cast<char>(n),
                static_cast<char>(type), static_cast<char>(flags)};
  f += u32(stream & 0x7fffffffU);
  f += payload;
  return f;
}

/// An HPACK field block: ":status" from the static table (200 is index 8, 404 index 13) and
/// literal fields without indexing (names and values under 127 bytes).
inline std::string fields(int status,
                          const std::vector<std::pair<std::string, std::string>>& rest = {}) {
  std::string b;
  if (status == 200)
    b += '\x88';
  else if (status == 404)
    b += '\x8d';
  else if (status != 0) {
    const std::string s = std::to_string(status);
    b += '\x08';  // literal, name :status from the static table (index 8)
    b += static_cast<char>(s.size());
    b += s;
  }
  for (const auto& [name, value] : rest) {
    b += '\x00';
    b += static_cast<char>(name.size());
    b += name;
    b += static_cast<char>(value.size());
    b += value;
  }
  return b;
}

inline std::string server_settings() {
  return frame(kSettings, 0, 0, "");
}

/// The events of one connection in a form that does not depend on how its bytes were split:
/// a stream's Data events that follow each other are joined, every event is one line.
struct Log {
  std::vector<std::string> lines;
  std::map<http2::StreamId, std::string> bodies;

  void add(const http2::Event& e) {
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, http2::Response>) {
            std::string l = "response " + std::to_string(v.stream) + " " + std::to_string(v.status);
            for (const auto& h : v.headers)
              l += " " + h.name + "=" + h.value;
            lines.push_back(l);
          } else if constexpr (std::is_same_v<T, http2::Data>) {
            const std::string l = "data " + std::to_string(v.stream);
            if (lines.empty() || lines.back() != l) lines.push_back(l);
            bodies[v.stream] += v.bytes;
          } else if constexpr (std::is_same_v<T, http2::Trailers>) {
            std::string l = "trailers " + std::to_string(v.stream);
            for (const auto& h : v.headers)
              l += " " + h.name + "=" + h.value;
            lines.push_back(l);
          } else if constexpr (std::is_same_v<T, http2::End>) {
            lines.push_back("end " + std::to_string(v.stream));
          } else if constexpr (std::is_same_v<T, http2::Reset>) {
            lines.push_back("reset " + std::to_string(v.stream) + " " +
                            std::to_string(v.error_code) + (v.retryable ? " retryable " : " ") +
                            std::string(error_info(v.problem.code).name));
          } else {
            lines.push_back("goaway " + std::to_string(v.last_stream) + " " +
                            std::to_string(v.error_code));
          }
        },
        e);
  }
  friend bool operator==(const Log&, const Log&) = default;
};

/// Drains a client's events into `log`, consuming every Data at once.
inline void drain(http2::Client& c, Log& log) {
  while (auto e = c.poll_event()) {
    if (auto* d = std::get_if<http2::Data>(&*e)) c.consume(d->stream, d->bytes.size());
    log.add(*e);
  }
}

}  // namespace sandboxio::test::h2
