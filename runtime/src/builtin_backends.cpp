// The first-party schemes: fake://, docker:// and e2b://.
#include "sandboxio/config.hpp"
#include "sandboxio/docker.hpp"
#include "sandboxio/e2b.hpp"
#include "sandboxio/fake.hpp"

namespace sandboxio {

void register_builtin_backends(BackendRegistry& registry) {
  (void)registry.add(fake::backend_entry());
  (void)registry.add(docker::backend_entry());
  (void)registry.add(e2b::backend_entry());
}

}  // namespace sandboxio
