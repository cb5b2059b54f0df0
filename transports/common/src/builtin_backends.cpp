// The first-party schemes. A backend that is not compiled in stays listed, with the build
// option that enables it, so that users get SBX_E1101 BackendNotInstalled (not "unknown").
#include "sandboxio/config.hpp"
#include "sandboxio/fake.hpp"

namespace sandboxio {

void register_builtin_backends(BackendRegistry& registry) {
  (void)registry.add(fake::backend_entry());
  (void)registry.add({.scheme = "docker",
                      .summary = "Docker Engine containers (local socket or tcp:// with TLS)",
                      .factory = {},
                      .enable_hint = "The docker:// backend is not in this release yet; it lands "
                                     "with the SANDBOXIO_WITH_DOCKER CMake option.",
                      .options = {}});
  (void)registry.add({.scheme = "e2b",
                      .summary = "E2B cloud microVMs",
                      .factory = {},
                      .enable_hint = "The e2b:// backend is not in this release yet; it lands "
                                     "with the SANDBOXIO_WITH_E2B CMake option.",
                      .options = {}});
}

}  // namespace sandboxio
