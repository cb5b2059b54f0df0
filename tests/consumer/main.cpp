// Uses the installed package the way a downstream program would.
#include <iostream>

#include <sandboxio/config.hpp>
#include <sandboxio/dsn.hpp>
#include <sandboxio/errors.hpp>
#include <sandboxio/sync.hpp>

int main() {
  auto dsn = sandboxio::parse_dsn("docker://python:3.12-slim?pull=never").value();
  // Built without the docker backend, the registry says how to enable it.
  auto resolved = sandboxio::registry().resolve(dsn);
  if (resolved.ok() || resolved.problem().code != sandboxio::errc::BackendNotInstalled) return 1;
  try {
    (void)sandboxio::parse_dsn("not a dsn").value();
    return 1;
  } catch (const sandboxio::Error& e) {
    if (e.code() != sandboxio::errc::InvalidDsn) return 1;
  }
  auto sandbox = sandboxio::sync::Sandbox::create("fake://");
  auto result = sandbox.run({"sh", "-c", "echo installed; exit 4"});
  if (result.stdout_bytes != "installed\n" || result.exit_code != 4) return 1;
  std::cout << "consumer ok: " << dsn.scheme << " " << dsn.target << " "
            << sandboxio::error_catalog().size() << " error codes\n";
  return 0;
}
