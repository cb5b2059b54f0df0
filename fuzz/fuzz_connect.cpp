// libFuzzer harness: Connect envelopes read at fuzzer-chosen split points, each message parsed
// as JSON and its error read, as the e2b:// machine does. Properties: no crash, a bounded
// buffer, and the same envelopes whatever the split.
#include <cstdlib>
#include <vector>

#include "sandboxio/codec/connect.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  using namespace sandboxio;
  if (size < 1) return 0;
  const std::size_t split = 1 + data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto read = [&](std::size_t step) {
    connect::EnvelopeReader r(4096);
    std::vector<std::string> out;
    for (std::size_t i = 0; i < bytes.size(); i += step) {
      r.feed(bytes.substr(i, step));
      while (auto e = r.next()) {
        if (auto doc = json::parse(e->message); doc) (void)connect::error_of(doc.value());
        out.push_back(std::string(1, static_cast<char>(e->flags)) + e->message);
      }
      if (r.buffered() > 4096 + 5 + step) std::abort();  // the bound holds
    }
    r.finish();
    return std::make_pair(out, r.error().has_value());
  };
  if (read(split) != read(bytes.size() + 1)) std::abort();  // the split changed the result
  return 0;
}
