// The flight recorder's driver side (sandboxio/flight_recorder.hpp): the file a trace goes
// to, and the machines recorded and replayed.
#include "sandboxio/flight_recorder.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "sandboxio/backend/identity.hpp"
#include "sandboxio/config.hpp"
#include "sandboxio/redact.hpp"

#ifndef SANDBOXIO_VERSION
#define SANDBOXIO_VERSION "0"
#endif

namespace sandboxio {
namespace {

/// A trace file, written in 1 MiB pieces and at each submitted call (so that what led up to a
/// crash is on disk). A write that fails ends the trace where it was (the recorder stops and
/// the session goes on: a full disk must not stop the sandbox).
class FileSink final : public flight::TraceSink {
 public:
  explicit FileSink(int fd) : fd_(fd) {}
  ~FileSink() override { close(); }
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  bool write(std::string_view bytes) override {
    if (fd_ < 0) return false;
    buffer_.append(bytes);
    if (buffer_.size() >= (std::size_t{1} << 20)) flush();
    return fd_ >= 0;
  }
  void checkpoint() override { flush(); }
  void close() override {
    if (fd_ < 0) return;
    flush();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  void flush() {
    std::size_t at = 0;
    while (at < buffer_.size() && fd_ >= 0) {
      const ssize_t n = ::write(fd_, buffer_.data() + at, buffer_.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd_);
        fd_ = -1;
        break;
      }
      at += static_cast<std::size_t>(n);
    }
    buffer_.clear();
  }

  int fd_;
  std::string buffer_{};
};

Result<std::uint64_t> record_max() {
  const char* raw = std::getenv("SBX_RECORD_MAX_MIB");
  if (raw == nullptr || *raw == '\0') return kDefaultRecordMaxMib << 20;
  char* end = nullptr;
  const unsigned long long mib = std::strtoull(raw, &end, 10);
  if (end == raw || *end != '\0' || mib == 0 || mib > (std::uint64_t{1} << 20)) {
    return Problem{errc::InvalidEnvironment,
                   "SBX_RECORD_MAX_MIB is \"" + std::string(raw).substr(0, 32) +
                       "\", which is not a number of MiB between 1 and 1048576",
                   "Unset SBX_RECORD_MAX_MIB (256 MiB) or set it to a whole number of MiB."};
  }
  return static_cast<std::uint64_t>(mib) << 20;
}

Result<int> open_trace(const std::string& dir, std::string_view scheme, errc code,
                       std::string_view from) {
  auto fail = [&](const std::string& what) -> Problem {
    return Problem{code, std::string(from) + ": " + what,
                   "Name a directory this process can create or write; traces are written "
                   "there owner-only (docs/how-to/observability.md)."};
  };
  // Made with its missing parents, each owner-only.
  for (std::size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string part = dir.substr(0, slash);
    if (!part.empty() && ::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
      return fail("cannot make " + part + " (" + std::strerror(errno) + ")");
    if (slash == std::string::npos) break;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return fail(dir + " is not a directory");
  static std::atomic<std::uint64_t> count{0};
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  const std::string path = dir + "/" + stamp + "-" + std::string(scheme) + "-" +
                           std::to_string(::getpid()) + "-" + std::to_string(++count) + ".sbxtrace";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return fail("cannot create " + path + " (" + std::strerror(errno) + ")");
  return fd;
}

}  // namespace

Result<std::unique_ptr<Machine>> make_machine(const Dsn& dsn, const CreateOptions& options) {
  auto entry = registry().resolve(dsn);
  if (!entry) return entry.problem();
  std::string dir = options.record;
  errc code = errc::InvalidCreateOptions;
  std::string_view from = "CreateOptions::record";
  if (dir.empty()) {
    const char* env = std::getenv("SBX_RECORD");
    if (env == nullptr || *env == '\0') return entry.value()->make(dsn);
    dir = env;
    code = errc::InvalidEnvironment;
    from = "SBX_RECORD";
  }
  auto max = record_max();
  if (!max) return max.problem();
  flight::Header header;
  header.dsn = Redactor().redact(dsn.to_string());
  header.version = SANDBOXIO_VERSION;
  header.recorded_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  std::unique_ptr<Machine> machine;
  {
    backend::AmbientScope scope(backend::AmbientScope::Mode::Capture, header.ambient);
    auto made = entry.value()->make(dsn);
    if (!made) return made.problem();
    machine = std::move(made).value();
  }
  auto fd = open_trace(dir, dsn.scheme, code, from);
  if (!fd) return fd.problem();
  return std::unique_ptr<Machine>(std::make_unique<flight::Recorder>(
      std::move(machine), header, std::make_shared<FileSink>(fd.value()), max.value()));
}

Result<std::string> read_trace(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Problem{
        errc::TraceInvalid, "cannot open " + path + " (" + std::strerror(errno) + ")", {}};
  std::string bytes;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Problem{
          errc::TraceInvalid, "cannot read " + path + " (" + std::strerror(err) + ")", {}};
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return bytes;
}

Result<std::unique_ptr<Machine>> machine_for_replay(const flight::Header& header) {
  auto dsn = parse_dsn(header.dsn);
  if (!dsn) return dsn.problem();
  auto entry = registry().resolve(dsn.value());
  if (!entry) return entry.problem();
  std::map<std::string, std::string> ambient = header.ambient;
  backend::AmbientScope scope(backend::AmbientScope::Mode::Replay, ambient);
  return entry.value()->make(dsn.value());
}

}  // namespace sandboxio
