// The first-party schemes. A backend that is not compiled in stays listed, with the build
// option that enables it, so that users get SBX_E1101 BackendNotInstalled (not "unknown").
#include "sandboxio/config.hpp"
#include "sandboxio/docker.hpp"
#include "sandboxio/fake.hpp"

namespace sandboxio {

void register_builtin_backends(BackendRegistry& registry) {
  (void)registry.add(fake::backend_entry());
  (void)registry.add(docker::backend_entry());
  (void)registry.add({.scheme = "e2b",
                      .summary = "E2B cloud microVMs",
                      .factory = {},
                      .enable_hint = "The e2b:// backend is not in this release yet; it lands "
                                     "with the SANDBOXIO_WITH_E2B CMake option.",
                      .options = {}});
}

}  // namespace sandboxio
