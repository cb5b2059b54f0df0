#include "sandboxio/config.hpp"

#include <cstdlib>
#include <string>

#include "sandboxio/duration.hpp"

namespace sandboxio {
namespace {

Result<std::chrono::milliseconds> duration_from_env(const char* name,
                                                    std::chrono::milliseconds fallback) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  auto parsed = parse_duration(raw, name);
  if (!parsed || parsed.value().count() == 0) {
    return Problem{errc::InvalidEnvironment,
                   std::string(name) + " is \"" + std::string(raw).substr(0, 64) +
                       "\", which is not a positive duration",
                   "Unset " + std::string(name) + " or set it to a duration such as 500ms or 5s."};
  }
  return parsed;
}

}  // namespace

Result<std::chrono::milliseconds> teardown_grace() {
  return duration_from_env("SBX_TEARDOWN_GRACE", kDefaultTeardownGrace);
}

Result<std::chrono::milliseconds> audit_timeout() {
  return duration_from_env("SBX_AUDIT_TIMEOUT", kDefaultAuditTimeout);
}

// Defined by each built-in backend that is compiled in (see backends/CMakeLists.txt).
void register_builtin_backends(BackendRegistry& registry);

BackendRegistry& registry() {
  static BackendRegistry instance = [] {
    BackendRegistry r;
    register_builtin_backends(r);
    return r;
  }();
  return instance;
}

}  // namespace sandboxio
