// FileInfo: one entry of list_files() or stat().
//
//   for (const sandboxio::FileInfo& f : sandbox.list_files("/tmp"))
//     if (f.type == sandboxio::FileType::Directory) std::cout << f.path << "/\n";
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sandboxio {

enum class FileType : std::uint8_t { File, Directory, Symlink, Other };

[[nodiscard]] constexpr std::string_view to_string(FileType t) noexcept {
  switch (t) {
    case FileType::File:
      return "file";
    case FileType::Directory:
      return "directory";
    case FileType::Symlink:
      return "symlink";
    case FileType::Other:
      return "other";
  }
  return "other";
}

struct FileInfo {
  std::string path{};  // absolute path inside the sandbox
  std::string name{};  // last path component
  FileType type = FileType::File;
  std::uint64_t size = 0;
  std::uint32_t mode = 0;                    // permission bits, 0644 and so on
  std::optional<std::int64_t> mtime_unix{};  // seconds since the epoch, when the backend knows it
  std::string link_target{};                 // for symlinks

  friend bool operator==(const FileInfo&, const FileInfo&) = default;
};

}  // namespace sandboxio
