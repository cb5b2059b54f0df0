// libFuzzer harness: the NDJSON line splitter at a fuzzer-chosen split size. Properties: never
// crashes; no line returned is longer than the bound or contains a newline.
#include <cstdlib>

#include "sandboxio/codec/http.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t split = (data[0] % 16) + 1;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  sandboxio::http::LineSplitter lines(256);
  while (!rest.empty()) {
    lines.feed(rest.substr(0, split));
    rest.remove_prefix(std::min(split, rest.size()));
    while (auto line = lines.next_line()) {
      if (line->size() > 256 || line->find('\n') != std::string::npos) std::abort();
    }
  }
  (void)lines.finish();
  return 0;
}
