// Docker's multiplexed exec stream: 8-byte frame headers [type, 0, 0, 0, u32 big-endian
// length] followed by the payload; types 0 stdin, 1 stdout, 2 stderr, 3 system error. The
// demultiplexer hands payload pieces over as they arrive, without waiting for whole frames.
//
//   sandboxio::docker::StreamDemux demux;
//   demux.feed(bytes, [&](sandboxio::docker::FrameType t, std::string_view piece) { ... });
//   if (demux.error()) ...;               // sticky: unknown type, nonzero padding, frame too big
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sandboxio/result.hpp"

namespace sandboxio::docker {

enum class FrameType : std::uint8_t { Stdin = 0, Stdout = 1, Stderr = 2, SystemError = 3 };

class StreamDemux {
 public:
  /// Frames larger than max_frame are refused (SBX_E1803): the daemon writes 4-32 KiB.
  explicit StreamDemux(std::uint32_t max_frame = 16u << 20) : max_frame_(max_frame) {}

  /// Consumes all of `data`, calling sink(FrameType, std::string_view piece) for each payload
  /// piece; a piece's view is valid during the call only. Returns false once an error is set.
  template <class Sink>
  bool feed(std::string_view data, Sink&& sink) {
    while (!data.empty() && !error_) {
      if (remaining_ == 0) {
        const std::size_t take = std::min<std::size_t>(8 - have_, data.size());
        for (std::size_t i = 0; i < take; ++i)
          header_[have_ + i] = static_cast<unsigned char>(data[i]);
        have_ += take;
        data.remove_prefix(take);
        if (have_ == 8) start_frame();
        continue;
      }
      const std::size_t n = std::min<std::size_t>(remaining_, data.size());
      sink(type_, data.substr(0, n));
      remaining_ -= static_cast<std::uint32_t>(n);
      data.remove_prefix(n);
    }
    return !error_;
  }

  /// True between frames (the stream may end here without losing anything).
  [[nodiscard]] bool at_frame_boundary() const noexcept { return remaining_ == 0 && have_ == 0; }
  [[nodiscard]] const std::optional<Problem>& error() const& noexcept { return error_; }

 private:
  void start_frame();

  std::uint32_t max_frame_;
  std::array<unsigned char, 8> header_{};
  std::size_t have_ = 0;
  std::uint32_t remaining_ = 0;
  FrameType type_ = FrameType::Stdout;
  std::optional<Problem> error_;
};

}  // namespace sandboxio::docker
