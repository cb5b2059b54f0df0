// libFuzzer harness: the streaming tar reader at a fuzzer-chosen split size. Properties: never
// crashes or hangs; content handed over never exceeds the sizes the entries declared; reading
// the same bytes in one piece gives the same entries (splits do not change the meaning).
#include <cstdlib>
#include <string>
#include <vector>

#include "sandboxio/codec/tar.hpp"

namespace {

struct Seen {
  std::vector<std::string> names;
  std::uint64_t declared = 0, delivered = 0;
  bool error = false;
};

Seen read(std::string_view bytes, std::size_t split) {
  Seen s;
  sandboxio::tar::Reader r;
  while (!bytes.empty()) {
    const auto piece = bytes.substr(0, split);
    bytes.remove_prefix(piece.size());
    if (!r.feed(
            piece,
            [&](const sandboxio::tar::Entry& e) {
              s.names.push_back(e.name);
              s.declared += e.size;
            },
            [&](std::string_view d) { s.delivered += d.size(); }))
      break;
  }
  r.feed_eof();
  s.error = r.error().has_value();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t split = (data[0] % 64) + 1;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Seen a = read(bytes, split);
  const Seen b = read(bytes, bytes.size() + 1);
  if (a.delivered > a.declared) std::abort();
  if (a.names != b.names || a.error != b.error || a.delivered != b.delivered) std::abort();
  return 0;
}
