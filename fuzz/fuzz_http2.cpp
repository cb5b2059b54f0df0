// libFuzzer harness: the HTTP/2 client codec with three streams open (two downloads, one
// upload), fed the fuzzer's bytes as the server's at a fuzzer-chosen split, its output taken
// after every piece. Stream 1's reader never consumes; the others consume what they get.
// Properties: no crash or sanitizer report; every byte is taken unless the connection failed;
// a failure is a coded error that stays; stream 1 never holds more than its window and one
// frame; events stay proportional to the input.
#include <cstdlib>

#include "sandboxio/codec/http2.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  using namespace sandboxio;
  if (size < 2) return 0;
  const std::size_t split = 1 + data[0];
  http2::Limits limits;
  limits.stream_window = (data[1] & 1) != 0 ? 16384 : 65535;
  limits.max_header_list_bytes = (data[1] & 2) != 0 ? 256 : 4096;
  limits.max_concurrent_streams = 8;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 2, size - 2);

  http2::Client c(limits);
  const http2::Request get{"GET", "https", "envd:49983", "/files?path=/a", {{"accept", "*/*"}}};
  if (!c.submit_request(get, true) || !c.submit_request(get, true)) std::abort();
  auto up = c.submit_request({"POST", "https", "envd:49983", "/files", {}}, false);
  if (!up) std::abort();
  c.submit_data(up.value(), std::string(70000, 'u'), true);
  (void)c.take_output();

  std::size_t held = 0, events = 0;
  bool failed = false;
  for (std::size_t i = 0; i < bytes.size(); i += split) {
    const std::string_view piece = bytes.substr(i, split);
    const std::size_t used = c.handle_bytes(piece);
    if (c.error()) {
      if (c.error()->code != errc::RemoteProtocolViolation &&
          c.error()->code != errc::ProtocolError)
        std::abort();
      failed = true;
    } else if (used != piece.size()) {
      std::abort();  // bytes left over without an error
    }
    while (auto e = c.poll_event()) {
      ++events;
      if (auto* d = std::get_if<http2::Data>(&*e)) {
        if (d->stream == 1)
          held += d->bytes.size();
        else
          c.consume(d->stream, d->bytes.size());
      }
      if (auto* r = std::get_if<http2::Reset>(&*e); r != nullptr && r->problem.detail.empty())
        std::abort();  // every reset says why
    }
    if (held > 65535 + 16384) std::abort();  // the slow stream passed its window
    (void)c.take_output();
    if (failed) {
      if (c.handle_bytes("x") != 0 || !c.error()) std::abort();  // sticky
      break;
    }
  }
  if (events > 16 + bytes.size()) std::abort();  // every event needs a byte of input
  if (!failed && c.error()) std::abort();
  return 0;
}
