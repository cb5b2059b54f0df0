// sandboxio-agent: the identity commands run as (--user), read from the image's own
// /etc/passwd and /etc/group (a static binary has no NSS, and the image's files are what
// `docker run --user` would use too).
#include <fcntl.h>
#include <grp.h>
#include <sys/fsuid.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "agent.hpp"

namespace sandboxio::agent_main {
namespace {

/// The lines of a small file of the image (/etc/passwd, /etc/group), read with plain read(2):
/// iostreams would bring their locale machinery into the static binary (a third of its size).
/// A file larger than 4 MiB is read no further.
std::vector<std::string> lines_of(const char* path) {
  std::vector<std::string> lines;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return lines;
  std::string text;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || text.size() > (std::size_t{4} << 20)) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = line.find(':', start);
    out.push_back(line.substr(start, colon - start));
    if (colon == std::string::npos) return out;
    start = colon + 1;
  }
}

bool number(const std::string& s, unsigned long& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtoul(s.c_str(), &end, 10);
  return errno == 0 && *end == '\0' && s[0] != '-';
}

/// The /etc/passwd entry whose name (or, for a number, uid) is `who`.
std::optional<std::vector<std::string>> passwd_entry(const std::string& who, bool by_uid) {
  for (const std::string& line : lines_of("/etc/passwd")) {
    auto f = fields(line);
    if (f.size() >= 7 && (by_uid ? f[2] == who : f[0] == who)) return f;
  }
  return std::nullopt;
}

std::optional<gid_t> group_id(const std::string& name) {
  for (const std::string& line : lines_of("/etc/group")) {
    auto f = fields(line);
    unsigned long gid = 0;
    if (f.size() >= 3 && f[0] == name && number(f[2], gid)) return static_cast<gid_t>(gid);
  }
  return std::nullopt;
}

/// The supplementary groups /etc/group lists `name` in, besides `primary`.
std::vector<gid_t> member_of(const std::string& name, gid_t primary) {
  std::vector<gid_t> groups{primary};
  if (name.empty()) return groups;
  for (const std::string& line : lines_of("/etc/group")) {
    auto f = fields(line);
    unsigned long gid = 0;
    if (f.size() < 4 || !number(f[2], gid)) continue;
    std::size_t start = 0;
    const std::string& members = f[3];
    while (start <= members.size()) {
      const std::size_t comma = std::min(members.find(',', start), members.size());
      if (members.compare(start, comma - start, name) == 0 && comma - start == name.size() &&
          static_cast<gid_t>(gid) != primary) {
        groups.push_back(static_cast<gid_t>(gid));
      }
      start = comma + 1;
    }
  }
  return groups;
}

}  // namespace

Result<Identity> resolve_user(const std::string& spec) {
  const std::size_t colon = spec.find(':');
  const std::string user = spec.substr(0, colon);
  const std::string group = colon == std::string::npos ? "" : spec.substr(colon + 1);
  Identity id;
  unsigned long n = 0;
  std::optional<std::vector<std::string>> entry;
  if (number(user, n)) {
    id.uid = static_cast<uid_t>(n);
    id.gid = static_cast<gid_t>(n);
    entry = passwd_entry(user, true);
  } else {
    entry = passwd_entry(user, false);
    if (!entry || !number((*entry)[2], n)) {
      return Problem{
          errc::InvalidOption, "no user \"" + user + "\" in the image's /etc/passwd", {}};
    }
    id.uid = static_cast<uid_t>(n);
  }
  if (entry) {
    unsigned long g = 0;
    if (number((*entry)[3], g)) id.gid = static_cast<gid_t>(g);
    id.name = (*entry)[0];
    id.home = (*entry)[5];
  }
  if (!group.empty()) {
    if (number(group, n)) {
      id.gid = static_cast<gid_t>(n);
    } else if (auto g = group_id(group)) {
      id.gid = *g;
    } else {
      return Problem{
          errc::InvalidOption, "no group \"" + group + "\" in the image's /etc/group", {}};
    }
  }
  if (id.home.empty()) id.home = "/";
  id.groups = member_of(id.name, id.gid);
  return id;
}

bool take_identity(const Identity& id, std::string& error) {
  // Our own groups become the user's, so that files are checked as theirs and commands
  // inherit them; our fs identity becomes theirs, so that every file we create or open is
  // created or opened as they would. Our real and effective uid stay root: we need them to
  // start commands as the user and to signal them, and the user cannot signal or trace us.
  if (::setgroups(id.groups.size(), id.groups.data()) != 0) {
    error = std::string("setgroups: ") + std::strerror(errno);
    return false;
  }
  ::setfsgid(id.gid);
  ::setfsuid(id.uid);
  if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != id.uid ||
      static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))) != id.gid) {
    error = "setfsuid/setfsgid refused (the agent needs CAP_SETUID and CAP_SETGID for --user)";
    return false;
  }
  // HOME as `docker run --user` sets it, unless the sandbox's environment chose one.
  const char* home = std::getenv("HOME");
  if (home == nullptr || std::string(home) == "/root") ::setenv("HOME", id.home.c_str(), 1);
  return true;
}

}  // namespace sandboxio::agent_main
