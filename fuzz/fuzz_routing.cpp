// libFuzzer harness: the routing file parser (yaml-cpp underneath) on fuzzer-written YAML, then
// route_for on what parsed. Properties: no crash; an error always carries SBX_E1005.
#include <cstdlib>
#include <string_view>

#include "sandboxio/routing.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  using namespace sandboxio;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto table = RoutingTable::parse(text, "fuzz.yaml");
  if (!table) {
    if (table.problem().code != errc::InvalidRoutingFile) std::abort();
    return 0;
  }
  (void)table.value().route_for("run_code", "tenant-a");
  (void)table.value().route_for("", "");
  return 0;
}
