// Files, streamed in chunks: no tar, no shell. A write goes to a temporary file next to the
// target and is renamed over it at FileEnd, so a cancelled or failed upload leaves the old
// file as it was. Reads are paced by the host's credit like process output.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent.hpp"

namespace sandboxio::agent_main {
namespace {

agent::Entry entry_of(const std::string& name, const struct stat& st) {
  agent::Entry e;
  e.name = name;
  e.kind = S_ISREG(st.st_mode)   ? agent::Entry::Kind::File
           : S_ISDIR(st.st_mode) ? agent::Entry::Kind::Directory
           : S_ISLNK(st.st_mode) ? agent::Entry::Kind::Symlink
                                 : agent::Entry::Kind::Other;
  e.size = static_cast<std::uint64_t>(st.st_size);
  e.mode = st.st_mode & 07777;
  e.mtime = st.st_mtime;
  return e;
}

/// mkdir -p; returns 0 or errno.
int make_parents(const std::string& path, mode_t mode) {
  for (std::size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return errno;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

/// rm -r below a directory fd; returns 0 or errno.
int remove_tree(int dirfd, const char* name) {
  struct stat st {};
  if (::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno;
  if (!S_ISDIR(st.st_mode)) return ::unlinkat(dirfd, name, 0) == 0 ? 0 : errno;
  const int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return errno;
  }
  int result = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    if ((result = remove_tree(fd, e->d_name)) != 0) break;
  }
  ::closedir(d);
  if (result != 0) return result;
  return ::unlinkat(dirfd, name, AT_REMOVEDIR) == 0 ? 0 : errno;
}

/// The one entry that answers for `path` itself (Stat, and the start of a ReadFile).
agent::Entries entry_for(const std::string& path, const struct stat& st) {
  agent::Entries one;
  const auto slash = path.rfind('/');
  one.entries.push_back(entry_of(slash == std::string::npos ? path : path.substr(slash + 1), st));
  return one;
}

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

}  // namespace

void Agent::fail(Key channel, int error, const std::string& message) {
  send(Type::Failure, channel,
       agent::Failure{error, message + (error != 0 ? std::string(": ") + std::strerror(error) : "")}
           .encode());
}

void Agent::read_file(Key channel, const agent::PathRequest& r) {
  if (channel_in_use(channel)) return fail(channel, 0, "channel in use");
  const int fd = ::open(r.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return fail(channel, errno, r.path);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    const int error = S_ISDIR(st.st_mode) ? EISDIR : errno;
    ::close(fd);
    return fail(channel, error, r.path);
  }
  // The file as opened, first: the host sizes its buffer once (and refuses a file too large
  // for it before any of it travels).
  send(Type::Entries, channel, entry_for(r.path, st).encode());
  Transfer t;
  t.reading = true;
  t.fd = fd;
  t.credit = r.window;
  t.path = r.path;
  transfers_.emplace(channel, std::move(t));
}

bool Agent::pump_read(Key channel, Transfer& t) {
  if (t.fd < 0 || t.credit == 0) return false;
  const std::span<char> buf = io_buffer();
  const ssize_t n = ::read(t.fd, buf.data(), std::min<std::uint64_t>(buf.size(), t.credit));
  if (n > 0) {
    send(Type::FileData, channel, std::string_view(buf.data(), static_cast<std::size_t>(n)));
    t.credit -= static_cast<std::uint64_t>(n);
    t.size += static_cast<std::uint64_t>(n);
    return true;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  if (n < 0) {
    fail(channel, errno, t.path);
  } else {
    send(Type::FileEnd, channel);
  }
  ::close(t.fd);
  t.fd = -1;
  return false;
}

void Agent::write_file(Key channel, const agent::PathRequest& r) {
  if (channel_in_use(channel)) return fail(channel, 0, "channel in use");
  Transfer t;
  t.reading = false;
  t.path = r.path;
  t.temp = parent_of(r.path) + "/.sandboxio-upload-" + std::to_string(channel);
  if ((r.flags & agent::PathRequest::kParents) != 0) {
    if (const int error = make_parents(parent_of(r.path), 0755); error != 0) {
      t.failed = true;
      fail(channel, error, parent_of(r.path));
    }
  }
  struct stat st {};
  if (!t.failed && ::stat(r.path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    t.failed = true;
    fail(channel, EISDIR, r.path);
  }
  if (!t.failed) {
    t.fd = ::open(t.temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                  static_cast<mode_t>(r.mode & 07777));
    if (t.fd < 0) {
      t.failed = true;
      fail(channel, errno, r.path);
    } else {
      ::fchmod(t.fd, static_cast<mode_t>(r.mode & 07777));  // exactly the mode asked, umask aside
    }
  }
  transfers_.emplace(channel, std::move(t));
}

void Agent::file_data(Key channel, std::string data) {
  auto it = transfers_.find(channel);
  if (it == transfers_.end() || it->second.reading || it->second.failed) return;
  Transfer& t = it->second;
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(t.fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      ::close(t.fd);
      ::unlink(t.temp.c_str());
      t.fd = -1;
      t.failed = true;
      return fail(channel, error, t.path);
    }
    done += static_cast<std::size_t>(n);
  }
  t.size += data.size();
}

void Agent::file_end(Key channel) {
  auto it = transfers_.find(channel);
  if (it == transfers_.end() || it->second.reading) return;
  Transfer t = std::move(it->second);
  transfers_.erase(it);
  if (t.failed) return;
  if (::close(t.fd) != 0) {
    const int error = errno;
    ::unlink(t.temp.c_str());
    return fail(channel, error, t.path);
  }
  if (::rename(t.temp.c_str(), t.path.c_str()) != 0) {
    const int error = errno;
    ::unlink(t.temp.c_str());
    return fail(channel, error, t.path);
  }
  send(Type::Done, channel, agent::Done{t.size}.encode());
}

void abandon(Transfer& t) {
  if (t.fd >= 0) ::close(t.fd);
  t.fd = -1;
  if (!t.reading && !t.temp.empty()) ::unlink(t.temp.c_str());  // the old file stays
}

bool Agent::cancel_transfer(Key channel) {
  auto it = transfers_.find(channel);
  if (it == transfers_.end()) return false;
  abandon(it->second);
  transfers_.erase(it);
  return true;
}

void Agent::list_dir(Key channel, const agent::PathRequest& r) {
  const int fd = ::open(r.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail(channel, errno, r.path);
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return fail(channel, errno, r.path);
  }
  agent::Entries batch;
  std::size_t bytes = 0;
  std::uint64_t count = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    struct stat st {};
    if (::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    batch.entries.push_back(entry_of(e->d_name, st));
    bytes += 32 + std::strlen(e->d_name);
    ++count;
    if (bytes > agent::kMaxPayload / 2) {  // a huge directory goes out in several frames
      send(Type::Entries, channel, batch.encode());
      batch.entries.clear();
      bytes = 0;
    }
  }
  ::closedir(d);
  if (!batch.entries.empty()) send(Type::Entries, channel, batch.encode());
  send(Type::Done, channel, agent::Done{count}.encode());
}

void Agent::stat_path(Key channel, const agent::PathRequest& r) {
  struct stat st {};
  if (::lstat(r.path.c_str(), &st) != 0) return fail(channel, errno, r.path);
  send(Type::Entries, channel, entry_for(r.path, st).encode());
}

void Agent::make_dir(Key channel, const agent::PathRequest& r) {
  const auto mode = static_cast<mode_t>(r.mode & 07777);
  int error = 0;
  if ((r.flags & agent::PathRequest::kParents) != 0) {
    error = make_parents(r.path, mode);
  } else if (::mkdir(r.path.c_str(), mode) != 0) {
    error = errno;
  }
  if (error != 0) return fail(channel, error, r.path);
  send(Type::Done, channel, agent::Done{}.encode());
}

void Agent::remove_path(Key channel, const agent::PathRequest& r) {
  int error = 0;
  if ((r.flags & agent::PathRequest::kRecursive) != 0) {
    error = remove_tree(AT_FDCWD, r.path.c_str());
  } else if (::unlink(r.path.c_str()) != 0) {
    error = errno;
    if (error == EISDIR && ::rmdir(r.path.c_str()) == 0) error = 0;
  }
  if (error != 0) return fail(channel, error, r.path);
  send(Type::Done, channel, agent::Done{}.encode());
}

}  // namespace sandboxio::agent_main
