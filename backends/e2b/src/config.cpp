// e2b:// configuration: the DSN's options and E2B's own environment variables (E2B_API_KEY,
// E2B_DOMAIN, E2B_API_URL, E2B_SANDBOX_URL). This is the driver side of the backend: it reads
// the environment and the process identity once, and hands values to the machine.
#include "sandboxio/backend/core.hpp"
#include "sandboxio/backend/identity.hpp"
#include "sandboxio/e2b.hpp"

namespace sandboxio::e2b {
namespace {

using backend::env_or;

const OptionSpec kOptions[] = {
    {"api_url", OptionType::String,
     "control plane URL (default E2B_API_URL, else https://api.DOMAIN)"},
    {"sandbox_url", OptionType::String,
     "one URL for envd and the code interpreter (default E2B_SANDBOX_URL)"},
    {"domain", OptionType::String, "E2B domain (default E2B_DOMAIN, else e2b.app)"},
    {"ca", OptionType::String, "PEM file of trust anchors for TLS (default SSL_CERT_FILE)"},
    {"lease", OptionType::Duration,
     "owner lease: an abandoned sandbox ends within this (default 30s, at least 3s)"},
};

}  // namespace

Result<Origin> parse_origin(std::string_view url, const std::string& ca_file) {
  auto bad = [&](const std::string& why) {
    return Problem{errc::InvalidOption, "E2B URL \"" + std::string(url) + "\": " + why,
                   "Write https://HOST[:PORT] or http://HOST:PORT, without a path."};
  };
  Origin o;
  o.endpoint.kind = Endpoint::Kind::Tcp;
  std::string_view rest;
  if (url.starts_with("https://")) {
    o.endpoint.tls = true;
    o.endpoint.port = 443;
    rest = url.substr(8);
  } else if (url.starts_with("http://")) {
    o.endpoint.port = 80;
    rest = url.substr(7);
  } else {
    return bad("the scheme must be http or https");
  }
  while (!rest.empty() && rest.back() == '/')
    rest.remove_suffix(1);
  if (rest.find_first_of("/?#@ ") != std::string_view::npos)
    return bad("only a scheme, a host and a port");
  auto hp = backend::parse_host_port(rest, o.endpoint.port);
  if (!hp) return bad(hp.problem().detail);
  o.endpoint.address = std::move(hp.value().host);
  o.endpoint.port = hp.value().port;
  const bool default_port = o.endpoint.port == (o.endpoint.tls ? 443 : 80);
  const bool v6 = o.endpoint.address.find(':') != std::string::npos;
  o.host = (v6 ? "[" + o.endpoint.address + "]" : o.endpoint.address) +
           (default_port ? "" : ":" + std::to_string(o.endpoint.port));
  if (o.endpoint.tls) {
    o.endpoint.server_name = o.endpoint.address;
    o.endpoint.ca_file = ca_file;
  }
  return o;
}

Result<Config> config_for(const Dsn& dsn) {
  auto typed = dsn.typed(kOptions);
  if (!typed) return typed.problem();
  const TypedOptions& o = typed.value();
  Config c;
  c.template_id = dsn.target;  // may be empty for listing and reaping; create() refuses that
  c.api_key = env_or("E2B_API_KEY");
  c.domain = o.has("domain") ? o.string("domain") : env_or("E2B_DOMAIN", "e2b.app");
  c.ca_file = o.has("ca") ? o.string("ca") : std::string{};
  const std::string api =
      o.has("api_url") ? o.string("api_url") : env_or("E2B_API_URL", "https://api." + c.domain);
  auto origin = parse_origin(api, c.ca_file);
  if (!origin) return origin.problem();
  c.api = std::move(origin).value();
  const std::string sandbox =
      o.has("sandbox_url") ? o.string("sandbox_url") : env_or("E2B_SANDBOX_URL");
  if (!sandbox.empty()) {
    auto s = parse_origin(sandbox, c.ca_file);
    if (!s) return s.problem();
    c.sandbox = std::move(s).value();
  }
  if (o.has("lease")) {
    const auto lease = std::chrono::duration_cast<std::chrono::seconds>(o.duration("lease"));
    if (lease < std::chrono::seconds(3))
      return Problem{errc::InvalidOption, "e2b:// lease must be at least 3s",
                     "The lease is renewed every third of it; outlive_owner turns it off."};
    c.lease = lease;
  }
  c.owner = backend::process_owner();
  c.session = backend::process_session();
  return c;
}

BackendEntry backend_entry() {
  return backend::entry("e2b", "E2B cloud microVMs (control plane, envd and the code interpreter)",
                        kOptions, config_for, make_machine);
}

}  // namespace sandboxio::e2b
