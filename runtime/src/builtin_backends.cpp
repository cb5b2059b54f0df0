// The first-party schemes: fake://, docker://, e2b://, local:// and modal://.
#include "sandboxio/config.hpp"
#include "sandboxio/docker.hpp"
#include "sandboxio/e2b.hpp"
#include "sandboxio/fake.hpp"
#include "sandboxio/local.hpp"
#include "sandboxio/modal.hpp"

namespace sandboxio {

void register_builtin_backends(BackendRegistry& registry) {
  (void)registry.add(fake::backend_entry());
  (void)registry.add(docker::backend_entry());
  (void)registry.add(e2b::backend_entry());
  (void)registry.add(local::backend_entry());
  (void)registry.add(modal::backend_entry());
}

}  // namespace sandboxio
