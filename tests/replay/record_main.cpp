// Records the replay scenario against a real Docker engine:
//   sandboxio_record_session OUT.rec
// The log holds every input the machine consumed and the transcript it produced; the replay
// tests feed it back with no daemon. Regenerate the committed fixture with
//   build/default/tests/sandboxio_record_session tests/replay/fixtures/docker_session.rec
#include <iostream>

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
  } catch (const std::exception& e) {
    std::cerr << "recording failed: " << e.what() << "\n";
    return 1;
  }
  log->save(argv[1]);
  std::cout << log->transcript << "entries " << log->entries.size() << ", bytes moved "
            << log->input_bytes() << "\n";
  return 0;
}
