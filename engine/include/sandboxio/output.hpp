// Output values: OutputChunk (bytes from one stream of a running process) and RichOutput
// (a Jupyter-style value such as an image or HTML from run_code).
//
//   for (const sandboxio::OutputChunk& c : chunks)
//     (c.stream == sandboxio::StreamKind::Stdout ? out : err) << c.data;
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sandboxio {

/// Bytes: output and file contents are arbitrary bytes (NUL included) held in a std::string.
using Bytes = std::string;

enum class StreamKind : std::uint8_t { Stdout, Stderr };

[[nodiscard]] constexpr std::string_view to_string(StreamKind s) noexcept {
  return s == StreamKind::Stdout ? "stdout" : "stderr";
}

/// A piece of one output stream. `offset` is the position of data[0] in its stream, so a
/// consumer can prove the stream has no gap: each chunk's offset is the previous offset plus
/// the previous size. Order is guaranteed within a stream, not between the two.
struct OutputChunk {
  StreamKind stream = StreamKind::Stdout;
  Bytes data{};
  std::uint64_t offset = 0;

  friend bool operator==(const OutputChunk&, const OutputChunk&) = default;
};

/// A rich value from run_code: mime type (for example "image/png", "text/html") and data
/// (base64 for binary types, as Jupyter sends them).
struct RichOutput {
  std::string mime_type{};
  std::string data{};

  friend bool operator==(const RichOutput&, const RichOutput&) = default;
};

}  // namespace sandboxio
