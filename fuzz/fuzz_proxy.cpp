// libFuzzer harness: the egress proxy's request head parser, fed at a fuzzer-chosen split
// size. Properties: never crashes; consumes nothing once done or failed; a head it accepts
// names a host normalise_host() accepts and a port in 1..65535, and a forwarded request's
// upstream head has exactly one blank line, at its end; the policy check on what it names
// never throws; refusal() of any reason stays one response.
#include <cstdlib>

#include "sandboxio/codec/proxy.hpp"
#include "sandboxio/network_policy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t split = (data[0] % 64) + 1;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  sandboxio::proxy::HeadParser p(
      sandboxio::proxy::Limits{.max_head_bytes = 2048, .max_headers = 16});
  while (!rest.empty() && !p.done() && !p.error()) {
    const std::size_t used = p.feed(rest.substr(0, split));
    if (used == 0) std::abort();  // stalled with room
    rest.remove_prefix(used);
  }
  if ((p.done() || p.error()) && p.feed("x") != 0) std::abort();
  if (p.error() && (p.error_status() < 400 || p.error_status() > 599)) std::abort();
  if (p.done()) {
    const auto& t = p.target();
    const bool v6 = t.host.find(':') != std::string::npos;
    if (t.port == 0 || sandboxio::proxy::normalise_host(v6 ? "[" + t.host + "]" : t.host) != t.host)
      std::abort();
    if (t.kind == sandboxio::proxy::Target::Kind::Forward) {
      const auto blank = t.upstream_head.find("\r\n\r\n");
      if (blank == std::string::npos || blank + 4 != t.upstream_head.size()) std::abort();
    }
    const auto policy = sandboxio::NetworkPolicy::allowing({"*.example.com", "pypi.org:443"});
    (void)policy.allows(t.host, t.port);
  }
  const std::string r =
      sandboxio::proxy::refusal(403, std::string_view(reinterpret_cast<const char*>(data), size));
  if (r.find("\r\n\r\n") == std::string::npos || r.find("\r\n\r\n") != r.rfind("\r\n\r\n"))
    std::abort();
  return 0;
}
