// libFuzzer harness: the HTTP response parser, fed at a fuzzer-chosen split size with the
// body taken between feeds (as a driver does), then EOF. Property: never crashes, never
// stalls (every feed either consumes, completes, upgrades, errs, or waits for take_body).
#include <cstdlib>

#include "sandboxio/codec/http.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t split = (data[0] % 64) + 1;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  sandboxio::http::ResponseParser p(
      sandboxio::http::ParserLimits{.max_head_bytes = 4096, .max_buffered_body = 512});
  std::size_t guard = 0;
  while (!rest.empty() && !p.error() && !p.upgraded()) {
    if (++guard > 100000) std::abort();  // livelock
    const std::size_t used = p.feed(rest.substr(0, split));
    rest.remove_prefix(used);
    (void)p.take_body();
    if (p.complete())
      p.reset();
    else if (used == 0 && !p.error() && !p.upgraded())
      std::abort();  // stalled with room
  }
  p.feed_eof();
  return 0;
}
