// Records the replay scenario against a real Docker engine:
//   sandboxio_record_session OUT.rec
// The log holds every input the machine consumed and the transcript it produced; the replay
// tests feed it back with no daemon. Regenerate the committed fixture with
//   build/default/tests/sandboxio_record_session tests/replay/fixtures/docker_session.rec
// Without an engine it exits 77 (the test skips loudly), unless SBX_REQUIRE_DOCKER=1.
#include <cstdlib>
#include <iostream>
#include <string>

#include "sandboxio/backend/identity.hpp"
#include "scenario.hpp"
#include "session_log.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: sandboxio_record_session OUT.rec\n";
    return 2;
  }
  using namespace sandboxio;
  auto log = std::make_shared<replay::Log>();
  log->session = backend::process_session();
  log->owner = backend::process_owner();
  replay::set_identity(log->session, log->owner);
  try {
    log->transcript = replay::docker_scenario(replay::recording_link(make_posix_link(), log));
  } catch (const Error& e) {
    // No engine: the test skips loudly (77), unless SBX_REQUIRE_DOCKER=1 (CI).
    const char* require = std::getenv("SBX_REQUIRE_DOCKER");
    if (e.code() == errc::BackendUnavailable &&
        (require == nullptr || std::string(require) != "1")) {
      std::cerr << "SKIPPED LOUDLY: no Docker engine to record against: " << e.what() << "\n";
      return 77;
    }
    std::cerr << "recording failed: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "recording failed: " << e.what() << "\n";
    return 1;
  }
  log->save(argv[1]);
  std::cout << log->transcript << "entries " << log->entries.size() << ", bytes moved "
            << log->input_bytes() << "\n";
  return 0;
}
