#include "sandboxio/codec/docker_stream.hpp"

namespace sandboxio::docker {

void StreamDemux::start_frame() {
  have_ = 0;
  if (header_[0] > 3 || header_[1] != 0 || header_[2] != 0 || header_[3] != 0) {
    error_ =
        Problem{errc::RemoteProtocolViolation,
                "not a Docker stream frame header (type byte " + std::to_string(header_[0]) + ")",
                "Was the exec started with Tty=false? A TTY stream is raw, not framed."};
    return;
  }
  type_ = static_cast<FrameType>(header_[0]);
  const std::uint32_t length = (std::uint32_t{header_[4]} << 24) |
                               (std::uint32_t{header_[5]} << 16) |
                               (std::uint32_t{header_[6]} << 8) | std::uint32_t{header_[7]};
  if (length > max_frame_) {
    error_ = Problem{errc::MessageTooLarge,
                     "a stream frame of " + std::to_string(length) + " bytes exceeds " +
                         std::to_string(max_frame_),
                     {}};
    return;
  }
  remaining_ = length;
}

}  // namespace sandboxio::docker
