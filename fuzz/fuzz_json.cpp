// libFuzzer harness: the JSON reader with a small size and depth bound. Properties: never
// crashes; anything accepted has a root whose nesting respects the depth bound.
#include <cstdlib>

#include "sandboxio/codec/json.hpp"

namespace {

std::size_t depth(const sandboxio::json::Value& v) {
  std::size_t d = 0;
  for (const auto& item : v.items())
    d = std::max(d, depth(item));
  for (const auto& [k, m] : v.members())
    d = std::max(d, depth(m));
  return d + 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  sandboxio::json::ParseLimits limits;
  limits.max_bytes = 1 << 16;
  limits.max_depth = 32;
  auto doc =
      sandboxio::json::parse(std::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (doc && depth(doc.value()) > limits.max_depth + 1) std::abort();
  return 0;
}
