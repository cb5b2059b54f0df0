// The process identity (driver side: it reads the host name, the pid, the environment and a
// random device; no machine object contains this file).
#include "sandboxio/backend/identity.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <random>

namespace sandboxio::backend {

namespace {
thread_local AmbientScope* open_scope = nullptr;

std::string random_session() {
  std::random_device rd;
  const char* digits = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::string s;
  for (int i = 0; i < 12; ++i)
    s.push_back(digits[rd() % 36]);
  return s;
}

const std::string& process_session_real() {
  static const std::string id = random_session();
  return id;
}

std::string real_owner() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(host) + ":" + std::to_string(::getpid());
}
}  // namespace

AmbientScope::AmbientScope(Mode mode, std::map<std::string, std::string>& values)
    : mode_(mode), values_(&values), outer_(open_scope) {
  open_scope = this;
}
AmbientScope::~AmbientScope() {
  open_scope = outer_;
}

std::string ambient(const std::string& key, const std::function<std::string()>& compute) {
  if (open_scope == nullptr) return compute();
  return open_scope->answer(key, compute);
}

bool ambient_replaying() noexcept {
  return open_scope != nullptr && open_scope->mode_ == AmbientScope::Mode::Replay;
}

std::string AmbientScope::answer(const std::string& key,
                                 const std::function<std::string()>& compute) {
  if (mode_ == Mode::Replay) {
    auto it = values_->find(key);
    if (it != values_->end()) return it->second;
    return compute();  // not read when it was recorded: read it now
  }
  std::string value = compute();
  (*values_)[key] = value;
  return value;
}

const std::string& process_session() {
  if (open_scope == nullptr) return process_session_real();
  thread_local std::string answered;
  answered = ambient("session", [] { return process_session_real(); });
  return answered;
}

std::string process_owner() {
  return ambient("owner", real_owner);
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
  const std::string value = ambient(std::string("env:") + name, [name] {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
  });
  return value.empty() ? fallback : value;
}

}  // namespace sandboxio::backend
