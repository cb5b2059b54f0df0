// libFuzzer harness: a flight-recorder trace is untrusted input (a file handed over, edited,
// cut short). Any bytes go through the trace reader and, when they hold a header, through a
// replay on the machine it names: a coded error (SBX_E1603, SBX_E1604) or a replay, never a
// crash, a hang or an allocation the bytes do not pay for. Seeds (corpus/flight) are traces
// recorded from fake://, docker:// (the exec API) and e2b:// sessions.
#include <string_view>

#include "sandboxio/flight_recorder.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  using namespace sandboxio;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  flight::TraceReader trace(bytes);
  if (!trace.header()) return 0;
  auto dsn = parse_dsn(trace.header().value().dsn);
  if (!dsn) return 0;
  // Machines whose making reads nothing large and starts nothing: not local://, which probes
  // the host, nor docker:// with its agent, whose binary it loads.
  const std::string& scheme = dsn.value().scheme;
  if (scheme != "fake" && scheme != "docker" && scheme != "e2b") return 0;
  if (scheme == "docker" && dsn.value().to_string().find("agent=off") == std::string::npos)
    return 0;
  auto machine = machine_for_replay(trace.header().value());
  if (!machine) return 0;
  auto summary = flight::replay(*machine.value(), trace);
  if (!summary && summary.problem().code != errc::TraceInvalid &&
      summary.problem().code != errc::ReplayDiverged)
    __builtin_trap();  // only those two codes
  return 0;
}
