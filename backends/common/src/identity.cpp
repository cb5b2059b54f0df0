// The process identity (driver side: it reads the host name, the pid, the environment and a
// random device; no machine object contains this file).
#include "sandboxio/backend/identity.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <random>

namespace sandboxio::backend {

const std::string& process_session() {
  static const std::string id = [] {
    std::random_device rd;
    const char* digits = "0123456789abcdefghijklmnopqrstuvwxyz";
    std::string s;
    for (int i = 0; i < 12; ++i)
      s.push_back(digits[rd() % 36]);
    return s;
  }();
  return id;
}

std::string process_owner() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(host) + ":" + std::to_string(::getpid());
}

std::vector<std::string> owners_gone(const std::vector<std::string>& owners) {
  const std::string mine = process_owner();
  const std::string_view host = std::string_view(mine).substr(0, mine.rfind(':'));
  std::vector<std::string> gone;
  for (const std::string& owner : owners) {
    const std::size_t colon = owner.rfind(':');
    if (colon == std::string::npos || std::string_view(owner).substr(0, colon) != host) continue;
    const long pid = std::strtol(owner.c_str() + colon + 1, nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) gone.push_back(owner);
  }
  return gone;
}

std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace sandboxio::backend
