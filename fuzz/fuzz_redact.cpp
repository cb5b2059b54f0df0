// libFuzzer harness: the redactor. Properties: never crashes; a registered secret never
// survives redaction.
#include <cstdlib>

#include "sandboxio/redact.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  sandboxio::Redactor r;
  const std::string secret = "s3cr3t-KEY";
  r.add_secret(secret);
  const std::string out = r.redact(text);
  if (out.find(secret) != std::string::npos) std::abort();
  return 0;
}
