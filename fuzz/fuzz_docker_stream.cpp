// libFuzzer harness: the Docker stream demultiplexer at a fuzzer-chosen split size. Property:
// never crashes; payload bytes out never exceed bytes in.
#include <cstdlib>

#include "sandboxio/codec/docker_stream.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t split = (data[0] % 32) + 1;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  sandboxio::docker::StreamDemux demux(1 << 16);
  std::size_t out = 0;
  const std::size_t in = rest.size();
  while (!rest.empty()) {
    if (!demux.feed(rest.substr(0, split),
                    [&](sandboxio::docker::FrameType, std::string_view d) { out += d.size(); })) {
      break;
    }
    rest.remove_prefix(std::min(split, rest.size()));
  }
  if (out > in) std::abort();
  return 0;
}
