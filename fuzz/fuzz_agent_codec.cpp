// libFuzzer harness: the agent protocol codec, both directions (the host decodes what the
// agent sends, the agent decodes what the host sends; it is one codec). Bytes are split into
// frames at a fuzzer-chosen size; every frame's payload is decoded as every message. Properties:
// never crashes or allocates beyond the input (list counts are checked against what is left);
// a payload that decodes re-encodes to the same bytes (one wire form per message); frames out
// never carry more bytes than came in.
#include <cstdlib>
#include <string>

#include "sandboxio/codec/agent.hpp"

namespace {

using namespace sandboxio::agent;

template <class M>
void round_trip(const std::string& payload) {
  auto m = M::decode(payload);
  if (m && m.value().encode() != payload) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t split = (data[0] % 64) + 1;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t in = rest.size();
  FrameReader reader(1 << 16);
  std::size_t out = 0;
  while (!rest.empty()) {
    const bool ok = reader.feed(rest.substr(0, split), [&](Frame f) {
      out += f.payload.size() + kHeaderSize;
      round_trip<Hello>(f.payload);
      round_trip<Welcome>(f.payload);
      round_trip<Start>(f.payload);
      round_trip<Started>(f.payload);
      round_trip<Signal>(f.payload);
      round_trip<Credit>(f.payload);
      round_trip<Output>(f.payload);
      round_trip<Exit>(f.payload);
      round_trip<PathRequest>(f.payload);
      round_trip<Done>(f.payload);
      round_trip<Failure>(f.payload);
      round_trip<Entries>(f.payload);
      round_trip<Ping>(f.payload);
      round_trip<ContextStart>(f.payload);
      round_trip<RunCode>(f.payload);
      round_trip<CodeEvent>(f.payload);
      round_trip<CodeDone>(f.payload);
      round_trip<EgressListen>(f.payload);
      round_trip<TunnelSocket>(f.payload);
      round_trip<TunnelDone>(f.payload);
      if (frame(f.type, f.channel, f.payload).size() != f.payload.size() + kHeaderSize)
        std::abort();
      // The agent's one-copy output path writes exactly the frame the message would make.
      if (auto o = Output::decode(f.payload)) {
        std::string queued = "already queued";
        append_output(queued, f.channel, o.value().stream, o.value().data);
        if (queued != "already queued" + frame(Type::Output, f.channel, o.value().encode()))
          std::abort();
      }
    });
    if (!ok) break;
    rest.remove_prefix(std::min(split, rest.size()));
  }
  if (out > in) std::abort();
  return 0;
}
