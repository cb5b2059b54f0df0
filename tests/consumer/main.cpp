// Uses the installed package the way a downstream program would.
#include <iostream>

#include <sandboxio/config.hpp>
#include <sandboxio/dsn.hpp>
#include <sandboxio/errors.hpp>
#include <sandboxio/sync.hpp>

int main() {
  auto dsn = sandboxio::parse_dsn("docker://python:3.12-slim?pull=never").value();
  // docker:// and e2b:// are built in.
  auto docker = sandboxio::registry().resolve(dsn);
  if (!docker.ok()) return 1;
  auto e2b = sandboxio::registry().resolve(sandboxio::parse_dsn("e2b://base").value());
  if (!e2b.ok()) return 1;
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
