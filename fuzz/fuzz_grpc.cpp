// libFuzzer harness: a gRPC answer's body (length-prefixed messages) read by CallReader at a
// fuzzer-chosen split, under a fuzzer-chosen head (200 or an HTTP error, gRPC content-type or
// not, Trailers-Only or not) and end (trailers with a fuzzer-chosen grpc-status, a bare end, a
// reset). Properties: no crash; what is buffered stays within the message bound plus the last
// piece; no message exceeds the bound; the messages and the status are the same whatever the
// split; nothing changes once the call is done.
#include <cstdlib>
#include <string>
#include <vector>

#include "sandboxio/codec/grpc.hpp"

namespace {

struct Outcome {
  std::vector<std::string> messages;
  int code = -1;
  std::string message;
  bool operator==(const Outcome&) const = default;
};

Outcome read(std::string_view body, std::size_t step, unsigned char how, std::size_t max) {
  using namespace sandboxio;
  grpc::CallReader c(max);
  Outcome out;
  const int http = (how & 0x3) == 3 ? 503 : 200;
  std::vector<http::Header> head{
      {"content-type", (how & 0x4) != 0 ? "text/plain" : "application/grpc"}};
  if ((how & 0x8) != 0) head.push_back({"grpc-status", std::to_string(how >> 4)});
  c.on(http2::Response{1, http, head});
  for (std::size_t i = 0; i < body.size(); i += step) {
    c.on(http2::Data{1, std::string(body.substr(i, step))});
    if (c.buffered() > max + 5 + step) std::abort();
    while (auto m = c.next_message()) {
      if (m->size() > max) std::abort();
      out.messages.push_back(std::move(*m));
    }
  }
  switch (how >> 6) {
    case 0:
      c.on(http2::Trailers{1,
                           {{"grpc-status", std::to_string((how >> 2) & 0xf)},
                            {"grpc-message", std::string(body.substr(0, 8))}}});
      break;
    case 1:
      c.on(http2::End{1});
      break;
    case 2:
      c.on(http2::Reset{1, how & 0xfU, false, Problem{errc::RemoteProtocolViolation, "reset", {}}});
      break;
    default:
      c.on(http2::Trailers{1, {}});
      break;
  }
  while (auto m = c.next_message())
    out.messages.push_back(std::move(*m));
  if (!c.done()) std::abort();  // every end ends the call
  out.code = static_cast<int>(c.status().code);
  out.message = c.status().message;
  c.on(http2::Trailers{1, {{"grpc-status", "0"}}});
  if (static_cast<int>(c.status().code) != out.code) std::abort();  // done is final
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  if (size < 3) return 0;
  const std::size_t step = 1 + data[0];
  const unsigned char how = data[1];
  const std::size_t max = (data[2] & 1) != 0 ? 64 : 4096;
  const std::string_view body(reinterpret_cast<const char*>(data) + 3, size - 3);
  if (read(body, step, how, max) != read(body, body.size() + 1, how, max)) std::abort();
  return 0;
}
