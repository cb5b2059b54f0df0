// Streaming tar codec (POSIX ustar with PAX extended headers), for Docker's archive endpoints.
// The writer produces headers; file contents are streamed by the caller between them. The
// reader consumes bytes in pieces of any size and hands over entries and content pieces as they
// arrive, without holding a whole file.
//
//   std::string out = sandboxio::tar::header({.name = "tmp/a.txt", .size = 5});
//   out += "hello"; out += sandboxio::tar::padding(5); out += sandboxio::tar::end();
//
//   sandboxio::tar::Reader r;
//   r.feed(bytes, [&](const sandboxio::tar::Entry& e) { ... },
//                 [&](std::string_view piece) { ... });   // content of the last entry
//   if (r.error()) ...;  if (r.finished()) ...;
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "sandboxio/file_info.hpp"
#include "sandboxio/result.hpp"

namespace sandboxio::tar {

struct Entry {
  std::string name{};  // relative path inside the archive, "dir/file"
  FileType type = FileType::File;
  std::uint64_t size = 0;  // content bytes (files only)
  std::uint32_t mode = 0644;
  std::int64_t mtime = 0;
  std::string link_target{};
  std::uint32_t uid = 0, gid = 0;
};

/// The header block(s) of one entry: a PAX extended header first when the name, the link
/// target or the size do not fit ustar's fields. Names with a NUL byte are refused.
[[nodiscard]] Result<std::string> header(const Entry& entry);
/// Zero bytes that pad `content_size` bytes of content to the 512-byte block.
[[nodiscard]] std::string padding(std::uint64_t content_size);
/// The end-of-archive marker: two zero blocks.
[[nodiscard]] std::string end();

class Reader {
 public:
  using OnEntry = std::function<void(const Entry&)>;
  using OnData = std::function<void(std::string_view)>;

  struct Limits {
    std::size_t max_pax_bytes = 1 << 20;  // an extended header's size
  };
  Reader() : Reader(Limits{}) {}
  explicit Reader(Limits limits) : limits_(limits) {}

  /// Consumes all of `data`. Returns false once an error is set (sticky).
  bool feed(std::string_view data, const OnEntry& on_entry, const OnData& on_data);
  /// The end-of-archive marker was read (or the stream ended cleanly between entries).
  [[nodiscard]] bool finished() const noexcept { return finished_; }
  /// Call at end of input: an archive cut inside an entry becomes an error.
  void feed_eof();
  [[nodiscard]] const std::optional<Problem>& error() const& noexcept { return error_; }

 private:
  void on_block(const OnEntry& on_entry);
  void fail(std::string detail);

  Limits limits_;
  std::string block_;            // a header block being assembled
  std::uint64_t remaining_ = 0;  // content bytes left in the current entry
  std::uint64_t pad_ = 0;        // padding bytes left after it
  enum class Content : std::uint8_t {
    File,
    Pax,
    LongName,
    LongLink,
    Skip
  } content_ = Content::File;
  std::string meta_;  // PAX or GNU long-name content being collected
  std::optional<std::string> next_name_, next_link_;
  std::optional<std::uint64_t> next_size_;
  bool zero_block_seen_ = false;
  bool finished_ = false;
  std::optional<Problem> error_;
};

}  // namespace sandboxio::tar
