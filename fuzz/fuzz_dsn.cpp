// libFuzzer harness: the DSN parser. Properties: never crashes; a DSN it accepts prints back to
// a text that parses to the same value; typed options never throw.
#include <cstdlib>

#include "sandboxio/dsn.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto dsn = sandboxio::parse_dsn(text);
  if (!dsn) return 0;
  auto again = sandboxio::parse_dsn(dsn.value().to_string());
  if (!again || !(again.value() == dsn.value())) std::abort();  // the round trip must hold
  (void)dsn.value().typed({{"pull", sandboxio::OptionType::String},
                           {"readonly", sandboxio::OptionType::Bool},
                           {"pids", sandboxio::OptionType::Int},
                           {"grace", sandboxio::OptionType::Duration}});
  return 0;
}
